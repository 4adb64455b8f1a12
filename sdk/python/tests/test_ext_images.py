"""The group "images and templates" of api/extensions.yaml, with both clients against a real daemon:
the host provider holds no images, so every call is a 422 UnsupportedCapability; on oci the store's
answers to what a test can do without a registry (the list, a pull from where nothing listens, a digest
it lacks, an import of a path that is not an image, a prune)."""

from __future__ import annotations

from typing import Any, Callable, List

import pytest

import sandboxd
from conftest import PROVIDER

DIGEST = "sha256:" + "0" * 64


def test_images(api: Any, tmp_path: Any) -> None:
    if PROVIDER == "host":
        calls: List[Callable[[], Any]] = [
            api.list_images,
            lambda: api.pull_image("localhost:1/none:latest"),
            lambda: api.import_image(str(tmp_path), "none:latest"),
            lambda: api.get_image(DIGEST),
            lambda: api.remove_image("none:latest"),
            api.prune_images,
        ]
        for call in calls:
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                call()
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
        return
    with pytest.raises(sandboxd.SandboxdError):  # a registry on a port where nothing listens
        api.pull_image("127.0.0.1:1/none:latest", timeout=60)
    images = api.list_images()
    assert all(isinstance(i, sandboxd.ImageInfo) and i.digest.startswith("sha256:") for i in images)
    with pytest.raises(sandboxd.NotFound):
        api.get_image(DIGEST)
    with pytest.raises(sandboxd.ValidationError):
        api.get_image("sha256:short")
    with pytest.raises(sandboxd.ValidationError):  # an empty directory is no OCI layout
        api.import_image(str(tmp_path), "none:latest")
    with pytest.raises(sandboxd.NotFound):
        api.remove_image("none:latest")
    assert api.prune_images() >= 0
    for i in images:
        assert api.get_image(i.digest).digest == i.digest
