"""A Server-Sent Events parser that does no I/O: bytes in, whole messages out (the WHATWG event stream
format: lines ending in LF, CRLF or CR; ``field: value``; a blank line ends a message; ``:`` starts a
comment). The synchronous and asynchronous streams feed it what they read."""

from __future__ import annotations

from typing import List, NamedTuple, Optional

MAX_LINE = 16 << 20


class Message(NamedTuple):
    id: Optional[str]
    event: str
    data: str


class SSEError(ValueError):
    pass


class Parser:
    def __init__(self) -> None:
        self._buf = b""
        self._data: List[str] = []
        self._event = ""
        self._id: Optional[str] = None
        self._has_data = False
        self.comments = 0  # comment lines seen (the daemon's greeting and heartbeats)

    def feed(self, chunk: bytes) -> List[Message]:
        """The messages chunk completes. A message cut off by the end of a connection is never
        returned: only a blank line dispatches one."""
        buf = self._buf + chunk if self._buf else chunk
        out: List[Message] = []
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:
                end, nxt = cr, cr + 1
                if nxt == n:
                    break  # a CR at the end: wait for what follows, it may be CRLF
                if buf[nxt : nxt + 1] == b"\n":
                    nxt += 1
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                break
            self._line(buf[start:end].decode("utf-8", "replace"), out)
            start = nxt
        self._buf = buf[start:]
        if len(self._buf) > MAX_LINE:
            raise SSEError(f"event stream line longer than {MAX_LINE} bytes")
        return out

    def reset(self) -> None:
        """Forgets a partial message (after the connection carrying it broke)."""
        self._buf = b""
        self._data = []
        self._event = ""
        self._has_data = False

    def _line(self, line: str, out: List[Message]) -> None:
        if not line:
            if self._has_data:
                out.append(Message(self._id, self._event or "message", "\n".join(self._data)))
            self._data = []
            self._event = ""
            self._has_data = False
            return
        if line[0] == ":":
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id = value
        # "retry" and unknown fields are ignored.
