"""The group "network" of ``api/extensions.yaml``: a sandbox's egress policy
(``spec.extensions["sandboxd.network"]``, capability ``networkPolicy``), the policy now with what it
counted (``GET|PUT /v1/sandboxes/{sandboxId}/network``) and the stream of its denials
(``GET /v1/sandboxes/{sandboxId}/network/denials``).

A create's ``network=NetworkPolicy(egress="deny", allow=("203.0.113.0/24",))`` sets the policy;
:meth:`sandboxd.Sandbox.network` reads it back, :meth:`sandboxd.Sandbox.set_network` replaces it for
every new connection (fenced by the sandbox's generation) and :meth:`sandboxd.Sandbox.network_denials`
follows what it refuses, for a learn mode that proposes an allow list. Deny beats allow; whatever the
policy says, a sandbox never reaches another one, and reaches the host or a link-local address only
through an allow rule naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, List, Literal, Mapping, Optional, Sequence, Tuple

from .._sse import Parser, SSEError
from .._transport import RESPONSE_HOOKS, Lost, Request, Retry, json_body, observe, path
from ..errors import ConnectionFailed, SandboxdError, UnexpectedResponse
from ..types import JSONObject, _obj, _opt, _req, _time, _wire

__all__ = ["NETWORK_KEY", "Egress", "NetworkDenial", "NetworkDenialsEnd", "NetworkPolicy", "NetworkStatus"]

NETWORK_KEY = "sandboxd.network"
"""The spec.extensions key of a sandbox's egress policy."""

Egress = Literal["deny", "allow"]
"""What a destination no rule names gets."""


def _strs(d: Mapping[str, Any], key: str, what: str) -> Optional[Tuple[str, ...]]:
    v = _opt(d, key, list, what)
    if v is None:
        return None
    if not all(isinstance(s, str) for s in v):
        raise UnexpectedResponse(f"{what}.{key}: want strings")
    return tuple(v)


@dataclass(frozen=True)
class NetworkPolicy:
    """An egress policy: ``egress`` is what a destination no rule names gets (None: the daemon's
    default, deny unless it is told otherwise); ``allow`` and ``deny`` are CIDRs in canonical form
    (``"203.0.113.0/24"``, ``"2001:db8::/32"``: an IPv6 allow rule is 422 where sandboxes have no
    IPv6), addresses, or names (``"pypi.org"``, ``"*.example.com"``, where the provider resolves names
    for its sandboxes), at most 256 each. Deny beats allow."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/SpecExtensions/properties/sandboxd.network"

    egress: Optional[Egress] = _wire("egress", default=None)
    allow: Optional[Sequence[str]] = _wire("allow", default=None)
    deny: Optional[Sequence[str]] = _wire("deny", default=None)

    @classmethod
    def from_json(cls, v: Any) -> NetworkPolicy:
        w = "network policy"
        d = _obj(v, w)
        return cls(egress=_opt(d, "egress", str, w), allow=_strs(d, "allow", w), deny=_strs(d, "deny", w))

    def to_json(self) -> JSONObject:
        out: JSONObject = {}
        if self.egress is not None:
            out["egress"] = self.egress
        if self.allow is not None:
            out["allow"] = list(self.allow)
        if self.deny is not None:
            out["deny"] = list(self.deny)
        return out


@dataclass(frozen=True)
class NetworkDenial:
    """A destination the policy refused, last at ``time``: ``destination`` is the IPv4 address (None
    for a refused name), ``name`` the name it was resolved from, or the name refused."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/NetworkDenial"

    time: datetime = _wire("time")
    destination: Optional[str] = _wire("destination", default=None)
    name: Optional[str] = _wire("name", default=None)

    @classmethod
    def from_json(cls, v: Any) -> NetworkDenial:
        w = "network denial"
        d = _obj(v, w)
        return cls(time=_time(d, "time", w), destination=_opt(d, "destination", str, w), name=_opt(d, "name", str, w))


@dataclass(frozen=True)
class NetworkDenialsEnd:
    """Why a stream of denials ended: ``reason`` is the error code the sandbox's network now answers
    (``invalid_state`` once terminated, ``generation_conflict`` once recreated, ``not_found``, ...)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/NetworkDenialsEnd"

    reason: str = _wire("reason")
    message: str = _wire("message")

    @classmethod
    def from_json(cls, v: Any) -> NetworkDenialsEnd:
        w = "network denials end"
        d = _obj(v, w)
        return cls(reason=_req(d, "reason", str, w), message=_req(d, "message", str, w))


@dataclass(frozen=True)
class NetworkStatus:
    """A ready or paused sandbox's network: the policy that holds (the daemon's default egress made
    explicit), the connections it let out and refused, and its recent denials, newest first (at most
    50)."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/NetworkStatus"

    generation: int = _wire("generation")
    policy: NetworkPolicy = _wire("policy")
    allowed_connections: int = _wire("allowedConnections")
    denied_connections: int = _wire("deniedConnections")
    denials: Tuple[NetworkDenial, ...] = _wire("denials")

    @classmethod
    def from_json(cls, v: Any) -> NetworkStatus:
        w = "network"
        d = _obj(v, w)
        return cls(
            generation=_req(d, "generation", int, w),
            policy=NetworkPolicy.from_json(_req(d, "policy", dict, w)),
            allowed_connections=_req(d, "allowedConnections", int, w),
            denied_connections=_req(d, "deniedConnections", int, w),
            denials=tuple(NetworkDenial.from_json(x) for x in _req(d, "denials", list, w)),
        )


class Denials:
    """What the bytes of a denials stream come to: each "denial" a NetworkDenial, the "end" a
    NetworkDenialsEnd; the synchronous and asynchronous streams feed it what they read."""

    def __init__(self) -> None:
        self.end: Optional[NetworkDenialsEnd] = None
        self._parser = Parser()

    def feed(self, chunk: bytes) -> List[NetworkDenial]:
        """The denials chunk completes; b"" (the stream's end) before the end event is a
        ConnectionFailed, and what is not a stream of denials an UnexpectedResponse."""
        if not chunk:
            raise ConnectionFailed("network denials: the stream ended without its end event")
        try:
            msgs = self._parser.feed(chunk)
        except SSEError as e:
            raise UnexpectedResponse(f"network denials: {e}") from None
        out: List[NetworkDenial] = []
        for m in msgs:
            d = self._take(m.event, m.data)
            if d is not None:
                out.append(d)
        return out

    @staticmethod
    def lost(e: Lost) -> ConnectionFailed:
        """The error of a stream whose connection broke or stayed silent past its read timeout."""
        why = e.__cause__ or "nothing, not even a heartbeat, within the read timeout"
        return ConnectionFailed(f"network denials: {why}")

    def _take(self, event: str, data: str) -> Optional[NetworkDenial]:
        if event not in ("denial", "end"):
            return None  # an event this client does not know
        try:
            doc = json.loads(data)
            if event == "end":
                self.end = NetworkDenialsEnd.from_json(doc)
                return None
            denial = NetworkDenial.from_json(doc)
        except (ValueError, SandboxdError) as e:
            raise UnexpectedResponse(f"network denials: the data of a {event!r} event: {e}") from None
        if RESPONSE_HOOKS:
            observe("streamNetworkDenials", 200, doc)
        return denial


# --- requests ---


def get_network(sandbox_id: str) -> Request:
    return Request("getNetwork", "GET", path("v1", "sandboxes", sandbox_id, "network"), retry=Retry.SERVER)


def set_network(sandbox_id: str, generation: int, policy: NetworkPolicy) -> Request:
    # Setting the same policy again leaves it as the first set left it: safe to repeat after a lost answer.
    return Request(
        "setNetwork",
        "PUT",
        path("v1", "sandboxes", sandbox_id, "network"),
        body=json_body({"expectedGeneration": generation, "policy": policy.to_json()}),
        retry=Retry.LOST,
    )


def stream_network_denials(sandbox_id: str) -> Request:
    return Request(
        "streamNetworkDenials",
        "GET",
        path("v1", "sandboxes", sandbox_id, "network", "denials"),
        headers=(("Accept", "text/event-stream"),),
        retry=Retry.SERVER,
    )
