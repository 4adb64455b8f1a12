"""The group "ports" of api/extensions.yaml, with both clients against a real daemon."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

import sandboxd
from conftest import PROVIDER
from daemon import Daemon

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
