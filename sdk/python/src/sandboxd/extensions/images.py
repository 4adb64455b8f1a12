"""The group "images and templates" of ``api/extensions.yaml``: the images a provider holds
(``/v1/images``), pulled from a registry, imported from an OCI layout or a tarball on the daemon's host,
inspected by digest, removed and pruned. A sandbox runs on one with the contract's own field, a create's
``image=`` (``spec.image``). A provider without images (``host``) answers each call with
UnsupportedCapability.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, List, Optional, Tuple

from .._sse import Parser, SSEError
from .._transport import RESPONSE_HOOKS, Backoff, Request, Retry, json_body, observe, path, should_retry
from ..errors import ConnectionFailed, SandboxdError, UnexpectedResponse, error_from_response
from ..types import _obj, _opt, _req, _wire

__all__ = ["ImageInfo", "ImageList", "ImageProgress", "ImagePruneResult", "ImageRemoved", "ProgressCallback"]


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
class ImageProgress:
    """How far a pull or an import has come: ``layers`` of ``total_layers`` in the store (one the store
    held already counts as fetched), ``bytes`` of ``total_bytes`` compressed bytes fetched
    (``total_bytes`` is 0 where bytes are not counted: a docker-save tarball's layers)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ImageProgress"

    layers: int = _wire("layers")
    total_layers: int = _wire("totalLayers")
    bytes: int = _wire("bytes")
    total_bytes: int = _wire("totalBytes")

    @classmethod
    def from_json(cls, v: Any) -> ImageProgress:
        w = "image progress"
        d = _obj(v, w)
        return cls(
            layers=_req(d, "layers", int, w),
            total_layers=_req(d, "totalLayers", int, w),
            bytes=_req(d, "bytes", int, w),
            total_bytes=_req(d, "totalBytes", int, w),
        )


ProgressCallback = Callable[[ImageProgress], None]
"""What a pull or an import with ``progress=`` calls with each report."""


class ImageStream:
    """What the bytes of a pull's or an import's stream (``Accept: text/event-stream``) come to: each
    "progress" event an ImageProgress, then the "done" event's ImageInfo in ``image``, or the "error"
    event's ErrorResponse raised as the class of its code. The synchronous and asynchronous clients
    feed it what they read."""

    def __init__(self, operation: str, status: int = 200) -> None:
        self.operation = operation
        self.status = status
        self.image: Optional[ImageInfo] = None
        self._parser = Parser()

    def feed(self, chunk: bytes) -> List[ImageProgress]:
        """The reports chunk completes. Raises the error an "error" event carries, ConnectionFailed
        when the stream ends (b"") before its last event, UnexpectedResponse for what is no such stream."""
        if self.image is not None:
            return []
        if not chunk:
            raise ConnectionFailed(f"{self.operation}: the stream ended without its answer")
        try:
            msgs = self._parser.feed(chunk)
        except SSEError as e:
            raise UnexpectedResponse(f"{self.operation}: {e}") from None
        out: List[ImageProgress] = []
        for m in msgs:
            if m.event not in ("progress", "done", "error"):
                continue  # an event this client does not know
            try:
                doc = json.loads(m.data)
                if m.event == "progress":
                    p = ImageProgress.from_json(doc)
                elif m.event == "done":
                    image = ImageInfo.from_json(doc)
            except (ValueError, SandboxdError) as e:
                raise UnexpectedResponse(f"{self.operation}: the data of a {m.event!r} event: {e}") from None
            if m.event == "error":
                err = error_from_response(self.status, m.data.encode("utf-8"))
                if isinstance(err, UnexpectedResponse):
                    raise UnexpectedResponse(f"{self.operation}: an error event that is not an ErrorResponse") from None
                if RESPONSE_HOOKS:
                    observe("imageStreamError", self.status, doc)
                raise err
            if RESPONSE_HOOKS:
                observe(self.operation if m.event == "done" else "imageProgress", self.status, doc)
            if m.event == "done":
                self.image = image
                return out
            out.append(p)
        return out

    @staticmethod
    def retry(req: Request, attempt: int, backoff: Backoff, e: BaseException, deadline: float, timeout: float) -> None:
        """Returns when the failed attempt of a streamed pull or import may be made again, else raises
        what the caller gets: the daemon's error, the timeout, or the stream's loss."""
        if time.monotonic() >= deadline:
            raise ConnectionFailed(f"{req.operation}: not done within {timeout:g}s") from None
        if not should_retry(req, attempt, backoff, e):
            if isinstance(e, SandboxdError):
                raise e
            raise ImageStream(req.operation).lost(e) from None

    def lost(self, e: BaseException) -> ConnectionFailed:
        """The error of a stream whose connection broke or stayed silent past its read timeout."""
        why = e.__cause__ or "nothing, not even a heartbeat, within the read timeout"
        return ConnectionFailed(f"{self.operation}: the stream broke: {why}")


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


STREAM = (("Accept", "text/event-stream"),)


def pull_image(reference: str, http_timeout: Optional[float], stream: bool = False) -> Request:
    # A pull names the image by its reference whatever came before: safe to repeat. What a broken one
    # had fetched stays in the store for the repeat.
    return Request(
        "pullImage", "POST", "/v1/images/pull", body=json_body({"reference": reference}), retry=Retry.LOST,
        timeout=http_timeout, headers=STREAM if stream else (),
    )


def import_image(host_path: str, name: str, http_timeout: Optional[float], stream: bool = False) -> Request:
    return Request(
        "importImage",
        "POST",
        "/v1/images/import",
        body=json_body({"path": host_path, "name": name}),
        retry=Retry.LOST,
        timeout=http_timeout,
        headers=STREAM if stream else (),
    )


def get_image(digest: str) -> Request:
    return Request("getImage", "GET", path("v1", "images", "digest", digest), retry=Retry.SERVER)


def remove_image(reference: str) -> Request:
    # Not repeated after a lost answer: a repeat would meet the image gone (404).
    return Request("removeImage", "POST", "/v1/images/remove", body=json_body({"reference": reference}))


def prune_images() -> Request:
    return Request("pruneImages", "POST", "/v1/images/prune", retry=Retry.LOST)
