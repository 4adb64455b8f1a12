"""The groups "images and templates" (``/v1/templates``) and "snapshots" of ``api/extensions.yaml``: a
sandbox's filesystem captured as a snapshot (``POST /v1/sandboxes/{id}/snapshots``), sandboxes forked
from one, and templates, names whose versions are snapshots. A create's ``template=`` (``spec.template``)
runs a template (``name``, ``name@version``, ``name@sha256:...``) or a snapshot (its id). A provider
without them (``host``) answers each call with UnsupportedCapability.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from .._transport import Request, Retry, json_body, path
from ..errors import UnexpectedResponse
from ..types import _obj, _req, _time, _wire

__all__ = ["ForkResult", "SnapshotInfo", "SnapshotList", "TemplateInfo", "TemplateList", "TemplateVersion"]


def _strings(v: List[Any], what: str) -> Tuple[str, ...]:
    if not all(isinstance(s, str) for s in v):
        raise UnexpectedResponse(f"{what}: want strings")
    return tuple(v)


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot: its ``id`` (its digest, which ``template=`` may name), the sandbox and generation it
    was taken of, the image it ran on (``base_digest``), its layers, the sandboxes that run on it now
    (``users``) and the template versions it is (``name@version``)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/SnapshotInfo"

    id: str = _wire("id")
    digest: str = _wire("digest")
    sandbox_id: str = _wire("sandboxId")
    generation: int = _wire("generation")
    base_digest: str = _wire("baseDigest")
    created_at: datetime = _wire("createdAt")
    layers: int = _wire("layers")
    users: int = _wire("users")
    templates: Tuple[str, ...] = _wire("templates")

    @classmethod
    def from_json(cls, v: Any) -> SnapshotInfo:
        w = "snapshot"
        d = _obj(v, w)
        return cls(
            id=_req(d, "id", str, w),
            digest=_req(d, "digest", str, w),
            sandbox_id=_req(d, "sandboxId", str, w),
            generation=_req(d, "generation", int, w),
            base_digest=_req(d, "baseDigest", str, w),
            created_at=_time(d, "createdAt", w),
            layers=_req(d, "layers", int, w),
            users=_req(d, "users", int, w),
            templates=_strings(_req(d, "templates", list, w), w + ".templates"),
        )


@dataclass(frozen=True)
class SnapshotList:
    """The answer of a list: every snapshot, oldest first."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/SnapshotList"

    snapshots: Tuple[SnapshotInfo, ...] = _wire("snapshots")

    @classmethod
    def from_json(cls, v: Any) -> SnapshotList:
        d = _obj(v, "snapshot list")
        return cls(snapshots=tuple(SnapshotInfo.from_json(s) for s in _req(d, "snapshots", list, "snapshot list")))


@dataclass(frozen=True)
class ForkResult:
    """The answer of a fork: the ids of the sandboxes made, in order."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/ForkResult"

    sandbox_ids: Tuple[str, ...] = _wire("sandboxIds")

    @classmethod
    def from_json(cls, v: Any) -> ForkResult:
        d = _obj(v, "fork")
        return cls(sandbox_ids=_strings(_req(d, "sandboxIds", list, "fork"), "fork.sandboxIds"))


@dataclass(frozen=True)
class TemplateVersion:
    """One version of a template: its number, its snapshot's digest, when it was made, and the
    sandboxes that run on it now."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/TemplateVersion"

    version: int = _wire("version")
    digest: str = _wire("digest")
    created_at: datetime = _wire("createdAt")
    users: int = _wire("users")

    @classmethod
    def from_json(cls, v: Any) -> TemplateVersion:
        w = "template version"
        d = _obj(v, w)
        return cls(
            version=_req(d, "version", int, w),
            digest=_req(d, "digest", str, w),
            created_at=_time(d, "createdAt", w),
            users=_req(d, "users", int, w),
        )


@dataclass(frozen=True)
class TemplateInfo:
    """A template: its name and its versions, oldest first (only the one named, for ``name@version``)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/TemplateInfo"

    name: str = _wire("name")
    versions: Tuple[TemplateVersion, ...] = _wire("versions")

    @classmethod
    def from_json(cls, v: Any) -> TemplateInfo:
        d = _obj(v, "template")
        return cls(
            name=_req(d, "name", str, "template"),
            versions=tuple(TemplateVersion.from_json(x) for x in _req(d, "versions", list, "template")),
        )


@dataclass(frozen=True)
class TemplateList:
    """The answer of a list: every template, by name."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/TemplateList"

    templates: Tuple[TemplateInfo, ...] = _wire("templates")

    @classmethod
    def from_json(cls, v: Any) -> TemplateList:
        d = _obj(v, "template list")
        return cls(templates=tuple(TemplateInfo.from_json(t) for t in _req(d, "templates", list, "template list")))


def snapshot_list(doc: Any) -> List[SnapshotInfo]:
    return list(SnapshotList.from_json(doc).snapshots)


def template_list(doc: Any) -> List[TemplateInfo]:
    return list(TemplateList.from_json(doc).templates)


def fork_ids(doc: Any) -> List[str]:
    return list(ForkResult.from_json(doc).sandbox_ids)


# --- requests ---


def snapshot_sandbox(sandbox_id: str, generation: int, name: Optional[str], http_timeout: Optional[float]) -> Request:
    body: Dict[str, Any] = {"expectedGeneration": generation}
    if name is not None:
        body["name"] = name
    # Not repeated after a lost answer: a repeat would make a second snapshot.
    return Request(
        "snapshotSandbox", "POST", path("v1", "sandboxes", sandbox_id, "snapshots"), body=json_body(body),
        timeout=http_timeout,
    )


def list_snapshots() -> Request:
    return Request("listSnapshots", "GET", "/v1/snapshots", retry=Retry.SERVER)


def get_snapshot(snapshot_id: str) -> Request:
    return Request("getSnapshot", "GET", path("v1", "snapshots", snapshot_id), retry=Retry.SERVER)


def delete_snapshot(snapshot_id: str) -> Request:
    return Request("deleteSnapshot", "DELETE", path("v1", "snapshots", snapshot_id), retry=Retry.UNSENT, empty=True)


def fork_snapshot(
    snapshot_id: str, count: int, client_request_id: Optional[str], spec: Optional[Mapping[str, Any]],
    http_timeout: Optional[float],
) -> Request:
    body: Dict[str, Any] = {"count": count}
    if client_request_id is not None:
        body["clientRequestId"] = client_request_id
    if spec:
        body["spec"] = dict(spec)
    # With a clientRequestId a repeat makes no more sandboxes: safe to send again.
    return Request(
        "forkSnapshot", "POST", path("v1", "snapshots", snapshot_id, "fork"), body=json_body(body),
        retry=Retry.LOST if client_request_id is not None else Retry.UNSENT, timeout=http_timeout,
    )


def list_templates() -> Request:
    return Request("listTemplates", "GET", "/v1/templates", retry=Retry.SERVER)


def get_template(ref: str) -> Request:
    return Request("getTemplate", "GET", path("v1", "templates", ref), retry=Retry.SERVER)


def delete_template(ref: str) -> Request:
    return Request("deleteTemplate", "DELETE", path("v1", "templates", ref), retry=Retry.UNSENT, empty=True)


def build_template(
    name: str, base_image: str, steps: Sequence[Mapping[str, Any]], env: Optional[Sequence[str]],
    workdir: Optional[str], http_timeout: Optional[float],
) -> Request:
    """A build; each step is ``{"run": [argv...]}`` or ``{"file": {"path", "content" (bytes or str),
    "mode"?}}``."""
    wire: List[Dict[str, Any]] = []
    for st in steps:
        if "file" in st:
            f = dict(st["file"])
            c = f.get("content", b"")
            f["content"] = base64.b64encode(c.encode("utf-8") if isinstance(c, str) else bytes(c)).decode("ascii")
            wire.append({"file": f})
        else:
            wire.append({"run": list(st["run"])})
    body: Dict[str, Any] = {"name": name, "baseImage": base_image, "steps": wire}
    if env is not None:
        body["env"] = list(env)
    if workdir is not None:
        body["workdir"] = workdir
    return Request("buildTemplate", "POST", "/v1/templates", body=json_body(body), timeout=http_timeout)
