"""The group "stats and metrics" of api/extensions.yaml, with both clients against a real daemon."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

import sandboxd
from conftest import PROVIDER
from daemon import Daemon


def test_stats(api: Any) -> None:
    with api.create_sandbox() as sb:
        if PROVIDER == "host":
            # The host provider reads no cgroups of its sandboxes: the 422 of an unsupported capability.
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                sb.stats()
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
            with pytest.raises(sandboxd.UnsupportedCapability):  # the same through request()
                api.request("GET", f"/v1/sandboxes/{sb.id}/stats", idempotent=True)
            return
        sb.run(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"], check=True)
        st = sb.stats()
        assert isinstance(st, sandboxd.SandboxStats)
        assert (st.sandbox_id, st.generation, st.state) == (sb.id, sb.generation, "ready")
        assert st.observed_at.utcoffset() is not None
        assert st.cpu_seconds is not None and st.cpu_seconds > 0
        assert st.memory_bytes is not None and st.memory_bytes > 0
        assert st.memory_limit_bytes is not None and st.memory_limit_bytes >= st.memory_bytes
        assert st.pids is not None and st.pids >= 1
        assert st.disk_limit_bytes is not None and st.disk_limit_bytes > 0
        raw = api.request("GET", f"/v1/sandboxes/{sb.id}/stats", idempotent=True)  # checked as getSandboxStats
        assert raw["sandboxId"] == sb.id and sandboxd.SandboxStats.from_json(raw).memory_limit_bytes == st.memory_limit_bytes
        sb.pause()
        assert sb.stats().state == "paused"
        sb.resume()
        sb.terminate()
        with pytest.raises(sandboxd.InvalidState):
            sb.stats()
    with pytest.raises(sandboxd.NotFound):
        api.get_sandbox("sbx_nosuchsandbox").stats()


def test_metrics(api: Any, daemon: Daemon) -> None:
    with api.create_sandbox() as sb:
        sb.run(["true"])
    text = api.metrics()
    assert isinstance(text, str)
    assert "sandboxd_http_requests_total" in text
    assert any(line.startswith("# TYPE sandboxd_http_requests_total ") for line in text.splitlines())
    # The daemon of the suite has a token: without it, or with another, the metrics are refused.
    with sandboxd.Client(daemon.url, "not-the-token") as other:
        with pytest.raises(sandboxd.Unauthenticated):
            other.metrics()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(daemon.url + "/metrics", timeout=10)
    assert e.value.code == 401
