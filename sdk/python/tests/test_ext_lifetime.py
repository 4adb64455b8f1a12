"""spec.extensions["sandboxd.lifetime"], with both clients against a real daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import pytest

import sandboxd
from conftest import PROVIDER, _stop
from daemon import Daemon
from sandboxd.extensions import LIFETIME_KEY


def test_create_with_a_lifetime_reads_it_back(api: Any) -> None:
    with api.create_sandbox(lifetime=sandboxd.Lifetime(ttl_seconds=3600)) as sb:
        assert sb.spec.extensions[LIFETIME_KEY] == {"ttlSeconds": 3600}
        lt = sb.lifetime
        assert isinstance(lt, sandboxd.RecordedLifetime)
        assert lt.ttl_seconds == 3600 and lt.idle_seconds is None and lt.on_idle is None
        assert lt.expires_at is not None and (lt.expires_at - lt.since).total_seconds() == 3600
        assert sb.refresh().lifetime == lt
    with api.create_sandbox(lifetime=sandboxd.Lifetime(idle_seconds=600, on_idle="terminate")) as sb:
        lt = sb.lifetime
        assert (lt.idle_seconds, lt.on_idle, lt.resume_on_call, lt.ttl_seconds, lt.expires_at) == (
            600, "terminate", False, None, None,
        )  # fmt: skip
    with api.create_sandbox() as sb:
        assert sb.lifetime is None  # the suite's daemon has no default lifetime


@pytest.mark.parametrize(
    "bad",
    [
        sandboxd.Lifetime(ttl_seconds=0),
        sandboxd.Lifetime(ttl_seconds=31536001),
        sandboxd.Lifetime(),  # minProperties: 1
        sandboxd.Lifetime(on_idle="sleep"),  # type: ignore[arg-type]
    ],
)
def test_a_lifetime_the_schema_refuses(api: Any, bad: sandboxd.Lifetime) -> None:
    with pytest.raises(sandboxd.ValidationError) as e:
        api.create_sandbox(lifetime=bad)
    assert e.value.status == 400 and e.value.code == "invalid_request"


def test_an_unknown_sandboxd_key_is_refused(api: Any) -> None:
    with pytest.raises(sandboxd.ValidationError):
        api.create_sandbox(extensions={"sandboxd.no-such-key": {}})


def idle_pause(sb: Any) -> None:
    """Waits, on the sandbox's events (whose stream names no sandbox in its path, so it keeps none from
    idling), for the daemon to pause it for being idle."""
    reasons: List[Any] = []
    with sb.events() as stream:
        while True:
            ev = stream.next(timeout=60)
            assert ev is not None, "not paused within 60 s"
            if ev.generation != sb.generation or ev.type != "sandbox.state_changed":
                continue
            reasons.append(ev.data.get("reason"))
            if ev.new_state == "paused":
                break
    assert "idle" in reasons, reasons  # the transition into pausing says why
    assert sb.refresh().state == "paused"


def test_idle_pauses_and_a_call_resumes(api: Any) -> None:
    # A sandbox idle for 2 s is paused (reason idle); a command to it resumes it first.
    with api.create_sandbox(lifetime=sandboxd.Lifetime(idle_seconds=2)) as sb:
        lt = sb.lifetime
        assert (lt.idle_seconds, lt.on_idle, lt.resume_on_call) == (2, "pause", True)
        gen = sb.generation
        idle_pause(sb)
        r = sb.run(["echo", "awake"])
        assert r.text == "awake\n"
        assert sb.refresh().state == "ready" and sb.generation == gen


def test_idle_without_resume_on_call_stays_paused(api: Any) -> None:
    with api.create_sandbox(lifetime=sandboxd.Lifetime(idle_seconds=2, resume_on_call=False)) as sb:
        assert sb.lifetime.resume_on_call is False
        idle_pause(sb)
        with pytest.raises(sandboxd.InvalidState):
            sb.run(["true"])
        assert sb.resume().state == "ready"


def test_the_daemons_default_and_maximum(binary: Path) -> None:
    # A daemon started with an idle bound for sandboxes that ask for none, and a maximum.
    d = Daemon(binary, PROVIDER, "--default-idle", "2s", "--max-idle", "1h")
    try:
        with sandboxd.Client(d.url, d.token) as c:
            with c.create_sandbox() as sb:
                lt = sb.lifetime
                assert lt is not None and (lt.idle_seconds, lt.on_idle, lt.resume_on_call) == (2, "pause", True)
                idle_pause(sb)
                assert sb.run(["echo", "again"]).text == "again\n"
                assert sb.refresh().state == "ready"
            with pytest.raises(sandboxd.ValidationError) as e:
                c.create_sandbox(lifetime=sandboxd.Lifetime(idle_seconds=3601))
            assert "maximum" in str(e.value)
    finally:
        _stop(d)
