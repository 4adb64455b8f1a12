"""A loopback HTTP proxy in front of the daemon that breaks connections on purpose.

Every request is passed on to the daemon as HTTP/1.0 with ``Connection: close`` (so an answer ends with
its connection and an event stream arrives unframed, which lets the proxy count its events), with the
daemon's own Host. Rules, each used a given number of times, break the answers of matching requests:

- ``drop_answer``: the daemon handles the request in full; the client gets its connection reset instead
  of the answer.
- ``cut_stream``: an event stream passes ``events`` events and half of the next, then both connections
  are closed.
- ``stall_stream``: an event stream passes ``events`` events, then nothing more (the connections stay
  open), as a dead peer behind a live socket would.
- ``answer_stream``: the proxy answers the request itself, never asking the daemon: an event stream of
  the given bytes, sent a few at a time, then the connection's end.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Seen:
    method: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: bytes


@dataclass
class Rule:
    kind: str
    method: str
    path: str
    times: int
    events: int = 0
    used: int = 0
    body: bytes = b""


@dataclass
class FaultProxy:
    upstream: Tuple[str, int]
    requests: List[Seen] = field(default_factory=list)
    rules: List[Rule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lsock = socket.socket()
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._lsock.getsockname()[1]

    def drop_answer(self, method: str, path: str, times: int = 1) -> Rule:
        return self._add(Rule("drop", method, path, times))

    def cut_stream(self, events: int, times: int = 1, path: str = "/v1/events/stream") -> Rule:
        return self._add(Rule("cut", "GET", path, times, events))

    def stall_stream(self, events: int, times: int = 1) -> Rule:
        return self._add(Rule("stall", "GET", "/v1/events/stream", times, events))

    def answer_stream(self, path: str, body: bytes, times: int = 1) -> Rule:
        return self._add(Rule("answer", "GET", path, times, body=body))

    def seen(self, method: str, path: str) -> List[Seen]:
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    def close(self) -> None:
        self._closed = True
        try:
            self._lsock.shutdown(socket.SHUT_RDWR)  # wakes the accept, and stops listening at once
        except OSError:
            pass
        self._lsock.close()
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            _abort(s)

    def _add(self, r: Rule) -> Rule:
        with self._lock:
            self.rules.append(r)
        return r

    def _rule(self, method: str, path: str) -> Optional[Rule]:
        with self._lock:
            for r in self.rules:
                if r.used < r.times and r.method == method and r.path == path:
                    r.used += 1
                    return r
        return None

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._lsock.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        up: Optional[socket.socket] = None
        try:
            head, body = _read_request(c)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            hdrs = {}
            for line in lines[1:]:
                if line:
                    k, _, v = line.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
            u = urlsplit(target)
            with self._lock:
                self.requests.append(Seen(method, u.path, dict(parse_qsl(u.query)), hdrs, body))
            rule = self._rule(method, u.path)
            if rule is not None and rule.kind == "answer":
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                for i in range(0, len(rule.body), 7):  # events and lines cut across reads
                    c.sendall(rule.body[i : i + 7])
                return
            out = [f"{method} {target} HTTP/1.0", "Host: %s:%d" % self.upstream, "Connection: close"]
            out += [f"{k}: {v}" for k, v in hdrs.items() if k not in ("host", "connection", "keep-alive")]
            up = socket.create_connection(self.upstream)
            with self._lock:
                self._open.append(up)
            up.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            if rule is None:
                _relay(up, c)
            elif rule.kind == "drop":
                while up.recv(65536):  # the daemon answers in full; the client hears nothing
                    pass
                _abort(c)
            else:
                self._stream(up, c, rule)
        except OSError:
            pass
        finally:
            for s in (c, up):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _stream(self, up: socket.socket, c: socket.socket, rule: Rule) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = up.recv(65536)
            if not d:
                c.sendall(buf)
                return
            buf += d
        head, _, buf = buf.partition(b"\r\n\r\n")
        c.sendall(head + b"\r\n\r\n")
        passed = 0
        while True:
            while b"\n\n" in buf:
                block, _, buf = buf.partition(b"\n\n")
                if b"data:" not in block:
                    if rule.kind != "stall" or passed < rule.events:
                        c.sendall(block + b"\n\n")  # a comment: the greeting, a heartbeat
                    continue
                if passed == rule.events:
                    if rule.kind == "cut":
                        # A plain close (FIN): a reset would let the client's kernel discard what it
                        # had received and not yet read.
                        c.sendall(block[: len(block) // 2])
                        c.shutdown(socket.SHUT_RDWR)
                        return
                    continue  # stalled: swallow it
                c.sendall(block + b"\n\n")
                passed += 1
            d = up.recv(65536)
            if not d:
                return
            buf += d


def _read_request(c: socket.socket) -> Tuple[Optional[bytes], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None, b""
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v.strip())
    while len(rest) < n:
        d = c.recv(65536)
        if not d:
            break
        rest += d
    return head, rest[:n]


def _relay(up: socket.socket, c: socket.socket) -> None:
    while True:
        d = up.recv(65536)
        if not d:
            return
        c.sendall(d)


def _abort(s: socket.socket) -> None:
    """Closes s with a reset, as a connection broken mid-answer looks."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    except OSError:
        pass
