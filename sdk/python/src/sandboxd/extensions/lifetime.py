"""``spec.extensions["sandboxd.lifetime"]``: how long a sandbox lives (``api/extensions.yaml``,
``components.schemas.SpecExtensions``, every provider).

A spec asks for a :class:`Lifetime`; what holds for the generation, with the daemon's defaults and
maxima applied and the deadline as a time, is recorded in ``providerExtensions["sandboxd.lifetime"]``
and read back as a :class:`RecordedLifetime` (:attr:`sandboxd.Sandbox.lifetime`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, Mapping, Optional

from ..types import JSONObject, _obj, _opt, _req, _time, _wire, parse_time

__all__ = ["LIFETIME_KEY", "Lifetime", "OnIdle", "RecordedLifetime"]

LIFETIME_KEY = "sandboxd.lifetime"
"""The spec.extensions and providerExtensions key of a sandbox's lifetime."""

OnIdle = Literal["pause", "terminate"]
"""What an idle sandbox undergoes."""


@dataclass(frozen=True)
class Lifetime:
    """The lifetime a spec asks for; what it leaves out the daemon's defaults fill in, and more than
    the daemon's maximum is refused (ValidationError).

    - ``ttl_seconds``: the sandbox is terminated that long after its create or recreate (a
      ``sandbox.state_changed`` event with reason ``ttl_expired``).
    - ``idle_seconds``: once no API call has named the sandbox, and no request of it has been open (a
      stream included), for that long, it is paused or terminated (reason ``idle``).
    - ``on_idle``: ``"pause"`` (the default where the provider can pause) or ``"terminate"``.
    - ``resume_on_call``: a command or file call to a sandbox paused that way resumes it first (the
      default with ``on_idle="pause"``).
    """

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/SpecExtensions/properties/sandboxd.lifetime"

    ttl_seconds: Optional[int] = _wire("ttlSeconds", default=None)
    idle_seconds: Optional[int] = _wire("idleSeconds", default=None)
    on_idle: Optional[OnIdle] = _wire("onIdle", default=None)
    resume_on_call: Optional[bool] = _wire("resumeOnCall", default=None)

    @classmethod
    def from_json(cls, v: Any) -> Lifetime:
        d = _obj(v, "lifetime")
        return cls(
            ttl_seconds=_opt(d, "ttlSeconds", int, "lifetime"),
            idle_seconds=_opt(d, "idleSeconds", int, "lifetime"),
            on_idle=_opt(d, "onIdle", str, "lifetime"),
            resume_on_call=_opt(d, "resumeOnCall", bool, "lifetime"),
        )

    def to_json(self) -> JSONObject:
        out: JSONObject = {}
        if self.ttl_seconds is not None:
            out["ttlSeconds"] = self.ttl_seconds
        if self.idle_seconds is not None:
            out["idleSeconds"] = self.idle_seconds
        if self.on_idle is not None:
            out["onIdle"] = self.on_idle
        if self.resume_on_call is not None:
            out["resumeOnCall"] = self.resume_on_call
        return out


@dataclass(frozen=True)
class RecordedLifetime:
    """The lifetime that holds for a sandbox's generation (``providerExtensions["sandboxd.lifetime"]``):
    ``since`` is when the generation was recorded, the start of its lifetime; ``expires_at`` is
    ``since`` plus ``ttl_seconds``. A figure the generation has none of is None; ``resume_on_call`` is
    False unless an idle pause is resumed by a call."""

    since: datetime = _wire("since")
    ttl_seconds: Optional[int] = _wire("ttlSeconds", default=None)
    expires_at: Optional[datetime] = _wire("expiresAt", default=None)
    idle_seconds: Optional[int] = _wire("idleSeconds", default=None)
    on_idle: Optional[OnIdle] = _wire("onIdle", default=None)
    resume_on_call: bool = _wire("resumeOnCall", default=False)

    @classmethod
    def from_json(cls, v: Any) -> RecordedLifetime:
        w = "providerExtensions.sandboxd.lifetime"
        d = _obj(v, w)
        exp = _opt(d, "expiresAt", str, w)
        return cls(
            since=_time(d, "since", w),
            ttl_seconds=_opt(d, "ttlSeconds", int, w),
            expires_at=None if exp is None else parse_time(exp),
            idle_seconds=_opt(d, "idleSeconds", int, w),
            on_idle=_opt(d, "onIdle", str, w),
            resume_on_call=bool(_opt(d, "resumeOnCall", bool, w)),
        )

    @classmethod
    def of(cls, provider_extensions: Optional[Mapping[str, Any]]) -> Optional[RecordedLifetime]:
        """The lifetime recorded in a sandbox's providerExtensions; None when it has none."""
        if not provider_extensions or LIFETIME_KEY not in provider_extensions:
            return None
        return cls.from_json(provider_extensions[LIFETIME_KEY])

