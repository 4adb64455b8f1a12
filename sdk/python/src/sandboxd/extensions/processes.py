"""The group "processes" of ``api/extensions.yaml``: background processes in a ready sandbox
(``/v1/sandboxes/{sandboxId}/processes``), their stdin, signals, and the Server-Sent Events stream of
their output, which keeps the last 64 MiB of each process addressed by byte offset.

:meth:`sandboxd.Sandbox.start_process` starts one (fenced by the sandbox's generation) and
:meth:`sandboxd.Sandbox.process_output` reads its output as an iterator of :class:`OutputChunk`, which
reconnects from the offset it reached when a connection drops and ends with the stream's ``end`` event
(:class:`ProcessEnd`, its ``reason`` ``exited`` once every byte was read). A pause of the sandbox holds
the stream on its connection: its ``paused`` says so, ``on_heartbeat`` hears each
:class:`StreamHeartbeat`, and the output goes on where it was after the resume.
"""

from __future__ import annotations

import base64
import collections
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, ClassVar, Deque, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union

from .._sse import Parser, SSEError
from .._transport import RESPONSE_HOOKS, Backoff, Lost, Request, Retry, json_body, observe, path
from ..errors import ConnectionFailed, SandboxdError, UnexpectedResponse
from ..types import JSONObject, _obj, _opt, _req, _time, _wire

__all__ = [
    "OutputChunk",
    "OutputDropped",
    "Process",
    "ProcessEnd",
    "Signal",
    "StreamHeartbeat",
    "StreamState",
    "TerminalSize",
]

Signal = Literal["HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "WINCH"]
"""The signals a process's group may be sent."""

StreamState = Literal["running", "paused"]
"""What a stream's heartbeat says of its sandbox: ``paused``, or ``running`` again."""

RESUMED_ENDS = frozenset({"slow_client"})
"""End reasons after which an output stream opens again from its offset by itself (the client fell
behind; nothing the sandbox kept is lost)."""


def _b64(data: Union[bytes, str]) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class Process:
    """A background process: ``exit_code`` is None while it runs and 128+n when signal n killed it;
    its output is kept from ``output_oldest`` to ``output_end`` (byte offsets from its first byte)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/Process"

    pid: int = _wire("pid")
    argv: Tuple[str, ...] = _wire("argv")
    cwd: str = _wire("cwd")
    running: bool = _wire("running")
    exit_code: Optional[int] = _wire("exitCode")
    started_at: datetime = _wire("startedAt")
    output_oldest: int = _wire("outputOldest")
    output_end: int = _wire("outputEnd")
    tag: Optional[str] = _wire("tag", default=None)
    finished_at: Optional[datetime] = _wire("finishedAt", default=None)
    output_error: Optional[str] = _wire("outputError", default=None)
    pty: bool = _wire("pty", default=False)

    @classmethod
    def from_json(cls, v: Any) -> Process:
        w = "process"
        d = _obj(v, w)
        argv = _req(d, "argv", list, w)
        if not all(isinstance(a, str) for a in argv):
            raise UnexpectedResponse(f"{w}.argv: want strings")
        if "exitCode" not in d:
            raise UnexpectedResponse(f"{w}: required property 'exitCode' is missing")
        code = d.get("exitCode")
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise UnexpectedResponse(f"{w}.exitCode: want an integer or null")
        return cls(
            pid=_req(d, "pid", int, w),
            argv=tuple(argv),
            cwd=_req(d, "cwd", str, w),
            running=_req(d, "running", bool, w),
            exit_code=code,
            started_at=_time(d, "startedAt", w),
            output_oldest=_req(d, "outputOldest", int, w),
            output_end=_req(d, "outputEnd", int, w),
            tag=_opt(d, "tag", str, w),
            finished_at=_time(d, "finishedAt", w) if d.get("finishedAt") is not None else None,
            output_error=_opt(d, "outputError", str, w),
            pty=bool(_opt(d, "pty", bool, w)),
        )


@dataclass(frozen=True)
class TerminalSize:
    """The size of a process's pseudo-terminal, in character cells (each 1..65535)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/TerminalSize"

    rows: int = _wire("rows")
    cols: int = _wire("cols")

    @classmethod
    def from_json(cls, v: Any) -> TerminalSize:
        w = "terminal size"
        d = _obj(v, w)
        return cls(rows=_req(d, "rows", int, w), cols=_req(d, "cols", int, w))


@dataclass(frozen=True)
class OutputChunk:
    """Bytes of a process's output (stdout and stderr combined) from ``offset``."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ProcessOutputEvent"

    offset: int = _wire("offset")
    data: bytes = _wire("dataBase64")

    @property
    def end(self) -> int:
        """The offset past these bytes, where the next chunk starts."""
        return self.offset + len(self.data)


@dataclass(frozen=True)
class OutputDropped:
    """The bytes from ``start`` to ``stop`` were no longer kept when asked for (the process wrote more
    than 64 MiB since); the output went on at ``stop``."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ProcessDroppedEvent"

    start: int = _wire("from")
    stop: int = _wire("to")

    @classmethod
    def from_json(cls, v: Any) -> OutputDropped:
        w = "process dropped event"
        d = _obj(v, w)
        return cls(start=_req(d, "from", int, w), stop=_req(d, "to", int, w))


@dataclass(frozen=True)
class ProcessEnd:
    """Why an output stream ended: ``reason`` is ``exited`` (every byte was read; ``exit_code`` is the
    process's), ``paused``, ``terminated``, ``recreated``, ``agent_unavailable``, ``daemon_stopping``
    or ``error``; ``offset`` is where a new stream would resume."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ProcessEndEvent"

    reason: str = _wire("reason")
    offset: int = _wire("offset")
    exit_code: Optional[int] = _wire("exitCode", default=None)
    message: Optional[str] = _wire("message", default=None)

    @classmethod
    def from_json(cls, v: Any) -> ProcessEnd:
        w = "process output end"
        d = _obj(v, w)
        code = d.get("exitCode")
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise UnexpectedResponse(f"{w}.exitCode: want an integer or null")
        return cls(
            reason=_req(d, "reason", str, w),
            offset=_req(d, "offset", int, w),
            exit_code=code,
            message=_opt(d, "message", str, w),
        )


@dataclass(frozen=True)
class StreamHeartbeat:
    """A heartbeat event of a process's output stream or a watch: the daemon sends one saying
    ``paused`` as the sandbox pauses and every heartbeat interval (15 s) after, and one saying
    ``running`` after the resume, from which the stream goes on where it was. ``offset`` is an output
    stream's: where its output goes on (None on a watch). A running stream's heartbeats are comments,
    which make no event."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/StreamHeartbeatEvent"

    state: StreamState = _wire("state")
    offset: Optional[int] = _wire("offset", default=None)

    @classmethod
    def from_json(cls, v: Any) -> StreamHeartbeat:
        w = "stream heartbeat"
        d = _obj(v, w)
        state = _req(d, "state", str, w)
        if state not in ("running", "paused"):
            raise UnexpectedResponse(f"{w}.state: want running or paused, got {state[:50]!r}")
        offset = _opt(d, "offset", int, w)
        if offset is not None and offset < 0:
            raise UnexpectedResponse(f"{w}.offset: want a count of bytes, got {offset}")
        return cls(state="paused" if state == "paused" else "running", offset=offset)

    @classmethod
    def parse(cls, data: str) -> Optional[StreamHeartbeat]:
        """The heartbeat the data of a heartbeat event says, or None when it says none (not JSON, not
        an object, a state this client does not know, an offset that is not a count of bytes): the
        readers skip such an event and read on."""
        try:
            doc = json.loads(data)
            beat = cls.from_json(doc)
        except (ValueError, RecursionError, UnexpectedResponse):
            return None
        if RESPONSE_HOOKS:
            observe("streamHeartbeat", 200, doc)
        return beat


HeartbeatHook = Callable[[StreamHeartbeat], None]
"""Called with each heartbeat event of a stream (``on_heartbeat``). What it raises ends the stream
with that error."""


def process_list(doc: Any) -> List[Process]:
    items = doc.get("processes") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise UnexpectedResponse("listProcesses: want {'processes': [...]}")
    return [Process.from_json(p) for p in items]


class Output:
    """What the bytes of output streams come to, across the connections of one reader: each "output"
    an OutputChunk, each "dropped" an OutputDropped kept in ``dropped``, the "end" a ProcessEnd, each
    "heartbeat" the state in ``paused`` and a call of ``on_heartbeat``. It knows the offset to resume
    from; the synchronous and asynchronous readers feed it what they read."""

    def __init__(self, after: int, on_heartbeat: Optional[HeartbeatHook] = None) -> None:
        self.offset = after
        self.end: Optional[ProcessEnd] = None
        self.dropped: List[OutputDropped] = []
        self.paused = False
        self._on_heartbeat = on_heartbeat
        self._parser = Parser()

    def reconnect(self) -> None:
        """A new connection starts: what the last one left half-sent is forgotten."""
        self._parser = Parser()

    def resumes(self) -> bool:
        """Whether the end the stream sent is one a new connection goes on from."""
        return self.end is not None and self.end.reason in RESUMED_ENDS

    def feed(self, chunk: bytes) -> List[OutputChunk]:
        """The chunks chunk completes; what is not a stream of output is an UnexpectedResponse."""
        try:
            msgs = self._parser.feed(chunk)
        except SSEError as e:
            raise UnexpectedResponse(f"process output: {e}") from None
        out: List[OutputChunk] = []
        for m in msgs:
            c = self._take(m.event, m.data)
            if c is not None:
                out.append(c)
        return out

    def _take(self, event: str, data: str) -> Optional[OutputChunk]:
        if event == "heartbeat":
            beat = StreamHeartbeat.parse(data)
            if beat is None:
                return None  # one that says nothing this client knows: the stream goes on
            self.paused = beat.state == "paused"
            if self._on_heartbeat is not None:
                self._on_heartbeat(beat)
            return None
        if event not in ("output", "dropped", "end"):
            return None  # an event this client does not know
        try:
            doc = json.loads(data)
            d = _obj(doc, f"process {event} event")
            if event == "end":
                self.paused = False
                self.end = ProcessEnd.from_json(d)
                self.offset = max(self.offset, self.end.offset)
                return None
            if event == "dropped":
                drop = OutputDropped.from_json(d)
                self.dropped.append(drop)
                self.offset = max(self.offset, drop.stop)
                return None
            offset = _req(d, "offset", int, "output")
            raw = base64.b64decode(_req(d, "dataBase64", str, "output"), validate=True)
        except (ValueError, SandboxdError) as e:
            raise UnexpectedResponse(f"process output: the data of a {event!r} event: {e}") from None
        if RESPONSE_HOOKS:
            observe("streamProcessOutput", 200, doc)
        c = OutputChunk(offset=offset, data=raw)
        if c.end <= self.offset:
            return None  # a repeat, after a reconnect, of bytes already given
        if c.offset < self.offset:
            c = OutputChunk(offset=self.offset, data=raw[self.offset - c.offset :])
        self.offset = c.end
        self.paused = False
        return c


class Reading:
    """What the synchronous and asynchronous readers of a process's output share: the Output, the
    chunks not yet given, and when to open a connection again, which they do the waiting and I/O of."""

    def __init__(
        self,
        sandbox_id: str,
        generation: int,
        pid: int,
        after: int,
        read_timeout: float,
        backoff: Backoff,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.generation = generation
        self.pid = pid
        self.read_timeout = read_timeout
        self.backoff = backoff
        self.out = Output(after, on_heartbeat)
        self.pending: Deque[OutputChunk] = collections.deque()
        self.failures = 0
        self.closed = False

    @property
    def end(self) -> Optional[ProcessEnd]:
        """Why the stream ended, once it has (None before, and when it was closed by this side)."""
        return self.out.end

    @property
    def offset(self) -> int:
        """The offset past the last byte given: where a new stream would resume."""
        return self.out.offset

    @property
    def dropped(self) -> List[OutputDropped]:
        """The ranges of output skipped because they were no longer kept."""
        return list(self.out.dropped)

    @property
    def paused(self) -> bool:
        """Whether the stream's last heartbeat said the sandbox is paused: the next chunk waits for the
        resume on the same connection. False again with the resume's heartbeat, the next output, or
        the end. It may be read from any thread or task."""
        return self.out.paused

    def request(self) -> Request:
        """The request of a connection from the offset reached."""
        return stream_process_output(self.sandbox_id, self.generation, self.pid, self.out.offset)

    def goes_on(self) -> Tuple[bool, bool]:
        """(whether to read on, whether the connection open now is done with)."""
        if self.closed:
            return False, True
        if self.out.end is None:
            return True, False
        if not self.out.resumes():
            return False, True
        self.out.end = None
        return True, True

    def take(self, chunk: bytes) -> None:
        """What one read of the connection gave; b"" is a connection that ended early (Lost)."""
        if not chunk:
            raise Lost("the stream ended without its end event")
        got = self.out.feed(chunk)
        if got:
            self.failures = 0
        self.pending.extend(got)

    def failed(self, e: BaseException) -> float:
        """The wait before the next connection after e, or ConnectionFailed once the retries without
        progress are spent."""
        self.failures += 1
        if self.failures > self.backoff.retries:
            self.closed = True
            raise ConnectionFailed(f"process output: {e.__cause__ or e}") from None
        return self.backoff.delay(self.failures)


# --- requests ---


def _procs(sandbox_id: str, *rest: str) -> str:
    return path("v1", "sandboxes", sandbox_id, "processes", *rest)


def start_process(
    sandbox_id: str,
    generation: int,
    argv: Sequence[str],
    *,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    stdin: Optional[Union[bytes, str]],
    close_stdin: bool,
    tag: Optional[str],
    pty: Optional[Tuple[int, int]] = None,
) -> Request:
    doc: Dict[str, Any] = {"expectedGeneration": generation, "argv": list(argv)}
    if cwd is not None:
        doc["cwd"] = cwd
    if env:
        doc["env"] = dict(env)
    if stdin is not None:
        doc["stdinBase64"] = _b64(stdin)
    if close_stdin:
        doc["closeStdin"] = True
    if tag is not None:
        doc["tag"] = tag
    if pty is not None:
        rows, cols = pty
        doc["pty"] = {"rows": rows, "cols": cols}
    # Never repeated once sent: it would start the process twice.
    return Request("startProcess", "POST", _procs(sandbox_id), body=json_body(doc))


def _gen(generation: int) -> Tuple[Tuple[str, str], ...]:
    return (("expectedGeneration", str(generation)),)


def list_processes(sandbox_id: str, generation: int) -> Request:
    return Request("listProcesses", "GET", _procs(sandbox_id), query=_gen(generation), retry=Retry.SERVER)


def get_process(sandbox_id: str, generation: int, pid: int) -> Request:
    return Request("getProcess", "GET", _procs(sandbox_id, str(pid)), query=_gen(generation), retry=Retry.SERVER)


def wait_process(sandbox_id: str, generation: int, pid: int, timeout: float, http_timeout: float) -> Request:
    ms = max(0, min(3_600_000, int(timeout * 1000)))
    return Request(
        "waitProcess",
        "POST",
        _procs(sandbox_id, str(pid), "wait"),
        body=json_body({"expectedGeneration": generation, "timeoutMs": ms}),
        retry=Retry.SERVER,  # a wait changes nothing
        timeout=ms / 1000 + http_timeout,
    )


def write_process_stdin(sandbox_id: str, generation: int, pid: int, data: Union[bytes, str], close: bool) -> Request:
    doc: JSONObject = {"expectedGeneration": generation}
    if data:
        doc["dataBase64"] = _b64(data)
    if close:
        doc["close"] = True
    # Never repeated once sent: the bytes would be written twice.
    return Request("writeProcessStdin", "POST", _procs(sandbox_id, str(pid), "stdin"), body=json_body(doc))


def signal_process(sandbox_id: str, generation: int, pid: int, signal: str) -> Request:
    return Request(
        "signalProcess",
        "POST",
        _procs(sandbox_id, str(pid), "signal"),
        body=json_body({"expectedGeneration": generation, "signal": signal}),
    )


def resize_process(sandbox_id: str, generation: int, pid: int, rows: int, cols: int) -> Request:
    # Repeating it sets the same size again: safe to retry.
    return Request(
        "resizeProcess",
        "POST",
        _procs(sandbox_id, str(pid), "resize"),
        body=json_body({"expectedGeneration": generation, "rows": rows, "cols": cols}),
        retry=Retry.SERVER,
    )


def terminal_path(sandbox_id: str, generation: int, pid: int, after: int, mode: str) -> str:
    """The path and query of the terminal attach (a WebSocket, GET .../terminal): the standard library
    has no WebSocket client, so a program attaches with one of its own choosing, sending the client's
    Authorization header."""
    if mode not in ("control", "watch"):
        raise ValueError(f"mode {mode!r}: want control or watch")
    return f"{_procs(sandbox_id, str(pid), 'terminal')}?expectedGeneration={generation}&after={after}&mode={mode}"


def stream_process_output(sandbox_id: str, generation: int, pid: int, after: int) -> Request:
    return Request(
        "streamProcessOutput",
        "GET",
        _procs(sandbox_id, str(pid), "output"),
        query=(("expectedGeneration", str(generation)), ("after", str(after))),
        headers=(("Accept", "text/event-stream"),),
        retry=Retry.SERVER,
    )


def stdin_result(doc: Any) -> Tuple[int, bool]:
    d = _obj(doc, "stdin")
    return _req(d, "written", int, "stdin"), _req(d, "closed", bool, "stdin")
