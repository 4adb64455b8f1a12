"""The package's own WebSocket client (sandboxd._websocket) against frames made by hand: what RFC 6455
allows decodes, what it refuses is refused with the close code to answer with; and a PortConnection over
a socket pair, the test playing the daemon's side. No daemon needed."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Dict, List, Optional, Tuple

import pytest

from sandboxd import ConnectionFailed, UnexpectedResponse
from sandboxd._http11 import parse_head
from sandboxd._websocket import (
    BINARY,
    CLOSE,
    PING,
    PONG,
    TEXT,
    Decoder,
    Message,
    WebSocketError,
    accept_of,
    check_handshake,
    close_payload,
    frame,
    mask,
    parse_close,
)
from sandboxd.relay import PortConnection


def server_frame(op: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0, key: Optional[bytes] = None,
                 length: Optional[bytes] = None) -> bytes:  # fmt: skip
    """A frame as a server sends it (unmasked unless key), with its length field given raw if length."""
    b0 = (0x80 if fin else 0) | rsv | op
    n = len(payload)
    if length is None:
        if n < 126:
            length = bytes([n])
        elif n < 1 << 16:
            length = bytes([126]) + struct.pack("!H", n)
        else:
            length = bytes([127]) + struct.pack("!Q", n)
    if key is not None:
        return bytes([b0, length[0] | 0x80]) + length[1:] + key + mask(payload, key)
    return bytes([b0]) + length + payload


def unmask_client(data: bytes) -> Tuple[int, bool, bytes, int]:
    """(opcode, fin, payload, bytes used) of one frame a client sent; asserts it is masked."""
    b0, b1 = data[0], data[1]
    assert b1 & 0x80, "a client frame must be masked"
    n, at = b1 & 0x7F, 2
    if n == 126:
        (n,) = struct.unpack_from("!H", data, 2)
        at = 4
    elif n == 127:
        (n,) = struct.unpack_from("!Q", data, 2)
        at = 10
    key = data[at : at + 4]
    return b0 & 0x0F, bool(b0 & 0x80), mask(data[at + 4 : at + 4 + n], key), at + 4 + n


def refused(data: bytes, code: int, max_message: int = 1 << 20) -> WebSocketError:
    with pytest.raises(WebSocketError) as e:
        Decoder(max_message).feed(data)
    assert e.value.code == code, e.value
    return e.value


def test_accept_key_of_rfc_6455() -> None:
    assert accept_of("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_handshake_check() -> None:
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    good = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_of(key),
        "Sec-WebSocket-Protocol": "sandboxd.tcp",
    }

    def head(status: int = 101, h: Optional[Dict[str, Optional[str]]] = None) -> bytes:
        hs = dict(good)
        for k, v in (h or {}).items():
            if v is None:
                hs.pop(k, None)
            else:
                hs[k] = v
        lines = [f"HTTP/1.1 {status} Switching Protocols"] + [f"{k}: {v}" for k, v in hs.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    check_handshake(parse_head(head()), key, "sandboxd.tcp")
    bad = [
        head(200),
        head(h={"Upgrade": None}),
        head(h={"Upgrade": "h2c"}),
        head(h={"Connection": "keep-alive"}),
        head(h={"Sec-WebSocket-Accept": accept_of("other")}),
        head(h={"Sec-WebSocket-Accept": None}),
        head(h={"Sec-WebSocket-Protocol": None}),
        head(h={"Sec-WebSocket-Protocol": "chat"}),
        head(h={"Sec-WebSocket-Extensions": "permessage-deflate"}),
    ]
    for raw in bad:
        with pytest.raises(UnexpectedResponse):
            check_handshake(parse_head(raw), key, "sandboxd.tcp")


@pytest.mark.parametrize("n", [0, 1, 125, 126, 65535, 65536, 300000])
def test_client_frames_are_masked_and_round_trip(n: int) -> None:
    payload = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
    a, b = frame(BINARY, payload), frame(BINARY, payload)
    op, fin, got, used = unmask_client(a)
    assert (op, fin, got, used) == (BINARY, True, payload, len(a))
    if n >= 16:
        assert a != b, "each frame has a fresh masking key"


def test_decoder_takes_what_the_rfc_allows() -> None:
    d = Decoder()
    stream = (
        server_frame(BINARY, b"one")
        + server_frame(TEXT, "é".encode(), fin=False)  # a fragmented text message...
        + server_frame(PING, b"p")  # ...with a control frame between its fragments
        + server_frame(0, b"t", fin=False)
        + server_frame(0, b"!")
        + server_frame(BINARY, b"x" * 70000)
        + server_frame(PONG)
        + server_frame(CLOSE, close_payload(1000, "bye"))
        + b"whatever follows a close is not read"
    )
    got: List[Message] = []
    for i in range(0, len(stream), 7):  # fed in pieces that cut frames anywhere
        got += d.feed(stream[i : i + 7])
    assert got == [
        Message(BINARY, b"one"),
        Message(PING, b"p"),
        Message(TEXT, "ét!".encode()),
        Message(BINARY, b"x" * 70000),
        Message(PONG, b""),
        Message(CLOSE, close_payload(1000, "bye")),
    ]
    assert d.closed and parse_close(got[-1].data) == (1000, "bye")
    d.eof()  # after the close, the end of the connection is no error
    assert parse_close(b"") == (1005, "")


def test_decoder_refuses_malformed_frames() -> None:
    refused(server_frame(BINARY, b"hi", key=b"abcd"), 1002)  # masked by the server
    refused(server_frame(3, b""), 1002)  # reserved data opcode
    refused(server_frame(0xB, b""), 1002)  # reserved control opcode
    refused(server_frame(BINARY, b"", rsv=0x40), 1002)  # RSV1 without an extension
    refused(server_frame(PING, b"x" * 126), 1002)  # a control frame over 125 bytes
    refused(server_frame(PING, b"", fin=False), 1002)  # a fragmented control frame
    refused(server_frame(0, b"orphan"), 1002)  # a continuation with nothing begun
    refused(server_frame(BINARY, b"a", fin=False) + server_frame(BINARY, b"b"), 1002)
    refused(server_frame(BINARY, b"x" * 10, length=bytes([126]) + struct.pack("!H", 10)), 1002)  # not shortest
    refused(server_frame(BINARY, b"x" * 200, length=bytes([127]) + struct.pack("!Q", 200)), 1002)
    refused(bytes([0x82, 127]) + struct.pack("!Q", 1 << 63), 1002)  # the top bit of a 64-bit length
    refused(server_frame(TEXT, b"\xff\xfe"), 1007)  # text that is not UTF-8
    refused(server_frame(CLOSE, b"\x03"), 1002)  # a close of one byte
    for code in (999, 1004, 1005, 1006, 1015, 2000, 5000):
        refused(server_frame(CLOSE, struct.pack("!H", code)), 1002)
    refused(server_frame(CLOSE, struct.pack("!H", 1000) + b"\xc3"), 1007)


def test_decoder_refuses_an_oversize_message_from_its_header() -> None:
    # Refused from the 10 bytes of its header: the 2^40 bytes it announces are never waited for.
    e = refused(bytes([0x82, 127]) + struct.pack("!Q", 1 << 40), 1009)
    assert "over" in str(e)
    refused(server_frame(BINARY, b"x" * 1025), 1009, max_message=1024)
    # The bound holds for a message's fragments together.
    d = Decoder(1024)
    assert d.feed(server_frame(BINARY, b"x" * 600, fin=False)) == []
    with pytest.raises(WebSocketError) as e2:
        d.feed(server_frame(0, b"x" * 600))
    assert e2.value.code == 1009
    assert Decoder(1024).feed(server_frame(BINARY, b"x" * 1024)) == [Message(BINARY, b"x" * 1024)]


def test_decoder_refuses_truncated_frames() -> None:
    for cut in (
        server_frame(BINARY, b"hello")[:1],  # half a header
        bytes([0x82, 126, 0x01]),  # half an extended length
        server_frame(BINARY, b"hello")[:4],  # part of the payload
        server_frame(BINARY, b"he", fin=False),  # a message whose last fragment never came
    ):
        d = Decoder()
        assert d.feed(cut) == []
        with pytest.raises(WebSocketError) as e:
            d.eof()
        assert e.value.code == 1006


# --- a PortConnection, the test as the daemon ---


class Peer:
    """The daemon's end of a socket pair: reads the client's frames, sends frames of its own."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        sock.settimeout(10)

    def next(self) -> Tuple[int, bytes]:
        while True:
            if len(self.buf) >= 2:
                try:
                    op, _, payload, used = unmask_client(self.buf)
                    if used <= len(self.buf):
                        self.buf = self.buf[used:]
                        return op, payload
                except (struct.error, IndexError):
                    pass
            d = self.sock.recv(65536)
            assert d, "the client closed without a frame"
            self.buf += d


def pair(read_timeout: float = 10.0) -> Tuple[PortConnection, Peer]:
    a, b = socket.socketpair()
    return PortConnection(a, b"", "port 1 of test", read_timeout, 1 << 20), Peer(b)


def test_connection_answers_pings_without_a_reader_and_ends_cleanly() -> None:
    conn, peer = pair()
    peer.sock.sendall(server_frame(PING, b"are you there"))
    assert peer.next() == (PONG, b"are you there")  # nobody called read()
    writer = threading.Thread(target=conn.write, args=(b"x" * (600 << 10),))  # the peer reads meanwhile
    writer.start()
    sizes: List[int] = []
    while sum(sizes) < 600 << 10:
        op, payload = peer.next()
        assert op == BINARY and set(payload) == {ord("x")}
        sizes.append(len(payload))
    writer.join(10)
    assert max(sizes) <= 256 << 10 and len(sizes) == 3  # split into messages of at most 256 KiB
    peer.sock.sendall(server_frame(BINARY, b"abc") + server_frame(BINARY, b"def") + server_frame(CLOSE, close_payload(1000)))
    assert conn.read(4) == b"abc"
    assert conn.read() == b"def"
    assert conn.read() == b""  # the sandbox's side ended: end of file
    assert peer.next() == (CLOSE, close_payload(1000))  # the close answered
    with pytest.raises(ConnectionFailed):
        conn.write(b"late")
    conn.close()


def test_connection_refuses_a_masked_frame_with_1002() -> None:
    conn, peer = pair()
    peer.sock.sendall(server_frame(BINARY, b"first") + server_frame(BINARY, b"masked", key=b"1234"))
    assert conn.read() == b"first"
    with pytest.raises(UnexpectedResponse, match="masked"):
        conn.read()
    op, payload = peer.next()
    assert op == CLOSE and parse_close(payload)[0] == 1002
    conn.close()


def test_connection_errors_of_the_relay() -> None:
    conn, peer = pair()
    peer.sock.sendall(server_frame(BINARY, b"kept") + server_frame(CLOSE, close_payload(1011, "the port: reset")))
    assert conn.read() == b"kept"  # the bytes before the error first
    with pytest.raises(ConnectionFailed, match="1011: the port: reset"):
        conn.read()
    conn.close()

    conn, peer = pair()
    peer.sock.sendall(server_frame(BINARY, b"abc")[:3])
    peer.sock.close()  # cut inside a frame
    with pytest.raises(UnexpectedResponse, match="inside a frame"):
        conn.read()
    conn.close()

    conn, peer = pair()
    peer.sock.sendall(server_frame(TEXT, b"text"))  # the relay carries bytes only
    with pytest.raises(UnexpectedResponse, match="text"):
        conn.read()
    assert parse_close(peer.next()[1])[0] == 1003
    conn.close()

    conn, peer = pair(read_timeout=0.3)  # silent: not even a ping
    with pytest.raises(ConnectionFailed, match="not even a ping"):
        conn.read()
    conn.close()


def test_read_timeout_and_close_from_another_thread() -> None:
    conn, peer = pair()
    conn.settimeout(0.05)
    with pytest.raises(socket.timeout):
        conn.read()
    conn.settimeout(None)
    errors: List[BaseException] = []

    def reader() -> None:
        try:
            conn.read()
        except BaseException as e:  # noqa: BLE001 - what the reader met is the assertion
            errors.append(e)

    th = threading.Thread(target=reader)
    th.start()
    closer = threading.Thread(target=conn.close)
    closer.start()
    assert peer.next()[0] == CLOSE
    peer.sock.sendall(server_frame(CLOSE, close_payload(1000)))
    closer.join(10)
    th.join(10)
    assert not th.is_alive() and not closer.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ConnectionFailed) and conn.closed
