"""The snapshots and templates of api/extensions.yaml, with both clients against a real daemon: the
host provider takes no snapshots, so every call is a 422 UnsupportedCapability; on oci the answers to
what a test can do without a registry (the lists, ids and names the store lacks, a sandbox on the shared
root, which has no filesystem of its own to snapshot)."""

from __future__ import annotations

from typing import Any, Callable, List

import pytest

import sandboxd
from conftest import PROVIDER

DIGEST = "sha256:" + "0" * 64


def test_snapshots(api: Any) -> None:
    if PROVIDER == "host":
        calls: List[Callable[[], Any]] = [
            api.list_snapshots,
            lambda: api.get_snapshot(DIGEST),
            lambda: api.delete_snapshot(DIGEST),
            lambda: api.fork(DIGEST, 2),
            api.list_templates,
            lambda: api.get_template("none"),
            lambda: api.delete_template("none@1"),
            lambda: api.build_template("none", "localhost:1/none:latest", [{"run": ["true"]}]),
        ]
        sb = api.create_sandbox()
        calls.append(lambda: api.snapshot(sb.id, sb.generation, name="none"))
        for call in calls:
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                call()
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
        sb.terminate()
        return
    snaps = api.list_snapshots()
    assert all(isinstance(s, sandboxd.SnapshotInfo) for s in snaps)
    for s in snaps:
        assert api.get_snapshot(s.id).digest == s.digest
    templates = api.list_templates()
    assert all(isinstance(t, sandboxd.TemplateInfo) for t in templates)
    with pytest.raises(sandboxd.NotFound):
        api.get_snapshot(DIGEST)
    with pytest.raises(sandboxd.NotFound):
        api.delete_snapshot(DIGEST)
    with pytest.raises(sandboxd.NotFound):
        api.fork(DIGEST, 2)
    with pytest.raises(sandboxd.ValidationError):
        api.fork(DIGEST, 33)
    with pytest.raises(sandboxd.NotFound):
        api.get_template("no-such-template")
    with pytest.raises(sandboxd.ValidationError):
        api.get_template("Not A Name")
    with pytest.raises(sandboxd.NotFound):
        api.delete_template("no-such-template@3")
    with pytest.raises(sandboxd.SandboxdError):  # a registry on a port where nothing listens
        api.build_template("unbuilt", "127.0.0.1:1/none:latest", [{"file": {"path": "/a", "content": "x"}}])
    sb = api.create_sandbox()
    try:
        with pytest.raises(sandboxd.InvalidState):  # on the shared root
            api.snapshot(sb.id, sb.generation)
    finally:
        sb.terminate()
