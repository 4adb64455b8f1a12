"""Every operation of the contract as a Request, one function each, named after its operationId. The
synchronous and asynchronous clients send the same requests; adding an endpoint starts here."""

from __future__ import annotations

import base64
from typing import Any, Mapping, Optional, Sequence, Tuple

from ._transport import Request, Retry, json_body, path
from .types import SandboxSpec

NO_SANDBOX = "-"
"""A sandboxId no sandbox has (ids are sbx_...): a filtered events request for it is empty, and tells
only whether its cursor is still within the history kept."""


def get_health() -> Request:
    return Request("getHealth", "GET", "/healthz", retry=Retry.SERVER)


def get_runtime_info() -> Request:
    return Request("getRuntimeInfo", "GET", "/v1/runtime", retry=Retry.SERVER)


def list_sandboxes() -> Request:
    return Request("listSandboxes", "GET", "/v1/sandboxes", retry=Retry.SERVER)


def create_sandbox(spec: SandboxSpec) -> Request:
    # Safe to repeat: the clientRequestId makes a repeat return the sandbox the first one made.
    return Request("createSandbox", "POST", "/v1/sandboxes", body=json_body(spec.to_json()), retry=Retry.SERVER)


def get_sandbox(sandbox_id: str) -> Request:
    return Request("getSandbox", "GET", path("v1", "sandboxes", sandbox_id), retry=Retry.SERVER)


def reconcile_sandbox(sandbox_id: str) -> Request:
    # It changes no desired state: repeating it is another observation.
    return Request(
        "reconcileSandbox", "POST", path("v1", "sandboxes", sandbox_id, "actions", "reconcile"), retry=Retry.SERVER
    )


def _action(op: str, sandbox_id: str, action: str, generation: int) -> Request:
    # Pause of paused, resume of ready, terminate of terminated answer 200: a repeat after a lost answer
    # returns the sandbox as the first one left it.
    return Request(
        op,
        "POST",
        path("v1", "sandboxes", sandbox_id, "actions", action),
        body=json_body({"expectedGeneration": generation}),
        retry=Retry.LOST,
    )


def pause_sandbox(sandbox_id: str, generation: int) -> Request:
    return _action("pauseSandbox", sandbox_id, "pause", generation)


def resume_sandbox(sandbox_id: str, generation: int) -> Request:
    return _action("resumeSandbox", sandbox_id, "resume", generation)


def terminate_sandbox(sandbox_id: str, generation: int) -> Request:
    return _action("terminateSandbox", sandbox_id, "terminate", generation)


def recreate_sandbox(sandbox_id: str, generation: int, spec: SandboxSpec) -> Request:
    # A repeat after a lost answer meets generation_conflict; the caller recognises its own recreate by
    # the spec's clientRequestId (Sandbox.recreate).
    return Request(
        "recreateSandbox",
        "POST",
        path("v1", "sandboxes", sandbox_id, "actions", "recreate"),
        body=json_body({"expectedGeneration": generation, "spec": spec.to_json()}),
        retry=Retry.LOST,
    )


def execute_command(
    sandbox_id: str,
    generation: int,
    argv: Sequence[str],
    *,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    timeout: Optional[float],
    max_output_bytes: Optional[int],
    http_timeout: float,
) -> Request:
    doc: dict[str, Any] = {"expectedGeneration": generation, "argv": list(argv)}
    if cwd is not None:
        doc["cwd"] = cwd
    if env:
        doc["env"] = dict(env)
    if timeout is not None:
        doc["timeoutSeconds"] = timeout
    if max_output_bytes is not None:
        doc["maxOutputBytes"] = max_output_bytes
    # Never repeated once sent: it would run the command twice. The answer comes when the command ends,
    # so the wait for it is the command's own timeout (the daemon's default is 60 s) and then some.
    return Request(
        "executeCommand",
        "POST",
        path("v1", "sandboxes", sandbox_id, "commands"),
        body=json_body(doc),
        timeout=(timeout if timeout is not None else 60.0) + http_timeout,
    )


def _file_query(p: str, generation: int) -> Tuple[Tuple[str, str], ...]:
    return (("path", p), ("expectedGeneration", str(generation)))


def read_file(sandbox_id: str, generation: int, p: str) -> Request:
    return Request(
        "readFile",
        "GET",
        path("v1", "sandboxes", sandbox_id, "files", "content"),
        query=_file_query(p, generation),
        retry=Retry.SERVER,
    )


def write_file(sandbox_id: str, generation: int, p: str, data: bytes, http_timeout: float) -> Request:
    body = json_body({"expectedGeneration": generation, "path": p, "contentBase64": base64.b64encode(data).decode()})
    # Not repeated once sent: a repeat could overwrite what another writer wrote in between.
    return Request(
        "writeFile",
        "PUT",
        path("v1", "sandboxes", sandbox_id, "files", "content"),
        body=body,
        timeout=http_timeout + len(body) / (1 << 20),
    )


def list_files(sandbox_id: str, generation: int, p: str) -> Request:
    return Request(
        "listFiles",
        "GET",
        path("v1", "sandboxes", sandbox_id, "files", "entries"),
        query=_file_query(p, generation),
        retry=Retry.SERVER,
    )


def _event_query(after: int, sandbox_id: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    q: Tuple[Tuple[str, str], ...] = (("after", str(after)),)
    if sandbox_id:
        q += (("sandboxId", sandbox_id),)
    return q


def list_events(after: int, sandbox_id: Optional[str]) -> Request:
    return Request("listEvents", "GET", "/v1/events", query=_event_query(after, sandbox_id), retry=Retry.SERVER)


def stream_events(after: int, sandbox_id: Optional[str], resumed: bool) -> Request:
    # A resumed connection also says Last-Event-ID, as an EventSource does; the daemon lets it win.
    h: Tuple[Tuple[str, str], ...] = (("Accept", "text/event-stream"),)
    if resumed:
        h += (("Last-Event-ID", str(after)),)
    return Request(
        "streamEvents", "GET", "/v1/events/stream", query=_event_query(after, sandbox_id), headers=h, retry=Retry.SERVER
    )


def custom(
    method: str,
    p: str,
    *,
    query: Optional[Mapping[str, Any]] = None,
    body: Any = None,
    idempotent: bool = False,
    timeout: Optional[float] = None,
) -> Request:
    """A request the client has no method for yet (an endpoint newer than it)."""
    if not p.startswith("/"):
        p = "/" + p
    q = tuple((k, str(v)) for k, v in (query or {}).items() if v is not None)
    return Request(
        f"{method.upper()} {p}",
        method.upper(),
        p,
        query=q,
        body=None if body is None else json_body(body),
        retry=Retry.SERVER if idempotent else Retry.UNSENT,
        timeout=timeout,
    )
