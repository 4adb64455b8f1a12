"""The group "images and templates" of ``api/extensions.yaml``: the images a provider holds
(``/v1/images``), pulled from a registry, imported from an OCI layout or a tarball on the daemon's host,
inspected by digest, removed and pruned. A sandbox runs on one with the contract's own field, a create's
``image=`` (``spec.image``). A provider without images (``host``) answers each call with
UnsupportedCapability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, List, Optional, Tuple

from .._transport import Request, Retry, json_body, path
from ..errors import UnexpectedResponse
from ..types import _obj, _opt, _req, _wire

__all__ = ["ImageInfo", "ImageList", "ImagePruneResult", "ImageRemoved"]


@dataclass(frozen=True)
class ImageInfo:
    """An image in the provider's store: its manifest ``digest``, the ``names`` it is known by, its
    number of layers, the sandboxes that run on it now (``users``), and its configuration's
    environment, working directory and user, where it has them."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ImageInfo"

    digest: str = _wire("digest")
    names: Tuple[str, ...] = _wire("names")
    layers: int = _wire("layers")
    users: int = _wire("users")
    env: Optional[Tuple[str, ...]] = _wire("env", default=None)
    working_dir: Optional[str] = _wire("workingDir", default=None)
    user: Optional[str] = _wire("user", default=None)

    @classmethod
    def from_json(cls, v: Any) -> ImageInfo:
        w = "image"
        d = _obj(v, w)
        names = _req(d, "names", list, w)
        env = _opt(d, "env", list, w)
        if not all(isinstance(s, str) for s in names + (env or [])):
            raise UnexpectedResponse(f"{w}: names and env want strings")
        return cls(
            digest=_req(d, "digest", str, w),
            names=tuple(names),
            layers=_req(d, "layers", int, w),
            users=_req(d, "users", int, w),
            env=tuple(env) if env is not None else None,
            working_dir=_opt(d, "workingDir", str, w),
            user=_opt(d, "user", str, w),
        )


@dataclass(frozen=True)
class ImageList:
    """The answer of a list: every image, by digest."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ImageList"

    images: Tuple[ImageInfo, ...] = _wire("images")

    @classmethod
    def from_json(cls, v: Any) -> ImageList:
        d = _obj(v, "image list")
        return cls(images=tuple(ImageInfo.from_json(i) for i in _req(d, "images", list, "image list")))


@dataclass(frozen=True)
class ImageRemoved:
    """The answer of a remove: the reference removed."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ImageRemoveRequest"

    reference: str = _wire("reference")

    @classmethod
    def from_json(cls, v: Any) -> ImageRemoved:
        return cls(reference=_req(_obj(v, "removed image"), "reference", str, "removed image"))


@dataclass(frozen=True)
class ImagePruneResult:
    """The answer of a prune: how many layers it removed."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ImagePruneResult"

    layers_removed: int = _wire("layersRemoved")

    @classmethod
    def from_json(cls, v: Any) -> ImagePruneResult:
        return cls(layers_removed=_req(_obj(v, "prune"), "layersRemoved", int, "prune"))


def image_list(doc: Any) -> List[ImageInfo]:
    return list(ImageList.from_json(doc).images)


def removed_reference(doc: Any) -> str:
    return ImageRemoved.from_json(doc).reference


def layers_removed(doc: Any) -> int:
    return ImagePruneResult.from_json(doc).layers_removed


# --- requests ---


def list_images() -> Request:
    return Request("listImages", "GET", "/v1/images", retry=Retry.SERVER)


def pull_image(reference: str, http_timeout: Optional[float]) -> Request:
    # A pull names the image by its reference whatever came before: safe to repeat.
    return Request(
        "pullImage", "POST", "/v1/images/pull", body=json_body({"reference": reference}), retry=Retry.LOST,
        timeout=http_timeout,
    )


def import_image(host_path: str, name: str, http_timeout: Optional[float]) -> Request:
    return Request(
        "importImage",
        "POST",
        "/v1/images/import",
        body=json_body({"path": host_path, "name": name}),
        retry=Retry.LOST,
        timeout=http_timeout,
    )


def get_image(digest: str) -> Request:
    return Request("getImage", "GET", path("v1", "images", "digest", digest), retry=Retry.SERVER)


def remove_image(reference: str) -> Request:
    # Not repeated after a lost answer: a repeat would meet the image gone (404).
    return Request("removeImage", "POST", "/v1/images/remove", body=json_body({"reference": reference}))


def prune_images() -> Request:
    return Request("pruneImages", "POST", "/v1/images/prune", retry=Retry.LOST)
