"""The asynchronous transport: HTTP/1.1 over asyncio streams, written out by hand.

It speaks the part of HTTP/1.1 the daemon's answers use: a status line and headers, then a body framed
by Content-Length, by chunked transfer coding, or by the end of the connection; interim 1xx answers are
skipped. Connections are kept alive in a small pool when the answer allows it. A connection belongs to
the event loop that opened it, so an AsyncClient is used from one loop.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Dict, List, Optional, Tuple

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
    header_tokens,
    headers,
    should_retry,
    transport_error,
)
from .errors import SandboxdError, UnexpectedResponse

_POOL_SIZE = 8
_MAX_HEAD = 64 << 10


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class _Head:
    __slots__ = ("version", "status", "headers")

    def __init__(self, version: str, status: int, headers: Dict[str, str]) -> None:
        self.version = version
        self.status = status
        self.headers = headers

    def keep_alive(self) -> bool:
        conn = header_tokens(self.headers.get("connection"))
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


async def _timed(aw: Any, timeout: float) -> Any:
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError as e:
        raise Lost() from TimeoutError(f"no answer within {timeout:g}s")
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
        raise Lost() from e


class AsyncTransport:
    def __init__(self, base: Base, token: Optional[str], timeout: float, backoff: Backoff) -> None:
        self.base = base
        self.token = token
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self.backoff = backoff
        self._idle: List[_Conn] = []
        self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context() if base.scheme == "https" else None

    async def _new(self, timeout: float) -> _Conn:
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(
                    self.base.host,
                    self.base.port,
                    ssl=self._ssl,
                    server_hostname=self.base.host if self._ssl else None,
                    limit=_MAX_HEAD,
                ),
                timeout,
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise Unsent() from e
        return _Conn(r, w)

    async def _take(self, timeout: float) -> _Conn:
        while self._idle:
            c = self._idle.pop()
            if c.usable():
                return c
            c.close()
        return await self._new(timeout)

    def _give(self, c: _Conn) -> None:
        if len(self._idle) < _POOL_SIZE and c.usable():
            self._idle.append(c)
        else:
            c.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        for c in idle:
            try:
                await c.writer.wait_closed()
            except OSError:
                pass

    # --- the wire ---

    def _encode(self, req: Request, expect: bool) -> bytes:
        lines = [f"{req.method} {req.target(self.base.path)} HTTP/1.1", "Host: " + self.base.host_header]
        for k, v in headers(self.base, self.token, req):
            lines.append(f"{k}: {v}")
        if req.body is not None or req.method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(req.body or b'')}")
        if expect:
            lines.append("Expect: 100-continue")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _send(self, c: _Conn, req: Request, timeout: float) -> _Head:
        body = req.body or b""
        expect = len(body) >= EXPECT_CONTINUE
        head_bytes = self._encode(req, expect)
        if expect:
            # The daemon may refuse from the head alone (see EXPECT_CONTINUE): wait a second for its
            # 100 Continue or its final answer before sending the body.
            c.writer.write(head_bytes)
            await _timed(c.writer.drain(), timeout)
            try:
                raw: bytes = await asyncio.wait_for(c.reader.readuntil(b"\r\n\r\n"), 1.0)
            except asyncio.TimeoutError:
                raw = b""
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                raise Lost() from e
            if raw:
                head = _parse_head(raw)
                if not (100 <= head.status < 200):
                    return head  # the body is not sent
            c.writer.write(body)
        else:
            c.writer.write(head_bytes + body)
        await _timed(c.writer.drain(), timeout + len(body) / (1 << 20))
        while True:
            raw = await _timed(c.reader.readuntil(b"\r\n\r\n"), timeout)
            head = _parse_head(raw)
            if not (100 <= head.status < 200):
                return head

    async def _body(self, c: _Conn, head: _Head, timeout: float) -> Tuple[bytes, bool]:
        """The whole body, and whether the connection may carry another request."""
        h = head.headers
        if "chunked" in header_tokens(h.get("transfer-encoding")):
            parts = []
            while True:
                part = await _read_chunk(c.reader, timeout)
                if not part:
                    break
                parts.append(part)
            return b"".join(parts), head.keep_alive()
        if "content-length" in h:
            try:
                n = int(h["content-length"])
            except ValueError:
                raise UnexpectedResponse(f"bad Content-Length {h['content-length']!r}") from None
            return await _timed(c.reader.readexactly(n), timeout), head.keep_alive()
        if head.status in (204, 304):
            return b"", head.keep_alive()
        return await _timed(c.reader.read(), timeout), False

    async def _once(self, req: Request) -> Any:
        timeout = req.timeout or self.timeout
        c = await self._take(timeout)
        try:
            head = await self._send(c, req, timeout)
            body, reusable = await self._body(c, head, timeout)
        except BaseException:
            c.close()
            raise
        if reusable:
            self._give(c)
        else:
            c.close()
        return decode(req, head.status, head.headers.get("content-type", ""), body)

    async def call(self, req: Request) -> Any:
        """Sends req, repeating it as far as its retry class allows, and returns its decoded JSON answer.
        Raises the error the daemon answered, or ConnectionFailed."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(req)
            except (Unsent, Lost, SandboxdError) as e:
                if not should_retry(req, attempt, self.backoff, e):
                    if isinstance(e, SandboxdError):
                        raise
                    raise transport_error(req, self.base, e) from e.__cause__
            await asyncio.sleep(self.backoff.delay(attempt))

    async def open_stream(self, req: Request, read_timeout: float) -> AsyncStream:
        """Opens an event stream: one attempt (the caller reconnects). Raises Unsent or Lost for a
        transport failure, and the error the daemon answered."""
        c = await self._take(self.timeout)
        try:
            head = await self._send(c, req, self.timeout)
            if head.status != 200:
                body, _ = await self._body(c, head, self.timeout)
                check_stream(req, head.status, head.headers.get("content-type", ""), lambda: body)
            check_stream(req, head.status, head.headers.get("content-type", ""), lambda: b"")
        except BaseException:
            c.close()
            raise
        return AsyncStream(c, head, read_timeout)


class AsyncStream:
    """An open event stream's body. Its connection is closed with it."""

    def __init__(self, c: _Conn, head: _Head, read_timeout: float) -> None:
        self._c = c
        self._chunked = "chunked" in header_tokens(head.headers.get("transfer-encoding"))
        cl = head.headers.get("content-length")
        self._left: Optional[int] = int(cl) if cl and cl.isdigit() else None
        self._timeout = read_timeout
        self._done = False

    async def read(self) -> bytes:
        """The next bytes of the body; b"" at its end. Raises Lost when the connection breaks or no byte
        arrives within the read timeout."""
        if self._done:
            return b""
        r = self._c.reader
        if self._chunked:
            data = await _read_chunk(r, self._timeout)
        elif self._left is not None:
            data = await _timed(r.read(min(self._left, 65536)), self._timeout) if self._left else b""
            self._left -= len(data)
        else:
            data = await _timed(r.read(65536), self._timeout)
        if not data:
            self._done = True
        return data

    def close(self) -> None:
        self._c.close()


async def _read_chunk(r: asyncio.StreamReader, timeout: float) -> bytes:
    """One chunk of a chunked body; b"" for the last (its trailers read)."""
    line: bytes = await _timed(r.readuntil(b"\r\n"), timeout)
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise Lost() from UnexpectedResponse(f"bad chunk size line {line[:40]!r}")
    if size == 0:
        while (await _timed(r.readuntil(b"\r\n"), timeout)) != b"\r\n":
            pass  # a trailer
        return b""
    data: bytes = await _timed(r.readexactly(size + 2), timeout)
    if data[-2:] != b"\r\n":
        raise Lost() from UnexpectedResponse("chunk not followed by CRLF")
    return data[:-2]


def _parse_head(raw: bytes) -> _Head:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Lost() from UnexpectedResponse(f"bad status line {lines[0][:80]!r}")
    hdrs: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if not sep:
            raise Lost() from UnexpectedResponse(f"bad header line {line[:80]!r}")
        k, v = k.strip().lower(), v.strip()
        hdrs[k] = hdrs[k] + ", " + v if k in hdrs else v
    return _Head(parts[0], int(parts[1]), hdrs)
