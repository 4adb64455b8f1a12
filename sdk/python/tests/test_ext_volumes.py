"""The group "volumes" of api/extensions.yaml, with both clients against a real daemon: on host the 422
of a capability it lacks; on oci a volume's files outlive the sandboxes that write them."""

from __future__ import annotations

import secrets
from typing import Any, Callable, List

import pytest

import sandboxd
from conftest import PROVIDER
from sandboxd.extensions import VolumeMount


def _name() -> str:
    return "py-" + secrets.token_hex(6)


def _unsupported(api: Any) -> None:
    # The host provider has no persistentVolume: every call, and a create that mounts one, is a 422.
    name = _name()
    calls: List[Callable[[], Any]] = [
        lambda: api.create_volume(name, 16),
        lambda: api.list_volumes(),
        lambda: api.get_volume(name),
        lambda: api.delete_volume(name),
        lambda: api.create_sandbox(volumes=[VolumeMount(name, "/data")], wait=False),
    ]
    for call in calls:
        with pytest.raises(sandboxd.UnsupportedCapability) as e:
            call()
        assert e.value.status == 422 and e.value.code == "unsupported_capability"
    with pytest.raises(sandboxd.UnsupportedCapability):  # the same through request()
        api.request("POST", "/v1/volumes", body={"name": name, "sizeMiB": 16})


def test_volumes(api: Any) -> None:
    if PROVIDER == "host":
        _unsupported(api)
        return
    name = _name()
    vol = api.create_volume(name, 16)
    assert isinstance(vol, sandboxd.Volume)
    assert (vol.name, vol.size_mib, vol.shared, vol.attached_to) == (name, 16, False, ())
    assert vol.created_at.utcoffset() is not None
    assert name in [v.name for v in api.list_volumes()]
    with pytest.raises(sandboxd.InvalidState):  # the name is taken
        api.create_volume(name, 16)

    data = [VolumeMount(name, "/data")]
    first = api.create_sandbox(volumes=data)
    assert first.spec.extensions["sandboxd.volumes"] == [{"name": name, "mountPath": "/data"}]
    first.run(["sh", "-c", "echo kept > /data/note"], check=True)
    assert api.get_volume(name).attached_to == (first.id,)

    # One writer: a second sandbox writing the volume fails with volume_in_use.
    with pytest.raises(sandboxd.SandboxFailed) as e:
        api.create_sandbox(volumes=data)
    failed = e.value
    assert failed.failure is not None and failed.failure.code == "volume_in_use"
    api.get_sandbox(failed.sandbox.id).terminate()
    # A reader may mount it beside the writer.
    with api.create_sandbox(volumes=[VolumeMount(name, "/mnt/ro", read_only=True)]) as reader:
        assert reader.run(["cat", "/mnt/ro/note"], check=True).text == "kept\n"
        assert reader.run(["sh", "-c", "echo x > /mnt/ro/other"]).exit_code != 0

    with pytest.raises(sandboxd.InvalidState) as conflict:  # mounted by a live sandbox
        api.delete_volume(name)
    assert conflict.value.status == 409
    first.terminate()
    assert api.get_volume(name).attached_to == ()

    with api.create_sandbox(volumes=data) as second:
        assert second.run(["cat", "/data/note"], check=True).text == "kept\n"
    api.delete_volume(name)
    with pytest.raises(sandboxd.NotFound):
        api.get_volume(name)
    with pytest.raises(sandboxd.NotFound):
        api.delete_volume(name)

    # A volume that does not exist is refused at create.
    with pytest.raises(sandboxd.ValidationError) as bad:
        api.create_sandbox(volumes=[VolumeMount(_name(), "/data")], wait=False)
    assert bad.value.status == 400 and bad.value.code == "invalid_request"
