"""The group "ports" of ``api/extensions.yaml``: the proxy to a port inside a sandbox
(``/v1/sandboxes/{sandboxId}/ports/{port}/{path...}``, :meth:`sandboxd.Sandbox.port_url`), the raw TCP
relay (``GET .../ports/{port}/tcp``, a WebSocket: :meth:`sandboxd.Client.dial_port` and
:meth:`sandboxd.Client.forward_port`, whose connections are in :mod:`sandboxd.relay`) and preview
tokens (``POST /v1/sandboxes/{sandboxId}/ports/{port}/preview-tokens``,
:meth:`sandboxd.Sandbox.preview_token`), capability ``portForwarding``.

The proxy is authenticated as the rest of the API and reaches 127.0.0.1:{port} inside the sandbox
through its agent, whatever its egress policy. A preview token opens one port of one generation of one
sandbox on the daemon's preview listener until it expires; recreating the sandbox revokes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Optional, Tuple

from .._transport import Request, Retry, json_body, path
from ..types import _obj, _req, _time, _wire

__all__ = ["PreviewToken", "parse_port"]


def parse_port(port: Any) -> int:
    """A TCP port as the daemon takes it: an int, or plain decimal from 1 to 65535 without a sign, a
    leading zero or a space. Raises ValueError for anything else."""
    if isinstance(port, bool):
        raise ValueError(f"port {port!r}: not a port")
    if isinstance(port, int):
        s = str(port)
    elif isinstance(port, str):
        s = port
    else:
        raise ValueError(f"port {port!r}: not a port")
    if not (1 <= len(s) <= 5 and s.isascii() and s.isdigit() and s[0] != "0" and int(s) <= 65535):
        raise ValueError(f"port {port!r}: a port is a decimal number from 1 to 65535 without a sign or a leading zero")
    return int(s)


@dataclass(frozen=True)
class PreviewToken:
    """A token for one port of one sandbox generation, and the preview URL that carries it once (as the
    ``sandboxd_preview`` query parameter; a browser keeps it as a cookie of that host). A client that is
    no browser sends ``token`` in an ``X-Sandboxd-Preview-Token`` header instead."""

    schema: ClassVar[str] = "extensions.yaml#/components/schemas/PreviewToken"

    url: str = _wire("url")
    token: str = _wire("token")
    expires_at: datetime = _wire("expiresAt")
    port: int = _wire("port")
    generation: int = _wire("generation")

    @classmethod
    def from_json(cls, v: Any) -> PreviewToken:
        w = "preview token"
        d = _obj(v, w)
        return cls(
            url=_req(d, "url", str, w),
            token=_req(d, "token", str, w),
            expires_at=_time(d, "expiresAt", w),
            port=_req(d, "port", int, w),
            generation=_req(d, "generation", int, w),
        )


# --- requests ---


def port_path(sandbox_id: str, port: int) -> str:
    """The escaped path of the proxy to port of the sandbox, ending in "/"."""
    return path("v1", "sandboxes", sandbox_id, "ports", str(parse_port(port))) + "/"


TCP_SUBPROTOCOL = "sandboxd.tcp"
"""The subprotocol of the TCP relay's WebSocket."""


def relay_port(sandbox_id: str, port: int, headers: Tuple[Tuple[str, str], ...]) -> Request:
    """The upgrade to the TCP relay of port (``GET .../ports/{port}/tcp``). The daemon connects to the
    port before it upgrades, so a repeat after a lost answer opens one more connection there, which the
    daemon closes with the socket nobody took: safe to repeat. A 5xx (502 port_unreachable) is not."""
    return Request(
        "relayPort", "GET", path("v1", "sandboxes", sandbox_id, "ports", str(parse_port(port)), "tcp"),
        retry=Retry.LOST, headers=headers,
    )  # fmt: skip


def create_preview_token(sandbox_id: str, port: int, ttl_seconds: Optional[int]) -> Request:
    body = {} if ttl_seconds is None else {"ttlSeconds": ttl_seconds}
    return Request(
        "createPreviewToken",
        "POST",
        path("v1", "sandboxes", sandbox_id, "ports", str(parse_port(port)), "preview-tokens"),
        body=json_body(body),
        retry=Retry.UNSENT,
    )
