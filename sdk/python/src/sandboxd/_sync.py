"""The synchronous transport: HTTP/1.1 (_http11) over blocking sockets, kept alive in a small pool that
threads share."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any, List, Optional, Tuple

from ._http11 import CONTINUE_WAIT, MAX_HEAD, Head, chunk_size, encode_head, parse_head, wants_continue
from ._transport import (
    DEFAULT_TIMEOUT,
    Backoff,
    Base,
    Lost,
    Request,
    Unsent,
    check_stream,
    decode,
    should_retry,
    transport_error,
)
from .errors import SandboxdError

_POOL_SIZE = 8


class _Conn:
    """A socket and what has been read from it and not yet used."""

    __slots__ = ("sock", "buf", "tls")

    def __init__(self, sock: socket.socket, tls: bool) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.tls = tls

    def _fill(self) -> None:
        try:
            d = self.sock.recv(65536)
        except OSError as e:
            raise Lost() from e
        if not d:
            raise Lost() from ConnectionError("the connection closed")
        self.buf += d

    def read_until(self, sep: bytes) -> bytes:
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                end = i + len(sep)
                out = bytes(self.buf[:end])
                del self.buf[:end]
                return out
            if len(self.buf) > MAX_HEAD:
                raise Lost() from ConnectionError("an answer's line or head is too long")
            start = max(0, len(self.buf) - len(sep) + 1)
            self._fill()

    def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_some(self) -> bytes:
        """What has arrived, at least one byte; b"" at the end of the connection."""
        if not self.buf:
            try:
                return self.sock.recv(65536)
            except OSError as e:
                raise Lost() from e
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def read_head(self) -> Head:
        while True:
            head = parse_head(self.read_until(b"\r\n\r\n"))
            if not (100 <= head.status < 200):
                return head

    def read_chunk(self) -> bytes:
        """One chunk of a chunked body; b"" for the last (its trailers read)."""
        size = chunk_size(self.read_until(b"\r\n"))
        if size == 0:
            while self.read_until(b"\r\n") != b"\r\n":
                pass  # a trailer
            return b""
        data = self.read_exactly(size + 2)
        if data[-2:] != b"\r\n":
            raise Lost() from ConnectionError("a chunk not followed by CRLF")
        return data[:-2]

    def read_body(self, head: Head) -> Tuple[bytes, bool]:
        """The whole body, and whether the connection may carry another request."""
        if head.chunked():
            parts: List[bytes] = []
            while True:
                part = self.read_chunk()
                if not part:
                    return b"".join(parts), head.keep_alive()
                parts.append(part)
        n = head.length()
        if n is not None:
            return self.read_exactly(n), head.keep_alive()
        parts = [bytes(self.buf)]
        self.buf.clear()
        while True:
            try:
                d = self.sock.recv(65536)
            except OSError as e:
                raise Lost() from e
            if not d:
                return b"".join(parts), False
            parts.append(d)

    def idle_and_open(self) -> bool:
        """Whether a pooled connection can carry a request: one the daemon has closed (its idle
        timeout) is readable, and is dropped rather than sent on. (A TLS socket may be readable for
        TLS's own records, so it is not checked.)"""
        if self.buf:
            return False
        return self.tls or not select.select([self.sock], [], [], 0)[0]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class SyncTransport:
    def __init__(self, base: Base, token: Optional[str], timeout: float, backoff: Backoff) -> None:
        self.base = base
        self.token = token
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self.backoff = backoff
        self._idle: List[_Conn] = []
        self._lock = threading.Lock()
        self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context() if base.scheme == "https" else None

    def _new(self, timeout: float) -> _Conn:
        try:
            sock = socket.create_connection((self.base.host, self.base.port), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=self.base.host)
        except OSError as e:
            raise Unsent() from e
        return _Conn(sock, self._ssl is not None)

    def _take(self, timeout: float) -> _Conn:
        while True:
            with self._lock:
                c = self._idle.pop() if self._idle else None
            if c is None:
                return self._new(timeout)
            if c.idle_and_open():
                c.sock.settimeout(timeout)
                return c
            c.close()

    def _give(self, c: _Conn) -> None:
        with self._lock:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append(c)
                return
        c.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _send(self, c: _Conn, req: Request) -> Head:
        """Sends req on c and reads the head of its answer."""
        body = req.body or b""
        try:
            if wants_continue(req):
                c.sock.sendall(encode_head(self.base, self.token, req, True))
                if select.select([c.sock], [], [], CONTINUE_WAIT)[0]:
                    head = parse_head(c.read_until(b"\r\n\r\n"))
                    if not (100 <= head.status < 200):
                        return head  # refused from the head: the body is not sent
                c.sock.sendall(body)
            else:
                c.sock.sendall(encode_head(self.base, self.token, req, False) + body)
        except OSError as e:
            raise Lost() from e
        return c.read_head()

    def _once(self, req: Request) -> Any:
        c = self._take(req.timeout or self.timeout)
        try:
            head = self._send(c, req)
            body, reusable = c.read_body(head)
        except BaseException:
            c.close()
            raise
        if reusable:
            self._give(c)
        else:
            c.close()
        return decode(req, head.status, head.content_type, body)

    def call(self, req: Request) -> Any:
        """Sends req, repeating it as far as its retry class allows, and returns its decoded JSON answer.
        Raises the error the daemon answered, or ConnectionFailed."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(req)
            except (Unsent, Lost, SandboxdError) as e:
                if not should_retry(req, attempt, self.backoff, e):
                    if isinstance(e, SandboxdError):
                        raise
                    raise transport_error(req, self.base, e) from e.__cause__
            time.sleep(self.backoff.delay(attempt))

    def open_stream(self, req: Request, read_timeout: float, *, or_json: bool = False) -> SyncStream:
        """Opens an event stream: one attempt (the caller reconnects). Raises Unsent or Lost for a
        transport failure, and the error the daemon answered. With or_json, a 200 answer in JSON is
        taken too: the stream returned is empty and its ``doc`` is the answer."""
        c = self._take(self.timeout)
        try:
            head = self._send(c, req)
            if head.status != 200 or (or_json and head.content_type.startswith("application/json")):
                body, _ = c.read_body(head)
                if head.status == 200:
                    s = SyncStream(c, head)
                    s.doc = decode(req, head.status, head.content_type, body)
                    s.close()
                    return s
                check_stream(req, head.status, head.content_type, lambda: body)
            check_stream(req, head.status, head.content_type, lambda: b"")
            c.sock.settimeout(read_timeout)
        except BaseException:
            c.close()
            raise
        return SyncStream(c, head)


class SyncStream:
    """An open event stream's body. Its connection is closed with it."""

    def __init__(self, c: _Conn, head: Head) -> None:
        self._c = c
        self._chunked = head.chunked()
        self._left = head.length()
        self._done = False
        self.doc: Any = None  # the JSON answer taken instead of a stream (open_stream's or_json)

    def set_timeout(self, seconds: float) -> None:
        self._c.sock.settimeout(max(seconds, 0.001))

    def read(self) -> bytes:
        """The next bytes of the body; b"" at its end. Raises Lost when the connection breaks or no byte
        arrives within the read timeout."""
        if self._done or self.doc is not None:
            return b""
        if self._chunked:
            data = self._c.read_chunk()
        elif self._left is not None:
            data = self._c.read_some()[: self._left] if self._left else b""
            self._left -= len(data)
        else:
            data = self._c.read_some()
        if not data:
            self._done = True
        return data

    def close(self) -> None:
        self._c.close()
