"""The part of HTTP/1.1 both transports speak, without I/O: a request's bytes, an answer's head, the
framing of its body (Content-Length, chunked, or the end of the connection). Interim 1xx answers are
skipped by the callers; every answer the daemon sends fits this."""

from __future__ import annotations

from typing import Dict, Optional

from ._transport import Base, Lost, Request, header_tokens, headers
from .errors import UnexpectedResponse

MAX_HEAD = 64 << 10
EXPECT_CONTINUE = 1 << 20
"""A body this large is sent with ``Expect: 100-continue``: if the daemon refuses the request from its
head (too large, no token), it says so before the body is sent, rather than resetting the connection
under a client still sending it, which loses the answer."""

CONTINUE_WAIT = 1.0
"""Seconds to wait for ``100 Continue`` before sending the body anyway (RFC 9110, 10.1.1)."""


def encode_head(base: Base, token: Optional[str], req: Request, expect: bool) -> bytes:
    lines = [f"{req.method} {req.target(base.path)} HTTP/1.1", "Host: " + base.host_header]
    for k, v in headers(base, token, req):
        lines.append(f"{k}: {v}")
    if req.body is not None or req.method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(req.body or b'')}")
    if expect:
        lines.append("Expect: 100-continue")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def wants_continue(req: Request) -> bool:
    return req.body is not None and len(req.body) >= EXPECT_CONTINUE


class Head:
    """An answer's status line and headers (names in lower case, repeats joined with ", ")."""

    __slots__ = ("version", "status", "headers")

    def __init__(self, version: str, status: int, headers: Dict[str, str]) -> None:
        self.version = version
        self.status = status
        self.headers = headers

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def keep_alive(self) -> bool:
        conn = header_tokens(self.headers.get("connection"))
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn

    def chunked(self) -> bool:
        return "chunked" in header_tokens(self.headers.get("transfer-encoding"))

    def length(self) -> Optional[int]:
        """The Content-Length, or None when the body is framed otherwise."""
        if self.chunked():
            return None
        if self.status in (204, 304) or 100 <= self.status < 200:
            return 0
        v = self.headers.get("content-length")
        if v is None:
            return None
        if not v.strip().isdigit():
            raise Lost() from UnexpectedResponse(f"bad Content-Length {v!r}")
        return int(v)


def parse_head(raw: bytes) -> Head:
    """The head of an answer, raw up to and including its blank line."""
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
    return Head(parts[0], int(parts[1]), hdrs)


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (extensions ignored)."""
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise Lost() from UnexpectedResponse(f"bad chunk size line {line[:40]!r}")
