"""The group "stats and metrics" of ``api/extensions.yaml``: what a sandbox uses now
(``GET /v1/sandboxes/{sandboxId}/stats``, :meth:`sandboxd.Sandbox.stats`) and the daemon's metrics
(``GET /metrics``, :meth:`sandboxd.Client.metrics`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Mapping, Optional

from .._transport import Request, Retry, path
from ..errors import UnexpectedResponse
from ..types import _obj, _opt, _req, _time, _wire

__all__ = ["SandboxStats"]


def _seconds(d: Mapping[str, Any], key: str, what: str) -> Optional[float]:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UnexpectedResponse(f"{what}.{key}: want a number, got {type(v).__name__}")
    return float(v)


@dataclass(frozen=True)
class SandboxStats:
    """What a ready or paused sandbox uses now, read from its cgroups and its disk. A figure the provider
    cannot read is None. ``cpu_seconds`` is the CPU time of every process of the sandbox; memory counts
    the page cache; ``pids`` counts processes and threads; ``disk_bytes`` is what the sandbox's writable
    filesystem holds."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/StatsSandbox"

    sandbox_id: str = _wire("sandboxId")
    generation: int = _wire("generation")
    state: str = _wire("state")
    observed_at: datetime = _wire("observedAt")
    cpu_seconds: Optional[float] = _wire("cpuSeconds", default=None)
    memory_bytes: Optional[int] = _wire("memoryBytes", default=None)
    memory_peak_bytes: Optional[int] = _wire("memoryPeakBytes", default=None)
    memory_limit_bytes: Optional[int] = _wire("memoryLimitBytes", default=None)
    pids: Optional[int] = _wire("pids", default=None)
    pids_limit: Optional[int] = _wire("pidsLimit", default=None)
    disk_bytes: Optional[int] = _wire("diskBytes", default=None)
    disk_limit_bytes: Optional[int] = _wire("diskLimitBytes", default=None)
    network_rx_bytes: Optional[int] = _wire("networkRxBytes", default=None)
    network_tx_bytes: Optional[int] = _wire("networkTxBytes", default=None)

    @classmethod
    def from_json(cls, v: Any) -> SandboxStats:
        w = "stats"
        d = _obj(v, w)
        return cls(
            sandbox_id=_req(d, "sandboxId", str, w),
            generation=_req(d, "generation", int, w),
            state=_req(d, "state", str, w),
            observed_at=_time(d, "observedAt", w),
            cpu_seconds=_seconds(d, "cpuSeconds", w),
            memory_bytes=_opt(d, "memoryBytes", int, w),
            memory_peak_bytes=_opt(d, "memoryPeakBytes", int, w),
            memory_limit_bytes=_opt(d, "memoryLimitBytes", int, w),
            pids=_opt(d, "pids", int, w),
            pids_limit=_opt(d, "pidsLimit", int, w),
            disk_bytes=_opt(d, "diskBytes", int, w),
            disk_limit_bytes=_opt(d, "diskLimitBytes", int, w),
            network_rx_bytes=_opt(d, "networkRxBytes", int, w),
            network_tx_bytes=_opt(d, "networkTxBytes", int, w),
        )


# --- requests ---


def get_sandbox_stats(sandbox_id: str) -> Request:
    return Request("getSandboxStats", "GET", path("v1", "sandboxes", sandbox_id, "stats"), retry=Retry.SERVER)


def get_metrics() -> Request:
    return Request("getMetrics", "GET", "/metrics", headers=(("Accept", "text/plain"),), retry=Retry.SERVER, text=True)
