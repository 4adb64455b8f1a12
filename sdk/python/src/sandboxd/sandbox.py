"""The synchronous sandbox: :class:`Sandbox` and its :class:`Files`."""

from __future__ import annotations

import collections
import os
import posixpath
import time
from pathlib import Path
from typing import Any, Callable, Deque, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _ops
from ._common import (
    DEFAULT_READ_TIMEOUT,
    DEFAULT_WAIT,
    Argv,
    Tracker,
    as_bytes,
    checked,
    command_argv,
    finish,
    is_own_recreate,
    make_spec,
    outcome,
    recreate_spec,
    settled,
    stdin_plan,
    timed_out,
    written,
)
from ._sync import SyncStream
from ._transport import Lost, Request, Unsent
from .client import Client, EventStream
from .errors import (
    ConnectionFailed,
    EventHistoryUnavailable,
    GenerationConflict,
    NotFound,
    SandboxdError,
    UnexpectedResponse,
    ValidationError,
)
from .extensions.lifetime import Lifetime, RecordedLifetime
from .extensions.network import (
    Denials,
    NetworkDenial,
    NetworkDenialsEnd,
    NetworkPolicy,
    NetworkStatus,
    get_network,
    set_network,
    stream_network_denials,
)
from .extensions.processes import (
    HeartbeatHook,
    OutputChunk,
    Process,
    Reading,
    Signal,
    TerminalSize,
    get_process,
    list_processes,
    process_list,
    resize_process,
    signal_process,
    start_process,
    stdin_result,
    stream_process_output,
    terminal_path,
    wait_process,
    write_process_stdin,
)
from .extensions.ports import PreviewToken, create_preview_token, port_path
from .relay import PortConnection, PortForward
from .extensions.checkpoints import Checkpoint, checkpoint_list, checkpoint_sandbox, list_checkpoints
from .extensions.stats import SandboxStats, get_sandbox_stats
from .extensions.volumes import VolumeMount
from .types import (
    CommandResult,
    Failure,
    FileEntry,
    FileReadResult,
    Resources,
    SandboxResource,
    SandboxSpec,
)

__all__ = ["DenialStream", "Files", "Sandbox"]

Data = Union[bytes, bytearray, memoryview, str]


class Sandbox:
    """One sandbox, at the generation it was last seen at.

    Every call is fenced by that generation (``expectedGeneration``): if the sandbox has been recreated
    behind this object's back, the call raises :class:`~sandboxd.errors.GenerationConflict` instead of
    touching the new generation; :meth:`refresh` adopts the current one. The object updates its view
    (``resource``, ``generation``, ``state``) from every answer about the sandbox.

    As a context manager it terminates the sandbox at exit.
    """

    def __init__(self, client: Client, resource: SandboxResource, *, own_client: bool = False) -> None:
        self.client = client
        self.resource = resource
        self.files = Files(self)
        self._own_client = own_client
        self._cursor: Optional[int] = None  # the newest of its events seen

    # --- creating ---

    @classmethod
    def create(
        cls,
        client: Optional[Client] = None,
        *,
        image: Optional[str] = None,
        template: Optional[str] = None,
        resources: Optional[Resources] = None,
        required_capabilities: Optional[Iterable[str]] = None,
        extensions: Optional[Mapping[str, Any]] = None,
        client_request_id: Optional[str] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        lifetime: Optional[Lifetime] = None,
        volumes: Optional[Sequence[VolumeMount]] = None,
        network: Optional[NetworkPolicy] = None,
    ) -> Sandbox:
        """Creates a sandbox and, unless ``wait`` is False, waits up to ``timeout`` seconds for it to be
        ready, following the event stream.

        ``lifetime`` (a :class:`~sandboxd.extensions.Lifetime`, e.g. ``Lifetime(ttl_seconds=3600)``)
        goes into ``extensions["sandboxd.lifetime"]``: the daemon terminates the sandbox after its time
        to live and pauses or terminates it after its idle bound; :attr:`lifetime` reads back what holds.
        ``volumes`` (:class:`~sandboxd.extensions.VolumeMount` s) go into
        ``extensions["sandboxd.volumes"]``: the persistent volumes it mounts (each must exist, else
        ValidationError; a second writer of a volume that is not shared fails with ``failure.code``
        ``volume_in_use``). ``network`` (a :class:`~sandboxd.extensions.NetworkPolicy`) goes into
        ``extensions["sandboxd.network"]``: its egress policy (:meth:`network` reads it back).

        Without a client it makes one from ``$SANDBOXD_URL`` and ``$SANDBOXD_TOKEN`` and closes it with
        the sandbox. The create carries a ``clientRequestId`` (``client_request_id``, else a fresh one),
        so a create repeated after a lost answer returns the sandbox the first one made, never a second.

        Errors: ValidationError, UnsupportedCapability (a required capability, an image or template the
        provider lacks), IdempotencyConflict (``client_request_id`` used with another spec),
        ProviderUnavailable; SandboxFailed when the sandbox fails before it is ready, with its
        ``failure``; WaitTimeout.
        """
        own = client is None
        c = client or Client()
        try:
            spec = make_spec(
                image=image,
                template=template,
                resources=resources,
                required_capabilities=required_capabilities,
                extensions=extensions,
                client_request_id=client_request_id,
                lifetime=lifetime,
                volumes=volumes,
                network=network,
            )
            after = c._known_cursor() if wait else None
            sb = cls(c, SandboxResource.from_json(c._call(_ops.create_sandbox(spec))), own_client=own)
            if wait:
                sb._wait("ready", timeout, after)
            return sb
        except BaseException:
            if own:
                c.close()
            raise

    @classmethod
    def connect(cls, client: Client, sandbox_id: str) -> Sandbox:
        """The existing sandbox of that id, at its current generation. Errors: NotFound."""
        return cls(client, client._get(sandbox_id))

    # --- what it is ---

    @property
    def id(self) -> str:
        return self.resource.id

    @property
    def generation(self) -> int:
        """The generation every call is fenced by."""
        return self.resource.generation

    @property
    def state(self) -> str:
        """The state when last seen (see :meth:`refresh`)."""
        return self.resource.state

    @property
    def spec(self) -> SandboxSpec:
        return self.resource.spec

    @property
    def failure(self) -> Optional[Failure]:
        """Why it failed, when its state is ``failed``."""
        return self.resource.failure

    @property
    def lifetime(self) -> Optional[RecordedLifetime]:
        """The lifetime that holds for this generation when last seen (its time to live, with the
        deadline as a time, and its idle bound), from ``providerExtensions["sandboxd.lifetime"]``; None
        when it has none."""
        return RecordedLifetime.of(self.resource.provider_extensions)

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} generation {self.generation} {self.state}>"

    def _apply(self, doc: Any) -> Sandbox:
        self.resource = SandboxResource.from_json(doc)
        return self

    # --- lifecycle ---

    def refresh(self) -> Sandbox:
        """Reads the sandbox anew and adopts its current generation. Errors: NotFound."""
        self.resource = self.client._get(self.id)
        return self

    def reconcile(self) -> Sandbox:
        """Has the daemon observe the provider's resource afresh and record what it finds (it needs no
        generation and changes no desired state). Errors: NotFound, ProviderUnavailable."""
        return self._apply(self.client._call(_ops.reconcile_sandbox(self.id)))

    def pause(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Freezes the sandbox (its running commands stop until :meth:`resume`); with ``wait``, until it
        is ``paused``. Pausing a paused sandbox changes nothing. Errors: GenerationConflict,
        InvalidState, UnsupportedCapability (no pauseResume), ProviderUnavailable; with wait,
        UnexpectedState/SandboxFailed and WaitTimeout."""
        return self._act(_ops.pause_sandbox(self.id, self.generation), "paused", wait, timeout)

    def resume(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Thaws a paused sandbox; with ``wait``, until it is ``ready``. Errors as :meth:`pause`."""
        return self._act(_ops.resume_sandbox(self.id, self.generation), "ready", wait, timeout)

    def terminate(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Releases the sandbox's generation; with ``wait``, until it is ``terminated``. It works in every
        state, and terminating a terminated sandbox changes nothing. Errors: GenerationConflict;
        with wait, WaitTimeout."""
        return self._act(_ops.terminate_sandbox(self.id, self.generation), "terminated", wait, timeout)

    def recreate(
        self, spec: Optional[SandboxSpec] = None, *, wait: bool = True, timeout: float = DEFAULT_WAIT
    ) -> Sandbox:
        """Starts the next generation of a terminated sandbox, from ``spec`` or the current spec, under
        the same id; with ``wait``, until it is ``ready``. The spec gets a fresh clientRequestId unless it
        brings one not yet used. Errors: InvalidState (not terminated), GenerationConflict,
        IdempotencyConflict, UnsupportedCapability; with wait, SandboxFailed and WaitTimeout."""
        expected = self.generation
        s = recreate_spec(self.spec, spec)
        after = self._after() if wait else None
        try:
            self._apply(self.client._call(_ops.recreate_sandbox(self.id, expected, s)))
        except GenerationConflict as e:
            current = self.client._get(self.id)
            if not is_own_recreate(e, current, expected, s):
                raise
            self.resource = current  # our recreate, whose answer was lost: its repeat met its result
        if wait:
            self._wait("ready", timeout, after)
        return self

    def wait_for(self, state: str, *, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Waits until the sandbox's generation is in ``state``, following the event stream. Errors:
        UnexpectedState when it settles in another state it will not leave by itself, SandboxFailed
        when that state is ``failed``, WaitTimeout, GenerationConflict when it is recreated meanwhile."""
        after = self._after()
        self.refresh()
        return self._wait(state, timeout, after)

    def _act(self, req: Request, wanted: str, wait: bool, timeout: float) -> Sandbox:
        after = self._after() if wait else None
        self._apply(self.client._call(req))
        if wait:
            self._wait(wanted, timeout, after)
        return self

    def _after(self) -> int:
        c = self.client._known_cursor()
        return max(c, self._cursor) if self._cursor is not None else c

    def _wait(self, wanted: str, timeout: float, after: Optional[int]) -> Sandbox:
        """Waits for wanted from the state last seen, which is current as of cursor after (every event
        of this sandbox since is newer). First the events already logged, then the stream."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            if settled(self.resource, wanted):
                outcome(self.resource, wanted)
                return self
            if after is None:
                after = self.client._find_floor()
                self.refresh()
                continue
            try:
                tr = Tracker(self.resource, after)
                while True:
                    page = self.client._list_events(tr.cursor, self.id)
                    for e in page:
                        tr.apply(e)
                    if len(page) < 1000 or tr.done(wanted):
                        break
                if not tr.done(wanted):
                    with EventStream(self.client, tr.cursor, self.id, DEFAULT_READ_TIMEOUT, 10) as stream:
                        while not tr.done(wanted):
                            ev = stream.next(timeout=deadline - time.monotonic())
                            if ev is None:
                                self.refresh()
                                if settled(self.resource, wanted):
                                    break
                                raise timed_out(self.resource, wanted, timeout)
                            tr.apply(ev)
                self._cursor = tr.cursor
                self.client._note(tr.cursor)
            except EventHistoryUnavailable:
                after = None  # the daemon pruned past the cursor meanwhile: find one it holds
                continue
            self.refresh()
            return finish(self.resource, tr, wanted, self)

    # --- beyond the contract ---

    def checkpoint(self, *, leave_running: bool = False) -> Checkpoint:
        """Writes the ready sandbox's memory, processes and /workspace to a checkpoint
        (``POST /v1/sandboxes/{id}/actions/checkpoint``). Without ``leave_running`` the sandbox is paused
        at it and :meth:`resume` restores it; the state seen here is refreshed. A new sandbox starts from
        it with ``extensions=sandboxd.extensions.from_checkpoint(id, checkpoint.id)``. Fenced by the
        generation. Errors: GenerationConflict, InvalidState, UnsupportedCapability (no
        ``memorySnapshot``), ProviderUnavailable."""
        c = Checkpoint.from_json(self.client._call(checkpoint_sandbox(self.id, self.generation, leave_running))["checkpoint"])
        self.refresh()
        return c

    def checkpoints(self) -> list[Checkpoint]:
        """The checkpoints taken of the sandbox, oldest first (``GET /v1/sandboxes/{id}/checkpoints``).
        Errors: NotFound, UnsupportedCapability."""
        return checkpoint_list(self.client._call(list_checkpoints(self.id)))

    def stats(self) -> SandboxStats:
        """What the sandbox uses now (``GET /v1/sandboxes/{id}/stats``): CPU time, memory, processes,
        disk, read from its cgroups and its disk; a figure the provider cannot read is None. It needs
        no generation: the answer says which generation, and state, it read. Errors: NotFound,
        InvalidState (not ready or paused), UnsupportedCapability (a provider that cannot read them,
        such as ``host``), ProviderUnavailable."""
        return SandboxStats.from_json(self.client._call(get_sandbox_stats(self.id)))

    def port_url(self, port: int) -> str:
        """The base URL of the proxy to 127.0.0.1:``port`` inside the sandbox, ending in "/": a request to
        it plus a path reaches that path there, with the client's bearer token (which the proxy does not
        pass on), whatever the sandbox's egress policy. Raises ValueError for a port that is not 1-65535
        in plain decimal."""
        return self.client.url.rstrip("/") + port_path(self.id, port)

    def preview_token(self, port: int, ttl_seconds: Optional[int] = None) -> PreviewToken:
        """A token and preview URL for ``port`` of this generation
        (``POST /v1/sandboxes/{id}/ports/{port}/preview-tokens``), expiring after ``ttl_seconds`` (None:
        the daemon's default, an hour). Recreating the sandbox revokes it. Errors: NotFound,
        InvalidState (not ready), ValidationError, UnsupportedCapability (no preview listener, or no
        ``portForwarding``, such as ``host``)."""
        return PreviewToken.from_json(self.client._call(create_preview_token(self.id, port, ttl_seconds)))

    def dial_port(self, port: int, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> PortConnection:
        """A TCP connection to 127.0.0.1:``port`` inside the sandbox over one WebSocket
        (:meth:`sandboxd.Client.dial_port`)."""
        return self.client.dial_port(self.id, port, read_timeout=read_timeout)

    def forward_port(
        self, remote_port: int, local_port: int = 0, *, host: str = "127.0.0.1",
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> PortForward:  # fmt: skip
        """A local listener relaying each connection to ``remote_port`` inside the sandbox
        (:meth:`sandboxd.Client.forward_port`)."""
        return self.client.forward_port(self.id, remote_port, local_port, host=host, on_error=on_error)

    def network(self) -> NetworkStatus:
        """The sandbox's network now (``GET /v1/sandboxes/{id}/network``): the policy that holds (the
        last one set, or the spec's, with the daemon's default egress made explicit), the connections it
        let out and refused, and the recent denials. Errors: NotFound, InvalidState (not ready or
        paused), UnsupportedCapability (no ``networkPolicy``, such as ``host``), ProviderUnavailable."""
        return NetworkStatus.from_json(self.client._call(get_network(self.id)))

    def set_network(self, policy: NetworkPolicy) -> NetworkStatus:
        """Replaces the policy of a ready sandbox (``PUT /v1/sandboxes/{id}/network``) for every new
        connection; those open go on. The spec keeps the policy asked at create. Fenced by the
        generation. Errors: GenerationConflict, InvalidState, ValidationError (a rule the daemon
        refuses), UnsupportedCapability (no ``networkPolicy``, or a name rule where names are not
        resolved), ProviderUnavailable."""
        return NetworkStatus.from_json(self.client._call(set_network(self.id, self.generation, policy)))

    def network_denials(self, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> DenialStream:
        """Follows what the policy refuses (``GET /v1/sandboxes/{id}/network/denials``): an iterator of
        :class:`~sandboxd.extensions.NetworkDenial`, first the recent ones, oldest first, then each new
        one as it is seen (a destination refused again comes again). It ends when this generation is no
        longer ready or paused (terminated, recreated, failed), with the reason in
        :attr:`DenialStream.end`. It raises ConnectionFailed when the connection breaks or nothing, not
        even a heartbeat, arrives for ``read_timeout`` seconds. Close it (or use it as a context
        manager) to stop early. Errors: NotFound, InvalidState, UnsupportedCapability."""
        req = stream_network_denials(self.id)
        try:
            stream = self.client._t.open_stream(req, read_timeout)
        except (Lost, Unsent) as e:
            raise ConnectionFailed(f"network denials: {e.__cause__ or e}") from None
        return DenialStream(stream)

    # --- raw files and watch (api/extensions.yaml) ---

    def upload(self, path: str, src: Any, **kw: Any) -> Any:
        """Writes a file of any size from bytes or a file object, streamed, its SHA-256 checked end to
        end, resumed after a broken connection when ``src`` is seekable
        (:func:`sandboxd.extensions.files.upload`)."""
        from .extensions import files

        return files.upload(self, path, src, **kw)

    def download(self, path: str, dst: Any, **kw: Any) -> Any:
        """Writes the file at ``path`` to the file object ``dst``, streamed, resumed by range and its
        SHA-256 checked (:func:`sandboxd.extensions.files.download`)."""
        from .extensions import files

        return files.download(self, path, dst, **kw)

    def watch(
        self,
        path: str,
        *,
        recursive: bool = False,
        read_timeout: float = 60.0,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> Any:
        """The changes under the directory ``path``, an iterator of
        :class:`~sandboxd.extensions.files.FileChange` (:func:`sandboxd.extensions.files.watch`). A
        pause of the sandbox holds it as it holds :meth:`process_output`: its ``paused`` and
        ``on_heartbeat`` say so."""
        from .extensions import files

        return files.watch(self, path, recursive=recursive, read_timeout=read_timeout, on_heartbeat=on_heartbeat)

    # --- background processes (api/extensions.yaml) ---

    def start_process(
        self,
        argv: Argv,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Data] = None,
        close_stdin: bool = False,
        tag: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
    ) -> Process:
        """Starts a process in the background (``POST /v1/sandboxes/{id}/processes``), fenced by the
        generation. It runs until it exits or is signalled, whatever happens to this client; its stdout
        and stderr, combined, are kept in the sandbox (the last 64 MiB) and read with
        :meth:`process_output`. ``argv`` is executed directly (a string is run by ``sh -c``); ``cwd`` is
        relative to the working directory, ``env`` is added to the sandbox's; ``stdin`` (at most 1 MiB)
        is written to its stdin first, which ``close_stdin`` then closes; ``tag`` is this client's name
        for it, returned as is; ``pty=(rows, cols)`` runs it on a pseudo-terminal of that size (needs
        interactiveTerminal; :meth:`resize_process`, :meth:`terminal_url`). Never repeated once sent.
        Errors: ValidationError (also: 256 processes
        run already), NotFound, GenerationConflict, InvalidState (not ready), UnsupportedCapability,
        ProviderUnavailable."""
        req = start_process(
            self.id, self.generation, command_argv(argv), cwd=cwd, env=env, stdin=stdin, close_stdin=close_stdin, tag=tag,
            pty=pty,
        )
        return Process.from_json(self.client._call(req))

    def processes(self) -> List[Process]:
        """The sandbox's processes, oldest first (the 256 it keeps at most, running or ended)."""
        return process_list(self.client._call(list_processes(self.id, self.generation)))

    def process(self, pid: int) -> Process:
        """The process ``pid``. Errors: NotFound, GenerationConflict, InvalidState."""
        return Process.from_json(self.client._call(get_process(self.id, self.generation, pid)))

    def wait_process(self, pid: int, timeout: float = 60.0) -> Process:
        """The process once it has ended, or as it is when ``timeout`` seconds (at most an hour) passed
        first: its ``running`` says which. Errors: NotFound, GenerationConflict, InvalidState."""
        return Process.from_json(self.client._call(wait_process(self.id, self.generation, pid, timeout, self.client.timeout)))

    def write_stdin(self, pid: int, data: Data = b"", *, close: bool = False) -> int:
        """Writes ``data`` (at most 1 MiB a call) to the process's stdin, then closes it when ``close``;
        returns the bytes written. Never repeated once sent. Errors: ValidationError, NotFound,
        GenerationConflict, InvalidState (the process did not read it in time, or its stdin is
        closed)."""
        written, _ = stdin_result(self.client._call(write_process_stdin(self.id, self.generation, pid, data, close)))
        return written

    def resize_process(self, pid: int, rows: int, cols: int) -> TerminalSize:
        """Sets the size of the terminal of a process started with ``pty=(rows, cols)``; its
        foreground group gets SIGWINCH. Errors: ValidationError (each of rows and cols is 1..65535),
        NotFound, GenerationConflict, InvalidState (no terminal, or it has ended),
        UnsupportedCapability (no interactiveTerminal)."""
        return TerminalSize.from_json(self.client._call(resize_process(self.id, self.generation, pid, rows, cols)))

    def terminal_url(self, pid: int, *, after: int = 0, mode: str = "control") -> str:
        """The ws:// URL of the process's terminal attach (a WebSocket: binary frames are its output
        from ``after`` one way and keys the other, JSON text frames the rest; docs/processes.md).
        The standard library has no WebSocket client: attach with one of your choosing, sending the
        client's Authorization header."""
        return self.client.url.replace("http", "ws", 1) + terminal_path(self.id, self.generation, pid, after, mode)

    def signal_process(self, pid: int, signal: Signal) -> None:
        """Sends ``signal`` (``"TERM"``, ``"KILL"``, ``"INT"``, ...) to the process's group. Errors:
        ValidationError, NotFound, GenerationConflict, InvalidState (the process has ended)."""
        self.client._call(signal_process(self.id, self.generation, pid, signal))

    def process_output(
        self,
        pid: int,
        *,
        after: int = 0,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> OutputStream:
        """The process's output from byte offset ``after`` (``GET .../processes/{pid}/output``): an
        iterator of :class:`~sandboxd.extensions.OutputChunk`, each the bytes from its ``offset``, that
        ends with the stream's end event, in :attr:`OutputStream.end` (``reason == "exited"`` once every
        byte was read, with the exit code). A dropped connection, or silence past ``read_timeout``
        seconds (the daemon sends a heartbeat at least every 15 s), is resumed from the offset reached,
        so nothing the sandbox kept is lost or given twice; ConnectionFailed once the client's retries
        reconnect without getting anything. Bytes no longer kept (past 64 MiB) are skipped and listed
        in :attr:`OutputStream.dropped`. A pause of the sandbox holds the stream on its connection,
        without a reconnect: :attr:`OutputStream.paused` is true from the daemon's heartbeat saying
        ``paused`` until the one saying ``running`` after the resume, ``on_heartbeat`` is called with
        each (a :class:`~sandboxd.extensions.StreamHeartbeat`; what it raises ends the stream with that
        error), and the output then goes on where it was, every byte once; a terminate or recreate during
        the pause ends the stream with its end event. A heartbeat that is not one is skipped. Errors:
        NotFound, GenerationConflict, InvalidState, UnsupportedCapability."""
        return OutputStream(self, pid, after, read_timeout, on_heartbeat)

    # --- commands ---

    def run(
        self,
        argv: Argv,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Data] = None,
        max_output_bytes: Optional[int] = None,
        check: bool = False,
    ) -> CommandResult:
        """Runs a command and returns how it ended.

        ``argv`` is executed directly, never through a shell; a string instead is a shell command line,
        run by ``sh -c``. ``timeout`` is in seconds (the daemon's default is 60); a command past it is
        killed with its process group and its result says ``timed_out``. ``cwd`` is relative to the
        sandbox's working directory; ``env`` is added to its environment. ``stdin`` (bytes or text) is
        written to a file the command reads as its standard input (this needs ``sh`` in the sandbox).
        With ``check``, a command that does not exit 0 raises CommandFailed.

        A command is never repeated once sent. Errors: ValidationError, NotFound (a missing cwd),
        GenerationConflict, InvalidState (not ready), UnsupportedCapability, ProviderUnavailable,
        CommandFailed.
        """
        args = command_argv(argv)
        if stdin is not None:
            where, args = stdin_plan(args, cwd)
            self.files.write(where, stdin)
        req = _ops.execute_command(
            self.id,
            self.generation,
            args,
            cwd=cwd,
            env=env,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            http_timeout=self.client.timeout,
        )
        return checked(CommandResult.from_json(self.client._call(req)), args, check)

    def events(self, after: Optional[int] = None) -> EventStream:
        """Follows this sandbox's events (see :meth:`Client.events`)."""
        return self.client.events(after, self.id)

    # --- context manager ---

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if self.state != "terminated":
                self.terminate(wait=False)
        except (NotFound, GenerationConflict):
            pass  # gone, or recreated behind this object's back: that generation is not ours to end
        except SandboxdError:
            if exc_type is None:
                raise
            # The block's own error is the one to see.
        finally:
            if self._own_client:
                self.client.close()


class DenialStream(Iterator[NetworkDenial]):
    """An open stream of a sandbox's denials (see :meth:`Sandbox.network_denials`)."""

    def __init__(self, stream: SyncStream) -> None:
        self._stream: Optional[SyncStream] = stream
        self._denials = Denials()
        self._pending: Deque[NetworkDenial] = collections.deque()

    @property
    def end(self) -> Optional[NetworkDenialsEnd]:
        """Why the stream ended, once it has (None before, and when it was closed by this side)."""
        return self._denials.end

    def __iter__(self) -> DenialStream:
        return self

    def __next__(self) -> NetworkDenial:
        while not self._pending:
            stream = self._stream
            if stream is None or self._denials.end is not None:
                self.close()
                raise StopIteration
            try:
                self._pending.extend(self._denials.feed(stream.read()))
            except Lost as e:
                self.close()
                raise self._denials.lost(e) from None
            except SandboxdError:
                self.close()
                raise
        return self._pending.popleft()

    def close(self) -> None:
        """Closes the connection; iteration then stops."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> DenialStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class OutputStream(Reading, Iterator[OutputChunk]):
    """The output of a background process (see :meth:`Sandbox.process_output`): ``end``, ``offset``
    and ``dropped`` say how far it went, ``paused`` whether a pause of the sandbox holds it."""

    def __init__(
        self, sandbox: Sandbox, pid: int, after: int, read_timeout: float, on_heartbeat: Optional[HeartbeatHook] = None
    ) -> None:
        super().__init__(sandbox.id, sandbox.generation, pid, after, read_timeout, sandbox.client._backoff, on_heartbeat)
        self._client = sandbox.client
        self._stream: Optional[SyncStream] = None

    def __iter__(self) -> OutputStream:
        return self

    def read_all(self) -> bytes:
        """Every byte from here to the end, joined."""
        return b"".join(c.data for c in self)

    def __next__(self) -> OutputChunk:
        while not self.pending:
            more, done = self.goes_on()
            if done:
                self._drop()
            if not more:
                raise StopIteration
            try:
                if self._stream is None:
                    self._stream = self._client._t.open_stream(self.request(), self.read_timeout)
                    self.out.reconnect()
                self.take(self._stream.read())
            except (Lost, Unsent) as e:
                self._drop()
                time.sleep(self.failed(e))
            except Exception:  # the stream's error, or the one on_heartbeat raised: the stream ends
                self.close()
                raise
        return self.pending.popleft()

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        """Closes the connection; iteration then stops."""
        self.closed = True
        self._drop()

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._drop()


class Files:
    """The files of a sandbox (``sandbox.files``). Relative paths are relative to the sandbox's working
    directory; absolute ones are inside the sandbox's filesystem, never outside it. Every call is fenced
    by the sandbox's generation."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def read(self, path: str) -> bytes:
        """The content of a file (at most 24 MiB). Errors: NotFound, ValidationError (a directory),
        GenerationConflict, InvalidState."""
        sb = self._sb
        doc = sb.client._call(_ops.read_file(sb.id, sb.generation, path))
        return FileReadResult.from_json(doc).content()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of a file as text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Data, *, encoding: str = "utf-8") -> FileEntry:
        """Replaces a file atomically with data (bytes, or text in ``encoding``), creating its parent
        directories, and returns its entry. Errors: ValidationError, RequestTooLarge (over 24 MiB),
        GenerationConflict, InvalidState."""
        sb = self._sb
        raw = as_bytes(data, encoding)
        doc = sb.client._call(_ops.write_file(sb.id, sb.generation, path, raw, sb.client.timeout))
        res = FileReadResult.from_json(doc)
        return written(res.path, res.size)

    def list(self, path: str = ".") -> List[FileEntry]:
        """The entries of one directory. Errors: NotFound, ValidationError (a file)."""
        sb = self._sb
        doc = sb.client._call(_ops.list_files(sb.id, sb.generation, path))
        items = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listFiles: want {'entries': [...]}")
        return [FileEntry.from_json(v) for v in items]

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at path (one listing of its parent)."""
        parent, name = posixpath.split(path.rstrip("/") or "/")
        try:
            return any(e.name == name for e in self.list(parent or "."))
        except NotFound:
            return False

    def upload(self, local: Union[str, "os.PathLike[str]"], remote: str) -> List[FileEntry]:
        """Copies a local file, or a directory tree, to remote in the sandbox; returns what it wrote."""
        src = Path(local)
        if src.is_dir():
            out = []
            for f in sorted(p for p in src.rglob("*") if p.is_file()):
                out.append(self.write(posixpath.join(remote, f.relative_to(src).as_posix()), f.read_bytes()))
            return out
        return [self.write(remote, src.read_bytes())]

    def download(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> List[Path]:
        """Copies a file, or a directory tree, from the sandbox to local; returns the files it wrote."""
        dst = Path(local)
        try:
            entries: Optional[Sequence[FileEntry]] = self.list(remote)
        except ValidationError:  # a file: listing one is invalid_request
            entries = None
        if entries is None:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(self.read(remote))
            return [dst]
        out: List[Path] = []
        dst.mkdir(parents=True, exist_ok=True)
        for e in entries:
            if e.is_dir:
                out += self.download(e.path, dst / e.name)
            else:
                (dst / e.name).write_bytes(self.read(e.path))
                out.append(dst / e.name)
        return out
