"""The group "raw files and watch" of ``api/extensions.yaml``: files of any size streamed in and out of a
sandbox (``/v1/sandboxes/{sandboxId}/files/raw``) with their SHA-256 checked end to end (RFC 9530's
``Repr-Digest``), uploads resumed from the bytes the sandbox holds, and the Server-Sent Events stream of
the changes under a directory (``.../files/watch``).

:func:`upload` sends a file object (or bytes) without holding it whole; from a seekable source a
broken connection is resumed by offset. :func:`download` writes to a file object and resumes with a
``Range`` read from the byte reached. :func:`watch` is an iterator of :class:`FileChange`. The
sandbox's methods :meth:`sandboxd.Sandbox.upload`, :meth:`sandboxd.Sandbox.download` and
:meth:`sandboxd.Sandbox.watch` call them.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import secrets
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, ClassVar, Dict, Iterator, List, Optional, Union
from urllib.parse import urlencode

from .._sse import Message, Parser, SSEError
from .._transport import RESPONSE_HOOKS, Request, Retry, observe, path
from ..errors import ConnectionFailed, SandboxdError, UnexpectedResponse, error_from_response
from ..types import _obj, _opt, _req, _wire
from .processes import HeartbeatHook, StreamHeartbeat

__all__ = ["DigestMismatch", "Downloaded", "FileChange", "FileWatch", "RawFileWritten", "UploadState", "download", "upload", "watch"]

CHUNK = 1 << 20


class DigestMismatch(SandboxdError):
    """The bytes that arrived are not the bytes that were sent."""


@dataclass(frozen=True)
class RawFileWritten:
    """What a raw write wrote: the file's size and its SHA-256, as RFC 9530 writes it."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/RawFileWritten"

    path: str = _wire("path")
    size: int = _wire("size")
    digest: str = _wire("digest")

    @classmethod
    def from_json(cls, v: Any) -> RawFileWritten:
        d = _obj(v, "written")
        return cls(path=_req(d, "path", str, "written"), size=_req(d, "size", int, "written"), digest=_req(d, "digest", str, "written"))


@dataclass(frozen=True)
class UploadState:
    """How many bytes of a resumable upload the sandbox holds (``offset``, 0 when none): a PUT with
    that offset goes on from there."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/UploadState"

    path: str = _wire("path")
    upload: str = _wire("upload")
    offset: int = _wire("offset")

    @classmethod
    def from_json(cls, v: Any) -> UploadState:
        d = _obj(v, "upload")
        return cls(path=_req(d, "path", str, "upload"), upload=_req(d, "upload", str, "upload"), offset=_req(d, "offset", int, "upload"))


@dataclass(frozen=True)
class Downloaded:
    """What a download read: the file's size and SHA-256."""

    size: int
    digest: bytes


@dataclass(frozen=True)
class FileChange:
    """One change under a watched directory: ``kind`` created, modified, deleted, renamed (``from_path``
    the old path) or overflow (changes were dropped: read the directory again)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/FileChangeEvent"

    kind: str = _wire("kind")
    path: Optional[str] = _wire("path", default=None)
    from_path: Optional[str] = _wire("from", default=None)
    dir: bool = _wire("dir", default=False)

    @classmethod
    def from_json(cls, v: Any) -> FileChange:
        d = _obj(v, "change")
        return cls(
            kind=_req(d, "kind", str, "change"),
            path=_opt(d, "path", str, "change"),
            from_path=_opt(d, "from", str, "change"),
            dir=bool(_opt(d, "dir", bool, "change")),
        )


def digest_header(sum_: bytes) -> str:
    return "sha-256=:" + base64.b64encode(sum_).decode("ascii") + ":"


def parse_digest(v: Optional[str]) -> Optional[bytes]:
    for member in (v or "").split(","):
        k, _, val = member.strip().partition("=")
        if k == "sha-256" and len(val) > 2 and val[0] == ":" and val[-1] == ":":
            try:
                raw = base64.b64decode(val[1:-1], validate=True)
            except ValueError:
                return None
            return raw if len(raw) == 32 else None
    return None


def _conn(sb: Any, timeout: Optional[float]) -> http.client.HTTPConnection:
    b = sb.client._t.base
    if b.scheme == "https":
        return http.client.HTTPSConnection(str(b.host), int(b.port), timeout=timeout)
    return http.client.HTTPConnection(str(b.host), int(b.port), timeout=timeout)


def _headers(sb: Any, extra: Dict[str, str]) -> Dict[str, str]:
    h = {"User-Agent": "sandboxd-python"}
    tok = sb.client._t.token
    if tok:
        h["Authorization"] = "Bearer " + tok
    h.update(extra)
    return h


def _target(sb: Any, op: str, p: str, **more: Any) -> str:
    q = {"path": p, "expectedGeneration": str(sb.generation)}
    q.update({k: str(v) for k, v in more.items() if v is not None})
    return str(sb.client._t.base.path) + path("v1", "sandboxes", sb.id, "files", op) + "?" + urlencode(q)


def _error(operation: str, resp: http.client.HTTPResponse) -> SandboxdError:
    body = resp.read(64 << 10)
    err = error_from_response(resp.status, body)
    if RESPONSE_HOOKS and not isinstance(err, UnexpectedResponse):
        observe(operation, resp.status, json.loads(body))
    return err


def _state(sb: Any, p: str, upload_id: str) -> int:
    req = Request(
        "getUploadState", "GET", path("v1", "sandboxes", sb.id, "files", "upload"),
        query=(("path", p), ("upload", upload_id), ("expectedGeneration", str(sb.generation))), retry=Retry.SERVER,
    )
    return UploadState.from_json(sb.client._call(req)).offset


def upload(
    sb: Any,
    p: str,
    src: Union[bytes, IO[bytes]],
    *,
    upload_id: Optional[str] = None,
    retries: int = 5,
    progress: Optional[Callable[[int], None]] = None,
    timeout: Optional[float] = None,
) -> RawFileWritten:
    """Writes the file at ``p`` from ``src`` atomically (``PUT .../files/raw``), its SHA-256 sent in
    ``Repr-Digest`` when ``src`` can be read twice (bytes, a seekable file), so that the daemon refuses
    bytes that arrive changed and keeps the old file; otherwise the digest the daemon answers is
    checked against what was sent. A seekable source resumes after a broken connection from the bytes
    the sandbox holds. Errors: ValidationError (a digest mismatch), RequestTooLarge (the sandbox's disk
    is full), NotFound, GenerationConflict, InvalidState, ConnectionFailed, DigestMismatch."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        src = io.BytesIO(bytes(src))
    seekable = hasattr(src, "seek") and getattr(src, "seekable", lambda: False)()
    size: Optional[int] = None
    digest: Optional[bytes] = None
    start = 0
    if seekable:
        start = src.tell()
        h = hashlib.sha256()
        while True:
            b = src.read(CHUNK)
            if not b:
                break
            h.update(b)
        size = src.tell() - start
        digest = h.digest()
        upload_id = upload_id or secrets.token_hex(12)
    offset = 0
    attempt = 0
    while True:
        if seekable:
            src.seek(start + offset)
        sent = hashlib.sha256()
        headers = {"Content-Type": "application/octet-stream"}
        if digest is not None:
            headers["Repr-Digest"] = digest_header(digest)
        if size is not None:
            headers["Content-Length"] = str(size - offset)
        else:
            headers["Transfer-Encoding"] = "chunked"
        conn = _conn(sb, timeout)
        try:
            conn.putrequest("PUT", _target(sb, "raw", p, upload=upload_id, offset=offset or None), skip_accept_encoding=True)
            for k, v in _headers(sb, headers).items():
                conn.putheader(k, v)
            conn.endheaders()
            n = offset
            while True:
                b = src.read(CHUNK)
                if not b:
                    break
                if digest is None:
                    sent.update(b)
                conn.send(b if size is not None else b"%x\r\n%s\r\n" % (len(b), b))
                n += len(b)
                if progress:
                    progress(n)
            if size is None:
                conn.send(b"0\r\n\r\n")
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error("putRawFile", resp)
            doc = json.loads(resp.read())
            if RESPONSE_HOOKS:
                observe("putRawFile", resp.status, doc)
            res = RawFileWritten.from_json(doc)
            want = digest if digest is not None else sent.digest()
            if res.digest != digest_header(want):
                raise DigestMismatch(f"upload {p}: the sandbox wrote {res.digest}, sent {digest_header(want)}")
            return res
        except (OSError, http.client.HTTPException) as e:
            if not seekable or attempt >= retries:
                raise ConnectionFailed(f"upload {p}: {e}") from None
        finally:
            conn.close()
        attempt += 1
        time.sleep(min(0.1 * 2**attempt, 2.0))
        offset = min(_state(sb, p, upload_id or ""), size or 0)


def download(
    sb: Any,
    p: str,
    dst: IO[bytes],
    *,
    retries: int = 5,
    progress: Optional[Callable[[int], None]] = None,
    timeout: Optional[float] = None,
) -> Downloaded:
    """Writes the file at ``p`` to ``dst`` (``GET .../files/raw``), resuming a broken connection with a
    ``Range`` read from the byte reached, and checks the whole file's SHA-256 against the daemon's
    ``Repr-Digest``. Errors: NotFound, ValidationError (a directory), ConnectionFailed, DigestMismatch
    (also when the file changed between two parts of a resumed read)."""
    h = hashlib.sha256()
    got, size = 0, -1
    want: Optional[bytes] = None
    attempt = 0
    while True:
        conn = _conn(sb, timeout)
        try:
            extra = {"Accept": "application/octet-stream"}
            if got > 0:
                extra.update({"Range": f"bytes={got}-", "Want-Repr-Digest": "sha-256=1"})
            conn.request("GET", _target(sb, "raw", p), headers=_headers(sb, extra))
            resp = conn.getresponse()
            if resp.status not in (200, 206):
                raise _error("getRawFile", resp)
            if RESPONSE_HOOKS:
                observe("getRawFile", resp.status, "")
            d = parse_digest(resp.getheader("Repr-Digest"))
            if d is None:
                raise UnexpectedResponse(f"download {p}: the answer has no Repr-Digest")
            if want is not None and d != want:
                raise DigestMismatch(f"download {p}: the file changed while it was read")
            want = d
            if size < 0:
                size = int(resp.getheader("Content-Length", "-1"))
            while True:
                b = resp.read(CHUNK)
                if not b:
                    break
                dst.write(b)
                h.update(b)
                got += len(b)
                if progress:
                    progress(got)
            if got == size:
                if h.digest() != want:
                    raise DigestMismatch(f"download {p}: received {h.hexdigest()}, the sandbox said {want.hex()}")
                return Downloaded(size=size, digest=want)
            raise ConnectionFailed(f"download {p}: {got} of {size} bytes")
        except (OSError, http.client.HTTPException, ConnectionFailed) as e:
            if attempt >= retries or size < 0:
                raise ConnectionFailed(f"download {p}: {e}") from None
        finally:
            conn.close()
        attempt += 1
        time.sleep(min(0.1 * 2**attempt, 2.0))


class FileWatch(Iterator[FileChange]):
    """An open watch (see :func:`watch`): an iterator of :class:`FileChange` that stops after the
    stream's end event, whose reason is in :attr:`end`. A pause of the sandbox holds it on its
    connection: :attr:`paused` is true from the daemon's heartbeat saying ``paused`` until the one
    saying ``running`` after the resume (it may be read from any thread), ``on_heartbeat`` is called
    with each :class:`~sandboxd.extensions.StreamHeartbeat` (what it raises ends the watch with that
    error), and the changes go on after the resume, none lost or repeated; a terminate during the pause
    ends the watch with its end event. A heartbeat that is not one is skipped."""

    def __init__(
        self,
        resp: http.client.HTTPResponse,
        conn: http.client.HTTPConnection,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> None:
        self._resp: Optional[http.client.HTTPResponse] = resp
        self._conn = conn
        self._parser = Parser()
        self._pending: List[FileChange] = []
        self._on_heartbeat = on_heartbeat
        self.end: Optional[Dict[str, Any]] = None
        self.paused = False

    def __iter__(self) -> FileWatch:
        return self

    def __next__(self) -> FileChange:
        while not self._pending:
            if self._resp is None or self.end is not None:
                self.close()
                raise StopIteration
            try:
                chunk = self._resp.read1(64 << 10)
            except OSError as e:
                self.close()
                raise ConnectionFailed(f"watch: {e}") from None
            if not chunk:
                self.close()
                raise ConnectionFailed("watch: the stream ended without its end event")
            try:
                self._take(self._parser.feed(chunk))
            except SSEError as e:
                self.close()
                raise UnexpectedResponse(f"watch: {e}") from None
            except Exception:  # the stream's error, or the one on_heartbeat raised: the watch ends
                self.close()
                raise
        return self._pending.pop(0)

    def _take(self, msgs: List[Message]) -> None:
        for m in msgs:
            if m.event == "heartbeat":
                beat = StreamHeartbeat.parse(m.data)
                if beat is None:
                    continue  # one that says nothing this client knows: the watch goes on
                self.paused = beat.state == "paused"
                if self._on_heartbeat is not None:
                    self._on_heartbeat(beat)
                continue
            if m.event not in ("change", "overflow", "end"):
                raise UnexpectedResponse(f"watch: unknown event {m.event!r}")
            try:
                doc = json.loads(m.data)
            except (ValueError, RecursionError):
                raise UnexpectedResponse(f"watch: the data of a {m.event!r} event is not JSON") from None
            self.paused = False
            if m.event == "end":
                if not isinstance(doc, dict):
                    raise UnexpectedResponse("watch: the data of its end event is not an object")
                self.end = doc
                return
            if RESPONSE_HOOKS:
                observe("watchFiles", 200, doc)
            self._pending.append(FileChange.from_json(doc))

    def close(self) -> None:
        """Closes the connection; iteration then stops."""
        if self._resp is not None:
            self._resp.close()
            self._resp = None
        self._conn.close()

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def watch(
    sb: Any, p: str, *, recursive: bool = False, read_timeout: float = 60.0, on_heartbeat: Optional[HeartbeatHook] = None
) -> FileWatch:
    """The changes under the directory ``p`` (``GET .../files/watch``): a :class:`FileWatch`, held by a
    pause of the sandbox (its ``paused``, ``on_heartbeat``). Errors: NotFound, ValidationError (not a
    directory), InvalidState (too many watches, or not ready)."""
    conn = _conn(sb, read_timeout)
    conn.request("GET", _target(sb, "watch", p, recursive="true" if recursive else None), headers=_headers(sb, {"Accept": "text/event-stream"}))
    resp = conn.getresponse()
    if resp.status != 200:
        err = _error("watchFiles", resp)
        conn.close()
        raise err
    return FileWatch(resp, conn, on_heartbeat)
