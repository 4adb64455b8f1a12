"""The asynchronous transport: HTTP/1.1 (_http11) over asyncio streams. Connections are kept alive in a
small pool when the answer allows it. A connection belongs to the event loop that opened it, so an
AsyncClient is used from one loop."""

from __future__ import annotations

import asyncio
import ssl
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
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


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
                    limit=MAX_HEAD,
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

    async def _send(self, c: _Conn, req: Request, timeout: float) -> Head:
        body = req.body or b""
        expect = wants_continue(req)
        head_bytes = encode_head(self.base, self.token, req, expect)
        if expect:
            # The daemon may refuse from the head alone (see EXPECT_CONTINUE): wait a second for its
            # 100 Continue or its final answer before sending the body.
            c.writer.write(head_bytes)
            await _timed(c.writer.drain(), timeout)
            try:
                raw: bytes = await asyncio.wait_for(c.reader.readuntil(b"\r\n\r\n"), CONTINUE_WAIT)
            except asyncio.TimeoutError:
                raw = b""
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                raise Lost() from e
            if raw:
                head = parse_head(raw)
                if not (100 <= head.status < 200):
                    return head  # the body is not sent
            c.writer.write(body)
        else:
            c.writer.write(head_bytes + body)
        await _timed(c.writer.drain(), timeout + len(body) / (1 << 20))
        while True:
            raw = await _timed(c.reader.readuntil(b"\r\n\r\n"), timeout)
            head = parse_head(raw)
            if not (100 <= head.status < 200):
                return head

    async def _body(self, c: _Conn, head: Head, timeout: float) -> Tuple[bytes, bool]:
        """The whole body, and whether the connection may carry another request."""
        if head.chunked():
            parts: List[bytes] = []
            while True:
                part = await _read_chunk(c.reader, timeout)
                if not part:
                    return b"".join(parts), head.keep_alive()
                parts.append(part)
        n = head.length()
        if n is not None:
            return await _timed(c.reader.readexactly(n), timeout), head.keep_alive()
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
        return decode(req, head.status, head.content_type, body)

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

    async def open_stream(self, req: Request, read_timeout: float, *, or_json: bool = False) -> AsyncStream:
        """Opens an event stream: one attempt (the caller reconnects). Raises Unsent or Lost for a
        transport failure, and the error the daemon answered. With or_json, a 200 answer in JSON is
        taken too: the stream returned is empty and its ``doc`` is the answer."""
        c = await self._take(self.timeout)
        try:
            head = await self._send(c, req, self.timeout)
            if head.status != 200 or (or_json and head.content_type.startswith("application/json")):
                body, _ = await self._body(c, head, self.timeout)
                if head.status == 200:
                    s = AsyncStream(c, head, read_timeout)
                    s.doc = decode(req, head.status, head.content_type, body)
                    s.close()
                    return s
                check_stream(req, head.status, head.content_type, lambda: body)
            check_stream(req, head.status, head.content_type, lambda: b"")
        except BaseException:
            c.close()
            raise
        return AsyncStream(c, head, read_timeout)


class AsyncStream:
    """An open event stream's body. Its connection is closed with it."""

    def __init__(self, c: _Conn, head: Head, read_timeout: float) -> None:
        self._c = c
        self._chunked = head.chunked()
        self._left = head.length()
        self._timeout = read_timeout
        self._done = False
        self.doc: Any = None  # the JSON answer taken instead of a stream (open_stream's or_json)

    def set_timeout(self, seconds: float) -> None:
        self._timeout = max(seconds, 0.001)

    async def read(self) -> bytes:
        """The next bytes of the body; b"" at its end. Raises Lost when the connection breaks or no byte
        arrives within the read timeout."""
        if self._done or self.doc is not None:
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
    size = chunk_size(await _timed(r.readuntil(b"\r\n"), timeout))
    if size == 0:
        while (await _timed(r.readuntil(b"\r\n"), timeout)) != b"\r\n":
            pass  # a trailer
        return b""
    data: bytes = await _timed(r.readexactly(size + 2), timeout)
    if data[-2:] != b"\r\n":
        raise Lost() from ConnectionError("a chunk not followed by CRLF")
    return data[:-2]
