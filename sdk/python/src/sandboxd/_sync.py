"""The synchronous transport: http.client connections kept alive in a small pool, shared by threads."""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import Any, List, Optional

from ._transport import (
    DEFAULT_TIMEOUT,
    EXPECT_CONTINUE,
    Backoff,
    Base,
    Lost,
    Request,
    Unsent,
    check_stream,
    decode,
    headers,
    should_retry,
    transport_error,
)
from .errors import SandboxdError

_POOL_SIZE = 8


def _continue(sock: socket.socket) -> bool:
    """After the head of a request with ``Expect: 100-continue``: whether to send its body. True on
    ``100 Continue`` (read off the socket) or when the daemon says nothing for a second; False when its
    final answer came first, which http.client then reads."""
    if not select.select([sock], [], [], 1.0)[0]:
        return True
    head = b""
    while b"\r\n\r\n" not in head:
        peek = sock.recv(len(head) + 4096, socket.MSG_PEEK)
        if len(peek) <= len(head):
            return False  # closed: let getresponse report it
        head = peek
        if not head.startswith(b"HTTP/1.1 100") and len(head) >= 12:
            return False
    end = head.index(b"\r\n\r\n") + 4
    got = 0
    while got < end:
        got += len(sock.recv(end - got))
    return True


class SyncTransport:
    def __init__(self, base: Base, token: Optional[str], timeout: float, backoff: Backoff) -> None:
        self.base = base
        self.token = token
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self.backoff = backoff
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context() if base.scheme == "https" else None

    # --- connections ---

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._ssl is not None:
            conn = http.client.HTTPSConnection(self.base.host, self.base.port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.base.host, self.base.port, timeout=timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise Unsent() from e
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _take(self, timeout: float) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(timeout)
            sock = conn.sock
            # An idle connection the daemon has closed (its idle timeout) is readable: drop it rather
            # than send on it, so that no request is lost on a connection that was already gone.
            # (A TLS socket may be readable for TLS's own records, so it is not checked.)
            if sock is not None and (self._ssl is not None or not select.select([sock], [], [], 0)[0]):
                sock.settimeout(timeout)
                return conn
            conn.close()

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    # --- requests ---

    def _send(self, conn: http.client.HTTPConnection, req: Request) -> http.client.HTTPResponse:
        conn.putrequest(req.method, req.target(self.base.path), skip_accept_encoding=True)
        for k, v in headers(self.base, self.token, req):
            conn.putheader(k, v)
        body = req.body
        if body is not None or req.method in ("POST", "PUT"):
            conn.putheader("Content-Length", str(len(body or b"")))
        if body is not None and len(body) >= EXPECT_CONTINUE and self._ssl is None and conn.sock is not None:
            conn.putheader("Expect", "100-continue")
            conn.endheaders()
            if _continue(conn.sock):
                conn.send(body)
            # else the daemon answered before the body (a 413, a 401): it is not sent at all
        else:
            conn.endheaders(body)
        return conn.getresponse()

    def _once(self, req: Request) -> Any:
        timeout = req.timeout or self.timeout
        conn = self._take(timeout)
        try:
            try:
                resp = self._send(conn, req)
                body = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise Lost() from e
            ctype = resp.getheader("Content-Type") or ""
            status = resp.status
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._give(conn)
        return decode(req, status, ctype, body)

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

    def open_stream(self, req: Request, read_timeout: float) -> SyncStream:
        """Opens an event stream: one attempt (the caller reconnects). Raises Unsent or Lost for a
        transport failure, and the error the daemon answered."""
        conn = self._take(self.timeout)
        # http.client lets go of the socket of an answer that ends with its connection; keep it, to set
        # the read timeout on.
        sock = conn.sock
        try:
            try:
                resp = self._send(conn, req)
            except (OSError, http.client.HTTPException) as e:
                raise Lost() from e
            check_stream(req, resp.status, resp.getheader("Content-Type") or "", resp.read)
            sock.settimeout(read_timeout)
        except BaseException:
            conn.close()
            raise
        return SyncStream(conn, resp, sock)


class SyncStream:
    """An open event stream's body. It is never given back to the pool."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, sock: socket.socket) -> None:
        self._conn = conn
        self._resp = resp
        self._sock = sock

    def set_timeout(self, seconds: float) -> None:
        self._sock.settimeout(max(seconds, 0.001))

    def read(self) -> bytes:
        """The next bytes of the body; b"" at its end. Raises Lost when the connection breaks or no byte
        arrives within the read timeout."""
        try:
            return self._resp.read1(65536)
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise Lost() from e

    def close(self) -> None:
        self._resp.close()
        self._conn.close()
        self._sock.close()
