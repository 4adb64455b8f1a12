"""The group "memory snapshots" of ``api/extensions.yaml``: a checkpoint of a sandbox's memory,
processes and /workspace (``POST /v1/sandboxes/{sandboxId}/actions/checkpoint``,
:meth:`sandboxd.Sandbox.checkpoint`), the list of those taken
(``GET /v1/sandboxes/{sandboxId}/checkpoints``, :meth:`sandboxd.Sandbox.checkpoints`), and
``spec.extensions["sandboxd.checkpoint"]``, a sandbox started from one (:func:`from_checkpoint`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Dict, List

from .._transport import Request, Retry, json_body, path
from ..errors import UnexpectedResponse
from ..types import _obj, _req, _time, _wire

__all__ = ["CHECKPOINT_KEY", "Checkpoint", "from_checkpoint"]

CHECKPOINT_KEY = "sandboxd.checkpoint"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint of sandbox ``sandbox_id`` taken of its generation ``generation``; ``size_bytes``
    is its memory image's size."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/Checkpoint"

    id: str = _wire("id")
    sandbox_id: str = _wire("sandboxId")
    generation: int = _wire("generation")
    created_at: datetime = _wire("createdAt")
    left_running: bool = _wire("leftRunning")
    size_bytes: int = _wire("sizeBytes")

    @classmethod
    def from_json(cls, v: Any) -> Checkpoint:
        w = "checkpoint"
        d = _obj(v, w)
        return cls(
            id=_req(d, "id", str, w),
            sandbox_id=_req(d, "sandboxId", str, w),
            generation=_req(d, "generation", int, w),
            created_at=_time(d, "createdAt", w),
            left_running=_req(d, "leftRunning", bool, w),
            size_bytes=_req(d, "sizeBytes", int, w),
        )


def checkpoint_list(v: Any) -> List[Checkpoint]:
    d = _obj(v, "checkpoints")
    items = d.get("checkpoints")
    if not isinstance(items, list):
        raise UnexpectedResponse("checkpoints.checkpoints: want a list")
    return [Checkpoint.from_json(c) for c in items]


def from_checkpoint(sandbox_id: str, checkpoint: str) -> Dict[str, Any]:
    """The ``extensions`` of a create that starts the sandbox from checkpoint ``checkpoint`` of
    sandbox ``sandbox_id`` (needs ``memorySnapshot``)."""
    return {CHECKPOINT_KEY: {"sandboxId": sandbox_id, "checkpoint": checkpoint}}


# --- requests ---


def checkpoint_sandbox(sandbox_id: str, generation: int, leave_running: bool) -> Request:
    # A second checkpoint after a lost answer would find the sandbox paused, or write another: not repeated.
    return Request(
        "checkpointSandbox",
        "POST",
        path("v1", "sandboxes", sandbox_id, "actions", "checkpoint"),
        body=json_body({"expectedGeneration": generation, "leaveRunning": leave_running}),
        retry=Retry.UNSENT,
    )


def list_checkpoints(sandbox_id: str) -> Request:
    return Request("listCheckpoints", "GET", path("v1", "sandboxes", sandbox_id, "checkpoints"), retry=Retry.SERVER)
