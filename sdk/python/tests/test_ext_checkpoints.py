"""The group "memory snapshots" of api/extensions.yaml, with both clients against a real daemon."""

from __future__ import annotations

from typing import Any

import pytest

import sandboxd


def test_checkpoint(api: Any) -> None:
    with api.create_sandbox() as sb:
        if not api.runtime().provider.capabilities.memory_snapshot:
            # No memory snapshots (host, oci on runc): the 422 of an unsupported capability, both ways in.
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                sb.checkpoint()
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
            with pytest.raises(sandboxd.UnsupportedCapability):
                sb.checkpoints()
            with pytest.raises(sandboxd.UnsupportedCapability):
                api.create_sandbox(extensions=sandboxd.extensions.from_checkpoint(sb.id, "ckpt_0123456789abcdef"))
            return
        c = sb.checkpoint()
        assert isinstance(c, sandboxd.Checkpoint) and c.sandbox_id == sb.id and not c.left_running
        assert sb.state == "paused"
        assert [x.id for x in sb.checkpoints()] == [c.id]
        sb.resume()
        with api.create_sandbox(extensions=sandboxd.extensions.from_checkpoint(sb.id, c.id)) as fork:
            assert fork.state == "ready"
