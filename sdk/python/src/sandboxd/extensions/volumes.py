"""The group "volumes" of ``api/extensions.yaml``: persistent volumes (``/v1/volumes``, capability
``persistentVolume``) and the ``spec.extensions["sandboxd.volumes"]`` mounts of a sandbox.

A volume outlives the sandboxes that mount it: :meth:`sandboxd.Client.create_volume` makes one, a
create's ``volumes=[VolumeMount("cache", "/data")]`` mounts it, and what one sandbox wrote there the
next one reads. A volume that is not ``shared`` has one writer at a time (a second fails with
``failure.code`` ``volume_in_use``); any number may mount it ``read_only``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, List, Optional, Sequence, Tuple

from .._transport import Request, Retry, json_body, path
from ..errors import UnexpectedResponse
from ..types import JSONObject, _obj, _opt, _req, _time, _wire

__all__ = ["VOLUMES_KEY", "Volume", "VolumeMount"]

VOLUMES_KEY = "sandboxd.volumes"
"""The spec.extensions key of a sandbox's volume mounts."""


@dataclass(frozen=True)
class VolumeMount:
    """One volume a sandbox mounts: the volume ``name`` at ``mount_path`` (on oci at or below
    /workspace, /mnt, /data, /srv or /opt), writable unless ``read_only``."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/SpecExtensions/properties/sandboxd.volumes/items"

    name: str = _wire("name")
    mount_path: str = _wire("mountPath")
    read_only: Optional[bool] = _wire("readOnly", default=None)

    @classmethod
    def from_json(cls, v: Any) -> VolumeMount:
        w = "sandboxd.volumes[]"
        d = _obj(v, w)
        return cls(
            name=_req(d, "name", str, w),
            mount_path=_req(d, "mountPath", str, w),
            read_only=_opt(d, "readOnly", bool, w),
        )

    def to_json(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only is not None:
            out["readOnly"] = self.read_only
        return out


@dataclass(frozen=True)
class Volume:
    """A persistent volume: its size, whether several sandboxes may write it at once, and the
    sandboxes, not terminated, that mount it (``attached_to``). ``used_bytes`` is what its image holds
    on the host, when the provider says."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/Volume"

    name: str = _wire("name")
    size_mib: int = _wire("sizeMiB")
    shared: bool = _wire("shared")
    created_at: datetime = _wire("createdAt")
    attached_to: Tuple[str, ...] = _wire("attachedTo")
    used_bytes: Optional[int] = _wire("usedBytes", default=None)

    @classmethod
    def from_json(cls, v: Any) -> Volume:
        w = "volume"
        d = _obj(v, w)
        att = _req(d, "attachedTo", list, w)
        if not all(isinstance(s, str) for s in att):
            raise UnexpectedResponse(f"{w}.attachedTo: want sandbox ids")
        return cls(
            name=_req(d, "name", str, w),
            size_mib=_req(d, "sizeMiB", int, w),
            shared=_req(d, "shared", bool, w),
            created_at=_time(d, "createdAt", w),
            attached_to=tuple(att),
            used_bytes=_opt(d, "usedBytes", int, w),
        )


def volumes_json(mounts: Sequence[VolumeMount]) -> List[JSONObject]:
    return [m.to_json() for m in mounts]


def volume_list(doc: Any) -> List[Volume]:
    items = doc.get("volumes") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise UnexpectedResponse("listVolumes: want {'volumes': [...]}")
    return [Volume.from_json(v) for v in items]


# --- requests ---


def list_volumes() -> Request:
    return Request("listVolumes", "GET", "/v1/volumes", retry=Retry.SERVER)


def create_volume(name: str, size_mib: int, shared: Optional[bool]) -> Request:
    # Not repeated after a lost answer: a repeat would meet the volume the first one made (409).
    body: JSONObject = {"name": name, "sizeMiB": size_mib}
    if shared is not None:
        body["shared"] = shared
    return Request("createVolume", "POST", "/v1/volumes", body=json_body(body))


def get_volume(name: str) -> Request:
    return Request("getVolume", "GET", path("v1", "volumes", name), retry=Retry.SERVER)


def delete_volume(name: str) -> Request:
    return Request("deleteVolume", "DELETE", path("v1", "volumes", name), retry=Retry.UNSENT, empty=True)
