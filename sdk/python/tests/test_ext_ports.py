"""The group "ports" of api/extensions.yaml, with both clients against a real daemon."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Iterator, List, Optional

import pytest

import sandboxd
from conftest import PROVIDER
from daemon import REPO, Daemon

WAIT = """import socket, time
for i in range(200):
    try:
        socket.create_connection(("127.0.0.1", 8000)).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    raise SystemExit(1)
"""


def test_port_url_and_canonical_ports(api: Any) -> None:
    with api.create_sandbox() as sb:
        assert sb.port_url(8000) == api.url.rstrip("/") + f"/v1/sandboxes/{sb.id}/ports/8000/"
        assert sb.port_url("65535").endswith("/ports/65535/")
        for bad in ("02280", "+80", 0, 65536, "80 ", "", True, 8.0):
            with pytest.raises(ValueError):
                sb.port_url(bad)
        assert sandboxd.extensions.parse_port("1") == 1


def test_proxy_and_preview(api: Any, daemon: Daemon) -> None:
    with api.create_sandbox() as sb:
        if PROVIDER == "host":
            # The host's 127.0.0.1 is not a sandbox's: no portForwarding there, a 422.
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                sb.preview_token(8000)
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
            req = urllib.request.Request(sb.port_url(8000), headers={"Authorization": "Bearer " + daemon.token})
            with pytest.raises(urllib.error.HTTPError) as he:
                urllib.request.urlopen(req, timeout=10)
            assert he.value.code == 422
            return
        sb.files.write("/workspace/www/hello.txt", "hello")
        sb.start_process(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/www"])
        sb.run(["python3", "-c", WAIT], check=True)
        req = urllib.request.Request(sb.port_url(8000) + "hello.txt", headers={"Authorization": "Bearer " + daemon.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.read() == b"hello"
        with pytest.raises(urllib.error.HTTPError) as he:  # the proxy is authenticated as the API
            urllib.request.urlopen(sb.port_url(8000) + "hello.txt", timeout=10)
        assert he.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as he:  # nothing listens there
            urllib.request.urlopen(urllib.request.Request(sb.port_url(8001), headers={"Authorization": "Bearer " + daemon.token}), timeout=10)
        assert he.value.code == 502
        tok = sb.preview_token(8000, ttl_seconds=60)
        assert isinstance(tok, sandboxd.PreviewToken)
        assert (tok.port, tok.generation) == (8000, sb.generation) and tok.expires_at.utcoffset() is not None
        base = tok.url.split("?")[0]
        req = urllib.request.Request(base + "hello.txt", headers={"X-Sandboxd-Preview-Token": tok.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.read() == b"hello"
        with pytest.raises(urllib.error.HTTPError) as he:
            urllib.request.urlopen(base + "hello.txt", timeout=10)
        assert he.value.code == 401
        with pytest.raises(sandboxd.ValidationError):
            sb.preview_token(8000, ttl_seconds=0)


# --- the raw TCP relay: dial_port and forward_port ---

PORTSERVER = (REPO / "provider" / "oci" / "testdata" / "portserver.py").read_text()
BIG = 64 << 20


@pytest.fixture(scope="module")
def served(daemon: Daemon) -> Iterator[str]:
    """(oci) The id of a sandbox whose port 8000 serves the Go tests' portserver.py: / says hello,
    /big?n=N sends N bytes "x", POST /echo answers its body; and whose port 8001 sends as many bytes as
    the decimal number a connection sends asks, then closes."""
    with sandboxd.Client(daemon.url, daemon.token) as c:
        with c.create_sandbox() as sb:
            sb.files.write("/workspace/portserver.py", PORTSERVER)
            sb.start_process(["python3", "/workspace/portserver.py", "http", "8000"])
            sb.start_process(["python3", "/workspace/portserver.py", "zeros", "8001"])
            sb.run(["python3", "-c", WAIT], check=True)
            sb.run(["python3", "-c", WAIT.replace("8000", "8001")], check=True)
            yield sb.id


def fetch(url: str, data: Optional[bytes] = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=120) as r:
        return bytes(r.read())


def count_x(url: str) -> int:
    """How many bytes the answer to url has, checking each is "x" as it comes."""
    n = 0
    with urllib.request.urlopen(url, timeout=120) as r:
        while True:
            b = r.read(1 << 20)
            if not b:
                return n
            assert b.count(b"x") == len(b)
            n += len(b)


def test_dial_port(api: Any, request: pytest.FixtureRequest) -> None:
    if PROVIDER == "host":
        with api.create_sandbox() as sb:
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                api.dial_port(sb.id, 8000)
            assert e.value.status == 422
            with pytest.raises(ValueError):
                sb.dial_port(0)
        return
    sid = request.getfixturevalue("served")
    with api.dial_port(sid, 8000) as conn:
        conn.write(b"GET /rt0 HTTP/1.1\r\nHost: x\r\n\r\nGET /rt1 HTTP/1.1\r\nHost: x\r\n\r\n")  # two on one connection
        got = b""
        while b"hello from /rt1" not in got:
            b = conn.read()
            assert b, f"the connection ended after {got!r}"
            got += b
        assert got.count(b"HTTP/1.1 200") == 2 and got.index(b"hello from /rt0") < got.index(b"hello from /rt1")
    with pytest.raises(sandboxd.ConnectionFailed):
        conn.write(b"after the close")
    with pytest.raises(sandboxd.PortUnreachable) as pe:  # nothing listens there: refused before the upgrade
        api.dial_port(sid, 8099)
    assert pe.value.status == 502 and pe.value.code == "port_unreachable"
    with pytest.raises(sandboxd.NotFound):
        api.dial_port("sbx_nonexistent", 8000)


def test_a_sender_that_never_stops_meets_a_bounded_buffer(client: sandboxd.Client, request: pytest.FixtureRequest) -> None:
    # What the sandbox sends while nobody reads is held up to the connection's buffer, then waits in
    # the daemon and the sandbox (TCP's backpressure); read later, nothing is lost.
    if PROVIDER == "host":
        with client.create_sandbox() as sb, pytest.raises(sandboxd.UnsupportedCapability):
            sb.dial_port(8001)
        return
    from sandboxd.relay import BUFFER, FRAME

    sid = request.getfixturevalue("served")
    with client.dial_port(sid, 8001) as conn:
        conn.write(f"{BIG}\n".encode())
        deadline = time.monotonic() + 60
        while conn._in.held < BUFFER and time.monotonic() < deadline:
            time.sleep(0.05)
        assert conn._in.held >= BUFFER, "the buffer never filled"
        time.sleep(0.5)  # the sender goes on; the connection does not take more
        assert conn._in.held < BUFFER + FRAME
        n = 0
        while True:
            b = conn.read(1 << 20)
            if not b:
                break
            assert b.count(b"x") == len(b)
            n += len(b)
        assert n == BIG


def test_forward_port(client: sandboxd.Client, request: pytest.FixtureRequest) -> None:
    if PROVIDER == "host":
        with client.create_sandbox() as sb, sb.forward_port(8000) as fwd:
            with socket.create_connection(fwd.address, timeout=30) as s:
                assert s.recv(1) == b""  # closed: no relay to the port
            assert isinstance(fwd.errors[0], sandboxd.UnsupportedCapability)
        return
    sid = request.getfixturevalue("served")
    with client.forward_port(sid, 8000) as fwd:
        assert fwd.address[0] == "127.0.0.1" and fwd.port > 0
        base = f"http://127.0.0.1:{fwd.port}"
        assert fetch(base + "/hello") == b"hello from /hello"
        assert count_x(f"{base}/big?n={BIG}") == BIG
        body = bytes(range(256)) * (8 << 12)  # 8 MiB up, masked, and back
        assert fetch(base + "/echo", body) == body
        assert fwd.accepted == 3 and not fwd.errors
    with pytest.raises(OSError):  # closed: nothing listens there now
        socket.create_connection(fwd.address, timeout=5).close()
    seen: List[sandboxd.SandboxdError] = []
    with client.forward_port(sid, 8099, on_error=seen.append) as fwd:
        with socket.create_connection(fwd.address, timeout=30) as s:
            assert s.recv(1) == b""  # the local connection is closed at once
        assert len(fwd.errors) == 1 and isinstance(fwd.errors[0], sandboxd.PortUnreachable) and seen == fwd.errors
        assert "8099" in str(fwd.errors[0]) or fwd.errors[0].status == 502


def test_forward_port_async(daemon: Daemon, request: pytest.FixtureRequest) -> None:
    sid = "" if PROVIDER == "host" else request.getfixturevalue("served")

    async def main() -> None:
        async with sandboxd.AsyncClient(daemon.url, daemon.token) as c:
            loop = asyncio.get_running_loop()
            if PROVIDER == "host":
                async with await c.create_sandbox() as sb, await sb.forward_port(8000) as fwd:
                    r, w = await asyncio.open_connection(*fwd.address)
                    assert await r.read(1) == b""
                    w.close()
                    assert isinstance(fwd.errors[0], sandboxd.UnsupportedCapability)
                return
            async with await c.forward_port(sid, 8000) as fwd:
                base = f"http://127.0.0.1:{fwd.port}"
                hello, n = await asyncio.gather(
                    loop.run_in_executor(None, fetch, base + "/hi"),
                    loop.run_in_executor(None, count_x, f"{base}/big?n={16 << 20}"),
                )  # two connections at once, each a task
                assert hello == b"hello from /hi" and n == 16 << 20
                body = bytes(range(256)) * (4 << 12)
                assert await loop.run_in_executor(None, fetch, base + "/echo", body) == body
                assert fwd.accepted == 3 and not fwd.errors
            async with await c.forward_port(sid, 8099) as fwd:
                r, w = await asyncio.open_connection(*fwd.address)
                assert await r.read(1) == b""
                w.close()
                assert isinstance(fwd.errors[0], sandboxd.PortUnreachable)

    asyncio.run(main())
