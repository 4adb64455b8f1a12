"""A minimal WebSocket client (RFC 6455) without I/O: the opening handshake's headers and its check, the
client's frames (always masked), and a decoder of the server's frames that refuses what the RFC refuses.
The synchronous and asynchronous port connections (:mod:`sandboxd._relay`) drive it over their sockets.

It speaks what the daemon's TCP relay needs and nothing more: binary and text messages (fragmented or
not), ping, pong and the close handshake; no extensions (compression is never offered, so a frame with a
reserved bit set is an error).
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import List, NamedTuple, Optional, Tuple, Union

from ._http11 import Head
from ._transport import header_tokens
from .errors import UnexpectedResponse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_OPCODES = frozenset({CONT, TEXT, BINARY, CLOSE, PING, PONG})

NORMAL = 1000
GOING_AWAY = 1001
PROTOCOL_ERROR = 1002
UNSUPPORTED_DATA = 1003
NO_STATUS = 1005  # never on the wire: a close frame without a code
ABNORMAL = 1006  # never on the wire: the connection ended without a close frame
INVALID_DATA = 1007
TOO_BIG = 1009

MAX_MESSAGE = 1 << 20
"""The default bound of a message (all its fragments together); the daemon's relay sends 256 KiB."""

MAX_CONTROL = 125


class WebSocketError(Exception):
    """The server broke the protocol: ``code`` is the close code to answer it with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def new_key() -> str:
    """A fresh Sec-WebSocket-Key: 16 random bytes in base64."""
    return base64.b64encode(os.urandom(16)).decode("ascii")


def accept_of(key: str) -> str:
    """The Sec-WebSocket-Accept a server answers key with."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def handshake_headers(key: str, protocol: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """The headers of the upgrade request (beside Host and the client's own)."""
    h: Tuple[Tuple[str, str], ...] = (
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", key),
    )
    if protocol:
        h += (("Sec-WebSocket-Protocol", protocol),)
    return h


def check_handshake(head: Head, key: str, protocol: Optional[str]) -> None:
    """Raises UnexpectedResponse unless head is the 101 that accepts the upgrade asked with key, with
    the subprotocol asked and no extension (none was offered)."""
    h = head.headers
    why = ""
    if head.status != 101:
        why = f"status {head.status}, want 101"
    elif "websocket" not in header_tokens(h.get("upgrade")):
        why = f"Upgrade {h.get('upgrade')!r}"
    elif "upgrade" not in header_tokens(h.get("connection")):
        why = f"Connection {h.get('connection')!r}"
    elif h.get("sec-websocket-accept", "").strip() != accept_of(key):
        why = "a Sec-WebSocket-Accept that does not match the key"
    elif h.get("sec-websocket-extensions", "").strip():
        why = f"an extension that was not offered ({h['sec-websocket-extensions']!r})"
    elif protocol is not None and h.get("sec-websocket-protocol", "").strip() != protocol:
        why = f"subprotocol {h.get('sec-websocket-protocol')!r}, want {protocol!r}"
    if why:
        raise UnexpectedResponse(f"WebSocket handshake: {why}", status=head.status)


def mask(data: bytes, key: bytes) -> bytes:
    """data XOR the 4-byte key repeated (RFC 6455, 5.3), as one big-integer XOR: fast in CPython."""
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True) -> bytes:
    """A client's frame: masked with a fresh key, as RFC 6455 requires of every client frame."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + mask(payload, key)


def close_payload(code: int, reason: str = "") -> bytes:
    """The payload of a close frame: the code, then the reason in UTF-8 (cut to fit 125 bytes)."""
    if code in (NO_STATUS, ABNORMAL):
        return b""
    r = reason.encode("utf-8")[: MAX_CONTROL - 2]
    return struct.pack("!H", code) + r.decode("utf-8", "ignore").encode("utf-8")


def _valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999


def parse_close(payload: bytes) -> Tuple[int, str]:
    """(code, reason) of a close frame's payload; (1005, "") for one without a code. Raises
    WebSocketError for a payload of one byte, a code that may not be sent, or a reason not UTF-8."""
    if not payload:
        return NO_STATUS, ""
    if len(payload) == 1:
        raise WebSocketError(PROTOCOL_ERROR, "a close frame of one byte")
    (code,) = struct.unpack("!H", payload[:2])
    if not _valid_close_code(code):
        raise WebSocketError(PROTOCOL_ERROR, f"close code {code} may not be sent")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise WebSocketError(INVALID_DATA, "a close reason that is not UTF-8") from None
    return code, reason


class Message(NamedTuple):
    """A whole data message (TEXT or BINARY, its fragments joined), or a control frame (PING, PONG,
    CLOSE) with its payload."""

    opcode: int
    data: bytes


class Decoder:
    """Bytes from the server in, whole messages and control frames out. Raises WebSocketError for a
    frame the RFC refuses: a reserved bit set, an unknown opcode, a masked frame (a server never
    masks), a control frame fragmented or over 125 bytes, a length not in its shortest form or with its
    top bit set, a continuation with no message begun or a message begun inside another, a message
    over ``max_message`` bytes (refused from its header, before its payload is held), text or a close
    reason that is not UTF-8, a bad close code."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._buf = bytearray()
        self._frag_op: Optional[int] = None
        self._frags: List[bytes] = []
        self._frag_len = 0
        self.closed = False  # a close frame has come: nothing after it is read
        self.error: Optional[WebSocketError] = None

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet whole."""
        return len(self._buf)

    def feed(self, data: bytes) -> List[Message]:
        """The messages data completes. The messages before a frame it refuses are returned first: the
        error is raised by the next call (or by :meth:`eof`)."""
        if self.error is not None:
            raise self.error
        if self.closed:
            return []
        self._buf += data
        out: List[Message] = []
        while not self.closed:
            try:
                m = self._next()
            except WebSocketError as e:
                if not out:
                    raise
                self.error = e
                break
            if m is False:
                break
            if m is True:
                continue  # a fragment, held
            if m.opcode == CLOSE:
                parse_close(m.data)
                self.closed = True
                self._buf.clear()
            out.append(m)
        return out

    def eof(self) -> None:
        """The connection ended: raises WebSocketError when it cut a frame or a message short."""
        if self.error is not None:
            raise self.error
        if self.closed:
            return
        if self._buf:
            raise WebSocketError(ABNORMAL, f"the connection ended inside a frame ({len(self._buf)} bytes of it)")
        if self._frag_op is not None:
            raise WebSocketError(ABNORMAL, "the connection ended inside a fragmented message")

    def _next(self) -> Union[Message, bool]:
        """The next message or control frame; False when more bytes are needed; True when a fragment
        was taken."""
        buf = self._buf
        if len(buf) < 2:
            return False
        b0, b1 = buf[0], buf[1]
        fin, rsv, op = b0 & 0x80, b0 & 0x70, b0 & 0x0F
        if rsv:
            raise WebSocketError(PROTOCOL_ERROR, "a frame with a reserved bit set (no extension was agreed)")
        if op not in _OPCODES:
            raise WebSocketError(PROTOCOL_ERROR, f"a frame of unknown opcode {op:#x}")
        if b1 & 0x80:
            raise WebSocketError(PROTOCOL_ERROR, "a masked frame from the server")
        n = b1 & 0x7F
        at = 2
        if n == 126:
            if len(buf) < 4:
                return False
            (n,) = struct.unpack_from("!H", buf, 2)
            at = 4
            if n < 126:
                raise WebSocketError(PROTOCOL_ERROR, "a frame length not in its shortest form")
        elif n == 127:
            if len(buf) < 10:
                return False
            (n,) = struct.unpack_from("!Q", buf, 2)
            at = 10
            if n >> 63:
                raise WebSocketError(PROTOCOL_ERROR, "a frame length with its top bit set")
            if n < 1 << 16:
                raise WebSocketError(PROTOCOL_ERROR, "a frame length not in its shortest form")
        if op >= CLOSE:
            if not fin:
                raise WebSocketError(PROTOCOL_ERROR, "a fragmented control frame")
            if n > MAX_CONTROL:
                raise WebSocketError(PROTOCOL_ERROR, f"a control frame of {n} bytes (at most {MAX_CONTROL})")
        else:
            if op == CONT and self._frag_op is None:
                raise WebSocketError(PROTOCOL_ERROR, "a continuation frame with no message begun")
            if op != CONT and self._frag_op is not None:
                raise WebSocketError(PROTOCOL_ERROR, "a new message inside a fragmented one")
            if self._frag_len + n > self.max_message:
                raise WebSocketError(TOO_BIG, f"a message over {self.max_message} bytes")
        if len(buf) < at + n:
            return False
        payload = bytes(buf[at : at + n])
        del buf[: at + n]
        if op >= CLOSE:
            return Message(op, payload)
        if op != CONT:
            self._frag_op = op
        self._frags.append(payload)
        self._frag_len += n
        if not fin:
            return True
        kind = self._frag_op
        assert kind is not None
        data = payload if len(self._frags) == 1 else b"".join(self._frags)
        self._frag_op, self._frags, self._frag_len = None, [], 0
        if kind == TEXT:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise WebSocketError(INVALID_DATA, "a text message that is not UTF-8") from None
        return Message(kind, data)
