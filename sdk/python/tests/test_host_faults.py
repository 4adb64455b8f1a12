"""Provider faults made real on the host provider, whose sandboxes are plain directories
(``<data-dir>/host/<id>-g<generation>``, paused while ``<that>.paused`` exists): a path in the way makes
the provider itself fail, and the daemon answer as it does for any provider that fails. Only the host
provider can be broken from outside like this, so this file runs in the host pass alone."""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any

import pytest

import sandboxd
from conftest import PROVIDER, Factory, cursor_now
from daemon import Daemon
from proxy import FaultProxy

if PROVIDER != "host":
    raise RuntimeError("these tests break the host provider's directories; run them with the host provider")


def test_provider_unavailable(api: Any, daemon: Daemon) -> None:
    with api.create_sandbox() as sb:
        (daemon.host_dir / f"{sb.id}-g1.paused").mkdir()  # the pause marker cannot be written
        with pytest.raises(sandboxd.ProviderUnavailable) as e:
            sb.pause()
        assert (type(e.value), e.value.code, e.value.status) == (
            sandboxd.ProviderUnavailable,
            "provider_unavailable",
            503,
        )
        assert sb.refresh().state == "failed" and sb.failure is not None
        sb.terminate()  # a failed sandbox can always be terminated
        assert sb.state == "terminated"


def test_a_failed_generation_raises_with_its_reason(api: Any, daemon: Daemon) -> None:
    with api.create_sandbox() as sb:
        sb.terminate()
        (daemon.host_dir / f"{sb.id}-g2").write_text("not a directory")
        with pytest.raises(sandboxd.SandboxFailed) as e:
            sb.recreate()
        err = e.value
        assert isinstance(err, sandboxd.InvalidState) and err.wanted == "ready"
        assert err.sandbox.generation == 2 and err.sandbox.state == "failed"
        assert err.failure is not None and err.failure.code == "not_a_directory"
        assert sb.state == "failed" and sb.generation == 2
        sb.terminate()


def test_terminate_waits_through_the_event_stream(
    make_client: Factory, proxy: FaultProxy, client: sandboxd.Client, daemon: Daemon
) -> None:
    # A non-empty directory where the pause marker goes makes the release fail: the sandbox stays
    # terminating while the daemon retries in the background, until the directory is emptied.
    via = make_client(proxy.url)
    start = cursor_now(client)
    sb = via.create_sandbox()
    blocker = daemon.host_dir / f"{sb.id}-g1.paused"
    (blocker / "in-the-way").mkdir(parents=True)

    def unblock() -> None:
        deadline = time.monotonic() + 30
        while client.get_sandbox(sb.id).state != "terminating" and time.monotonic() < deadline:
            time.sleep(0.01)
        shutil.rmtree(blocker / "in-the-way")

    unblocker = threading.Thread(target=unblock)
    unblocker.start()
    try:
        gets_before = len(proxy.seen("GET", f"/v1/sandboxes/{sb.id}"))
        sb.terminate(timeout=30)
    finally:
        unblocker.join()
    assert sb.state == "terminated"
    streams = proxy.seen("GET", "/v1/events/stream")
    assert len(streams) == 1 and streams[0].query["sandboxId"] == sb.id
    # Not polling: the sandbox itself was read once, after the stream said it was terminated.
    assert len(proxy.seen("GET", f"/v1/sandboxes/{sb.id}")) - gets_before == 1
    # It listed what was logged up to terminating, and streamed from there.
    ends = [e for e in client.list_events(start, sb) if e.data.get("to") in ("terminating", "terminated")]
    assert [e.data["to"] for e in ends] == ["terminating", "terminated"]
    assert ends[0].cursor <= int(streams[0].query["after"]) < ends[1].cursor
