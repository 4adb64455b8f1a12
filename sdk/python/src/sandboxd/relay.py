"""Raw TCP connections to a port inside a sandbox, over the daemon's relay
(``GET /v1/sandboxes/{id}/ports/{port}/tcp``, a WebSocket of subprotocol ``sandboxd.tcp`` whose binary
messages carry the connection's bytes both ways), and local listeners that forward to one.

:meth:`sandboxd.Client.dial_port` returns a :class:`PortConnection` (socket-like: ``read``/``recv``,
``write``/``sendall``, ``close``, ``settimeout``); :meth:`sandboxd.Client.forward_port` a
:class:`PortForward` listening on 127.0.0.1 and relaying each connection it accepts over a WebSocket of
its own, a thread each. :class:`AsyncPortConnection` and :class:`AsyncPortForward` are the same on
asyncio (a task each). The WebSocket is :mod:`sandboxd._websocket`'s (see the README for why it is the
package's own).

The relay has no half-close: a WebSocket's close ends both directions, and the daemon closes the
sandbox's side of the connection with it. So a forwarded connection ends as a whole once either end
ends, as ``sbx port-forward``'s do.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from typing import Awaitable, Callable, Deque, List, Optional, Set, Tuple

from ._async import AsyncTransport
from ._http11 import encode_head, parse_head
from ._sync import SyncTransport
from ._transport import (
    RESPONSE_HOOKS,
    Lost,
    Request,
    Unsent,
    decode,
    observe,
    should_retry,
    transport_error,
)
from ._websocket import (
    BINARY,
    CLOSE,
    GOING_AWAY,
    MAX_MESSAGE,
    NORMAL,
    PING,
    PONG,
    TEXT,
    UNSUPPORTED_DATA,
    Decoder,
    Message,
    WebSocketError,
    check_handshake,
    close_payload,
    frame,
    handshake_headers,
    new_key,
    parse_close,
)
from .errors import ConnectionFailed, SandboxdError, UnexpectedResponse
from .extensions.ports import TCP_SUBPROTOCOL, parse_port, relay_port

__all__ = ["AsyncPortConnection", "AsyncPortForward", "PortConnection", "PortForward"]

FRAME = 256 << 10
"""Bytes a message sends at most (the daemon's relay takes messages of up to 1 MiB)."""

BUFFER = 4 << 20
"""Bytes received and not yet read at which a connection stops reading from the daemon (backpressure)."""

CLOSE_WAIT = 2.0
"""Seconds a close waits for the daemon's answering close frame."""

MAX_ERRORS = 100


class _Ended(Exception):
    """The daemon's close frame came: ``error`` is None for a close with 1000, else what to raise."""

    def __init__(self, error: Optional[SandboxdError]) -> None:
        super().__init__()
        self.error = error


def _on_message(m: Message, what: str, pong: Callable[[bytes], None]) -> Optional[bytes]:
    """The bytes of a binary message; None for a control frame it handled. Raises _Ended for a close
    frame and WebSocketError for a text message (the relay carries bytes only)."""
    if m.opcode == BINARY:
        return m.data
    if m.opcode == TEXT:
        raise WebSocketError(UNSUPPORTED_DATA, "a text message (the relay carries binary ones)")
    if m.opcode == PING:
        pong(m.data)
    elif m.opcode == CLOSE:
        code, reason = parse_close(m.data)
        if code == NORMAL:
            raise _Ended(None)
        raise _Ended(ConnectionFailed(f"{what}: the daemon closed the relay with {code}" + (f": {reason}" if reason else "")))
    return None


def _relay_request(sandbox_id: str, port: int) -> Tuple[Request, str]:
    key = new_key()
    return relay_port(sandbox_id, port, handshake_headers(key, TCP_SUBPROTOCOL)), key


def _not_upgraded(req: Request, status: int, ctype: str, body: bytes) -> SandboxdError:
    """The error of an answer to an upgrade that is not 101: the daemon's error, or UnexpectedResponse."""
    try:
        decode(req, status, ctype, body)
    except SandboxdError as e:
        return e
    return UnexpectedResponse(f"{req.method} {req.path}: answer {status}, want 101", status=status)


class _Receiver:
    """The half of a port connection that reads, without I/O: the daemon's bytes in, the bytes of its
    binary messages out, pings answered through pong; then the end of the relay, its error (None for a
    close with 1000) and the close frame to answer with (``reply``)."""

    def __init__(self, what: str, max_message: int, pong: Callable[[bytes], None]) -> None:
        self.what = what
        self._dec = Decoder(max_message)
        self._pong = pong
        self.ended = False
        self.error: Optional[SandboxdError] = None
        self.reply: Optional[Tuple[int, str]] = None

    def feed(self, data: bytes) -> List[bytes]:
        """The bytes of the messages data completes, also when the relay ends with them."""
        out: List[bytes] = []
        try:
            for m in self._dec.feed(data):
                b = _on_message(m, self.what, self._pong)
                if b:
                    out.append(b)
            if self._dec.error is not None:
                raise self._dec.error
        except _Ended as e:
            self._end(e.error, (NORMAL if e.error is None else GOING_AWAY, ""))
        except WebSocketError as e:
            self._end(UnexpectedResponse(f"{self.what}: {e}"), (e.code, str(e)))
        return out

    def eof(self) -> None:
        """The connection ended (without a close frame: the relay broke)."""
        try:
            self._dec.eof()
            self.fail("the connection ended without a close frame")
        except WebSocketError as e:
            self._end(UnexpectedResponse(f"{self.what}: {e}"), None)

    def silent(self, seconds: float) -> None:
        self.fail(f"nothing from the daemon, not even a ping, within {seconds:g}s")

    def fail(self, why: object) -> None:
        self._end(ConnectionFailed(f"{self.what}: {why}"), None)

    def _end(self, err: Optional[SandboxdError], reply: Optional[Tuple[int, str]]) -> None:
        if not self.ended:
            self.ended, self.error, self.reply = True, err, reply


class _Inbox:
    """What came from the sandbox's side and was not read yet, and how the relay ended."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.chunks: Deque[bytes] = collections.deque()
        self.held = 0
        self.eof = False
        self.error: Optional[SandboxdError] = None

    def take(self, max_bytes: int, closed: bool) -> Optional[bytes]:
        """Up to max_bytes held; b"" at a clean end; None when nothing is held yet. Raises the relay's
        error once what came before it was taken, ConnectionFailed when closed."""
        if not self.chunks:
            if closed:
                raise ConnectionFailed(f"{self.what}: the connection is closed")
            if self.eof:
                if self.error is not None:
                    raise self.error
                return b""
            return None
        c = self.chunks[0]
        if len(c) <= max_bytes:
            self.chunks.popleft()
        else:
            self.chunks[0] = c[max_bytes:]
            c = c[:max_bytes]
        self.held -= len(c)
        return c

    def put(self, b: bytes) -> None:
        self.chunks.append(b)
        self.held += len(b)

    def writable(self, closed: bool, close_sent: bool) -> None:
        """Raises ConnectionFailed unless the connection can still send."""
        if closed or close_sent:
            raise ConnectionFailed(f"{self.what}: the connection is closed")
        if self.eof:
            raise self.error or ConnectionFailed(f"{self.what}: the sandbox's side has closed the connection")


# --- synchronous ---


class PortConnection:
    """A TCP connection to a port inside a sandbox, carried over one WebSocket (see
    :meth:`sandboxd.Client.dial_port`). Socket-like and safe to read in one thread while another writes.

    A thread of its own reads the WebSocket: it answers the daemon's pings whether or not anyone reads,
    and holds up to 4 MiB of what arrived for :meth:`read`. The daemon sends what the sandbox's side
    sent and then closes: :meth:`read` returns those bytes, then ``b""``. A relay that ends otherwise
    (the port's connection failed, the daemon stopped, nothing came for ``read_timeout`` seconds, not
    even a ping) makes :meth:`read` raise ConnectionFailed once the bytes before are read. Close it (or
    use it as a context manager): until then its thread keeps it open.
    """

    def __init__(self, sock: socket.socket, leftover: bytes, what: str, read_timeout: float, max_message: int) -> None:
        self._sock = sock
        self._what = what
        self._rx = _Receiver(what, max_message, self._pong)
        self._in = _Inbox(what)
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._close_sent = False
        self._closed = False
        self._timeout: Optional[float] = None
        sock.settimeout(read_timeout)
        self._thread = threading.Thread(target=self._run, args=(leftover, read_timeout), name=f"sandboxd relay {what}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"PortConnection({self._what})"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def settimeout(self, seconds: Optional[float]) -> None:
        """How long :meth:`read` waits for bytes before it raises ``socket.timeout`` (None: no bound)."""
        self._timeout = seconds

    def gettimeout(self) -> Optional[float]:
        return self._timeout

    def read(self, max_bytes: int = FRAME) -> bytes:
        """Up to ``max_bytes`` of what the sandbox's side sent, at least one; ``b""`` once it ended
        and everything was read. Raises ConnectionFailed when the relay broke (after the bytes that
        came before it), ``socket.timeout`` past :meth:`settimeout`'s bound."""
        if max_bytes <= 0:
            return b""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._cond:
            while True:
                c = self._in.take(max_bytes, self._closed)
                if c is not None:
                    self._cond.notify_all()
                    return c
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise socket.timeout(f"{self._what}: nothing to read within {self._timeout:g}s")
                self._cond.wait(left)

    recv = read

    def write(self, data: bytes) -> int:
        """Sends all of data to the sandbox's side (in messages of at most 256 KiB) and returns its
        length. Raises ConnectionFailed once the connection is closed or the relay broke."""
        view = memoryview(data).cast("B")
        self._in.writable(self._closed, self._close_sent)
        for i in range(0, len(view), FRAME):
            self._send(BINARY, bytes(view[i : i + FRAME]))
        return len(view)

    def sendall(self, data: bytes) -> None:
        self.write(data)

    send = write

    def close(self) -> None:
        """Closes the connection (the daemon closes the sandbox's side): a close frame, the daemon's
        answer awaited a moment, then the socket."""
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        try:
            self._send(CLOSE, close_payload(NORMAL))
        except ConnectionFailed:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_WAIT)
        self._shut()

    def __enter__(self) -> PortConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, opcode: int, payload: bytes) -> None:
        with self._send_lock:
            if opcode == CLOSE:
                if self._close_sent:
                    return
                self._close_sent = True
            try:
                self._sock.sendall(frame(opcode, payload))
            except OSError as e:
                raise ConnectionFailed(f"{self._what}: {e}") from None

    def _pong(self, payload: bytes) -> None:
        self._send(PONG, payload)

    def _run(self, data: bytes, read_timeout: float) -> None:
        rx = self._rx
        try:
            while True:
                if data:
                    for b in rx.feed(data):
                        self._hold(b)
                if rx.ended:
                    break
                data = b""
                try:
                    data = self._sock.recv(65536)
                except socket.timeout:
                    rx.silent(read_timeout)
                except OSError as e:
                    rx.fail(e)
                else:
                    if not data:
                        rx.eof()
            if rx.reply is not None:
                self._send(CLOSE, close_payload(*rx.reply))
        except ConnectionFailed as e:
            rx.fail(e)
        with self._cond:
            self._in.eof, self._in.error = True, rx.error
            self._cond.notify_all()
        self._shut()

    def _hold(self, b: bytes) -> None:
        with self._cond:
            while self._in.held >= BUFFER and not self._closed:
                self._cond.wait()
            if not self._closed:
                self._in.put(b)
                self._cond.notify_all()

    def _shut(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def dial(t: SyncTransport, sandbox_id: str, port: int, *, read_timeout: float, max_message: int = MAX_MESSAGE) -> PortConnection:
    """A PortConnection to port of the sandbox, the upgrade repeated as its retry class allows."""
    port = parse_port(port)
    attempt = 0
    while True:
        attempt += 1
        req, key = _relay_request(sandbox_id, port)
        try:
            return _dial_once(t, req, key, f"port {port} of {sandbox_id}", read_timeout, max_message)
        except (Unsent, Lost, SandboxdError) as e:
            if not should_retry(req, attempt, t.backoff, e):
                if isinstance(e, SandboxdError):
                    raise
                raise transport_error(req, t.base, e) from e.__cause__
        time.sleep(t.backoff.delay(attempt))


def _dial_once(t: SyncTransport, req: Request, key: str, what: str, read_timeout: float, max_message: int) -> PortConnection:
    c = t._new(t.timeout)
    try:
        try:
            c.sock.sendall(encode_head(t.base, t.token, req, False))
        except OSError as e:
            raise Lost() from e
        head = parse_head(c.read_until(b"\r\n\r\n"))
        if head.status != 101:
            body, _ = c.read_body(head)
            raise _not_upgraded(req, head.status, head.content_type, body)
        check_handshake(head, key, TCP_SUBPROTOCOL)
    except BaseException:
        c.close()
        raise
    if RESPONSE_HOOKS:
        observe(req.operation, 101, None)
    return PortConnection(c.sock, bytes(c.buf), what, read_timeout, max_message)


class PortForward:
    """A local listener that forwards every connection it accepts to a port inside a sandbox, each over
    a WebSocket of its own (see :meth:`sandboxd.Client.forward_port`). ``address`` is where it
    listens, ``port`` its port. A connection whose relay cannot be opened (nothing listens on the
    port: PortUnreachable; the sandbox is not ready: InvalidState) is closed at once, and its error
    kept in ``errors`` (the last 100) and passed to ``on_error``. Close it, or use it as a context
    manager, to stop listening and end the connections it carries."""

    def __init__(
        self,
        open_relay: Callable[[], PortConnection],
        host: str,
        local_port: int,
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> None:
        self._open = open_relay
        self._on_error = on_error
        self._ln = socket.create_server((host, local_port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        addr = self._ln.getsockname()
        self.address: Tuple[str, int] = (str(addr[0]), int(addr[1]))
        self.errors: List[SandboxdError] = []
        self.accepted = 0
        self._lock = threading.Lock()
        self._active: Set[socket.socket] = set()
        self._threads: Set[threading.Thread] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"sandboxd forward {self.address}", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The local port it listens on."""
        return self.address[1]

    def __repr__(self) -> str:
        return f"PortForward({self.address[0]}:{self.address[1]})"

    def close(self) -> None:
        """Stops listening and closes every connection it carries."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            active = list(self._active)
            threads = list(self._threads)
        try:
            self._ln.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ln.close()
        for s in active:
            _shut(s)
        self._thread.join(5)
        for th in threads:
            th.join(CLOSE_WAIT + 1)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            try:
                local, _ = self._ln.accept()
            except OSError:
                return
            th = threading.Thread(target=self._relay, args=(local,), name=f"sandboxd forward {self.address}", daemon=True)
            with self._lock:
                if self._closed:
                    local.close()
                    return
                self.accepted += 1
                self._active.add(local)
                self._threads.add(th)
            th.start()

    def _failed(self, e: SandboxdError) -> None:
        with self._lock:
            self.errors.append(e)
            del self.errors[:-MAX_ERRORS]
        if self._on_error is not None:
            self._on_error(e)

    def _relay(self, local: socket.socket) -> None:
        try:
            local.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                remote = self._open()
            except SandboxdError as e:
                self._failed(e)
                return
            up = threading.Thread(target=_pump_up, args=(local, remote), daemon=True)
            up.start()
            try:
                while True:
                    data = remote.read(FRAME)
                    if not data:
                        break
                    local.sendall(data)
            except (OSError, SandboxdError):
                pass
            finally:
                _shut(local)
                remote.close()
                up.join()
        finally:
            with self._lock:
                self._active.discard(local)
                self._threads.discard(threading.current_thread())
            local.close()


def _pump_up(local: socket.socket, remote: PortConnection) -> None:
    try:
        while True:
            data = local.recv(65536)
            if not data:
                break
            remote.write(data)
    except (OSError, SandboxdError):
        pass
    finally:
        remote.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


# --- asynchronous ---


class AsyncPortConnection:
    """The asynchronous :class:`PortConnection`: ``await conn.read()``, ``await conn.write(data)``,
    ``await conn.close()`` or ``async with``. A task of its own reads the WebSocket and answers pings.
    Bound a read with ``asyncio.wait_for``."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, what: str, read_timeout: float,
        max_message: int,
    ) -> None:  # fmt: skip
        self._r = reader
        self._w = writer
        self._what = what
        self._read_timeout = read_timeout
        self._rx = _Receiver(what, max_message, self._pong)
        self._in = _Inbox(what)
        self._cond = asyncio.Condition()
        self._write_lock = asyncio.Lock()
        self._close_sent = False
        self._closed = False
        self._task = asyncio.ensure_future(self._run())

    def __repr__(self) -> str:
        return f"AsyncPortConnection({self._what})"

    @property
    def closed(self) -> bool:
        return self._closed

    async def read(self, max_bytes: int = FRAME) -> bytes:
        """See :meth:`PortConnection.read`."""
        if max_bytes <= 0:
            return b""
        async with self._cond:
            while True:
                c = self._in.take(max_bytes, self._closed)
                if c is not None:
                    self._cond.notify_all()
                    return c
                await self._cond.wait()

    async def write(self, data: bytes) -> int:
        """See :meth:`PortConnection.write`."""
        view = memoryview(data).cast("B")
        self._in.writable(self._closed, self._close_sent)
        async with self._write_lock:
            for i in range(0, len(view), FRAME):
                self._w.write(frame(BINARY, bytes(view[i : i + FRAME])))
                try:
                    await asyncio.wait_for(self._w.drain(), self._read_timeout)
                except (OSError, asyncio.TimeoutError) as e:
                    raise ConnectionFailed(f"{self._what}: {e or 'the daemon took nothing for a while'}") from None
        return len(view)

    async def close(self) -> None:
        """See :meth:`PortConnection.close`."""
        if self._closed:
            return
        self._closed = True
        async with self._cond:
            self._cond.notify_all()
        self._send_close(NORMAL)
        if asyncio.current_task() is not self._task:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        self._task.cancel()
        self._w.close()

    aclose = close

    async def __aenter__(self) -> AsyncPortConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _send_close(self, code: int, reason: str = "") -> None:
        if self._close_sent or self._w.is_closing():
            return
        self._close_sent = True
        self._w.write(frame(CLOSE, close_payload(code, reason)))

    def _pong(self, payload: bytes) -> None:
        if not self._w.is_closing():
            self._w.write(frame(PONG, payload))

    async def _run(self) -> None:
        rx = self._rx
        try:
            while not rx.ended:
                try:
                    data = await asyncio.wait_for(self._r.read(65536), self._read_timeout)
                except asyncio.TimeoutError:
                    rx.silent(self._read_timeout)
                    break
                except OSError as e:
                    rx.fail(e)
                    break
                if not data:
                    rx.eof()
                    break
                for b in rx.feed(data):
                    await self._hold(b)
            if rx.reply is not None:
                self._send_close(*rx.reply)
        finally:
            self._in.eof, self._in.error = True, rx.error
            async with self._cond:
                self._cond.notify_all()
            self._w.close()

    async def _hold(self, b: bytes) -> None:
        async with self._cond:
            while self._in.held >= BUFFER and not self._closed:
                await self._cond.wait()
            if not self._closed:
                self._in.put(b)
                self._cond.notify_all()


async def async_dial(
    t: AsyncTransport, sandbox_id: str, port: int, *, read_timeout: float, max_message: int = MAX_MESSAGE
) -> AsyncPortConnection:
    """The asynchronous :func:`dial`."""
    port = parse_port(port)
    attempt = 0
    while True:
        attempt += 1
        req, key = _relay_request(sandbox_id, port)
        try:
            return await _async_dial_once(t, req, key, f"port {port} of {sandbox_id}", read_timeout, max_message)
        except (Unsent, Lost, SandboxdError) as e:
            if not should_retry(req, attempt, t.backoff, e):
                if isinstance(e, SandboxdError):
                    raise
                raise transport_error(req, t.base, e) from e.__cause__
        await asyncio.sleep(t.backoff.delay(attempt))


async def _async_dial_once(
    t: AsyncTransport, req: Request, key: str, what: str, read_timeout: float, max_message: int
) -> AsyncPortConnection:
    from ._async import _timed

    c = await t._new(t.timeout)
    try:
        c.writer.write(encode_head(t.base, t.token, req, False))
        await _timed(c.writer.drain(), t.timeout)
        head = parse_head(await _timed(c.reader.readuntil(b"\r\n\r\n"), t.timeout))
        if head.status != 101:
            body, _ = await t._body(c, head, t.timeout)
            raise _not_upgraded(req, head.status, head.content_type, body)
        check_handshake(head, key, TCP_SUBPROTOCOL)
    except BaseException:
        c.close()
        raise
    if RESPONSE_HOOKS:
        observe(req.operation, 101, None)
    return AsyncPortConnection(c.reader, c.writer, what, read_timeout, max_message)


class AsyncPortForward:
    """The asynchronous :class:`PortForward`: a task per connection, on the loop it was started on.
    ``await forward.close()`` or ``async with``."""

    def __init__(
        self, open_relay: Callable[[], Awaitable[AsyncPortConnection]],
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> None:  # fmt: skip
        self._open = open_relay
        self._on_error = on_error
        self._server: Optional[asyncio.AbstractServer] = None
        self.address: Tuple[str, int] = ("", 0)
        self.errors: List[SandboxdError] = []
        self.accepted = 0
        self._tasks: Set[asyncio.Task[None]] = set()

    async def _start(self, host: str, local_port: int) -> AsyncPortForward:
        self._server = await asyncio.start_server(self._handle, host, local_port)
        addr = self._server.sockets[0].getsockname()
        self.address = (str(addr[0]), int(addr[1]))
        return self

    @property
    def port(self) -> int:
        return self.address[1]

    def __repr__(self) -> str:
        return f"AsyncPortForward({self.address[0]}:{self.address[1]})"

    async def close(self) -> None:
        """Stops listening and closes every connection it carries."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    aclose = close

    async def __aenter__(self) -> AsyncPortForward:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        try:
            try:
                remote = await self._open()
            except SandboxdError as e:
                self.errors.append(e)
                del self.errors[:-MAX_ERRORS]
                if self._on_error is not None:
                    self._on_error(e)
                return
            up = asyncio.ensure_future(_async_pump_up(reader, remote))
            try:
                while True:
                    data = await remote.read(FRAME)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
            except (OSError, SandboxdError):
                pass
            finally:
                up.cancel()
                await asyncio.gather(up, return_exceptions=True)
                await remote.close()
        finally:
            writer.close()
            self._tasks.discard(task)


async def _async_pump_up(reader: asyncio.StreamReader, remote: AsyncPortConnection) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            await remote.write(data)
    except (OSError, SandboxdError):
        pass
    await remote.close()
