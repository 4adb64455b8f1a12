"""The contract's data types, as frozen dataclasses.

Each class mirrors one schema of ``api/openapi.yaml`` (named in its ``schema`` class attribute, a JSON
pointer into the contract): one field per property, under the property's name in snake case (the wire
name is in each field's ``metadata["json"]``), required properties as fields without a default. A test
compares every class with its schema, so they stay in step.

Decoding (``from_json``) ignores properties it does not know, so a newer daemon that adds one does not
break an older client; it raises :class:`sandboxd.errors.UnexpectedResponse` when a required property is
missing or has the wrong type.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Dict, List, Literal, Mapping, Optional, Tuple

from .errors import UnexpectedResponse

__all__ = [
    "CapabilityName",
    "CommandResult",
    "Endpoint",
    "EventType",
    "Failure",
    "FileEntry",
    "FileKind",
    "FileReadResult",
    "ProviderManifest",
    "Resources",
    "RuntimeCapabilities",
    "RuntimeInfo",
    "SandboxEvent",
    "SandboxResource",
    "SandboxSpec",
    "SandboxState",
    "SETTLED_STATES",
]

SandboxState = Literal[
    "requested", "starting", "ready", "pausing", "paused", "resuming", "terminating", "terminated", "failed"
]
"""A sandbox's state (schema ``SandboxState``). A daemon of a later version may send others."""

SETTLED_STATES: frozenset[str] = frozenset({"ready", "paused", "terminated", "failed"})
"""The states a sandbox stays in until someone acts; the others move on by themselves."""

CapabilityName = Literal[
    "commandExecution",
    "fileAccess",
    "interactiveTerminal",
    "portForwarding",
    "pauseResume",
    "filesystemSnapshot",
    "memorySnapshot",
    "persistentVolume",
    "networkPolicy",
    "imageReference",
    "templateReference",
    "resourceLimits",
]
"""A capability a provider may declare and a spec may require (schema ``CapabilityName``)."""

EventType = Literal["sandbox.created", "sandbox.state_changed", "sandbox.command_completed", "sandbox.file_written"]
"""The type of a :class:`SandboxEvent`."""

FileKind = Literal["file", "directory"]
"""The kind of a :class:`FileEntry`."""

JSONObject = Dict[str, Any]


def _wire(name: str, **kw: Any) -> Any:
    """A dataclass field whose wire name is ``name``."""
    return field(metadata={"json": name}, **kw)


# --- decoding: each function raises UnexpectedResponse naming what is wrong ---


def _obj(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise UnexpectedResponse(f"{what}: want a JSON object, got {type(v).__name__}")
    return v


def _req(d: Mapping[str, Any], key: str, typ: type, what: str) -> Any:
    try:
        v = d[key]
    except KeyError:
        raise UnexpectedResponse(f"{what}: required property {key!r} is missing") from None
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise UnexpectedResponse(f"{what}.{key}: want {typ.__name__}, got {type(v).__name__}")
    return v


def _opt(d: Mapping[str, Any], key: str, typ: type, what: str) -> Any:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise UnexpectedResponse(f"{what}.{key}: want {typ.__name__}, got {type(v).__name__}")
    return v


_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))$")


def parse_time(s: str) -> datetime:
    """Parses an RFC 3339 timestamp (as the daemon writes them, with up to nanoseconds) into an aware
    datetime. Digits past microseconds are dropped."""
    m = _TS.match(s)
    if m is None:
        raise UnexpectedResponse(f"timestamp {s!r} is not RFC 3339")
    frac = (m.group(7) or "")[:6].ljust(6, "0")
    if m.group(8):
        tz = timezone.utc
    else:
        off = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(-off if m.group(9) == "-" else off)
    return datetime(
        int(m.group(1)), int(m.group(2)), int(m.group(3)),
        int(m.group(4)), int(m.group(5)), int(m.group(6)), int(frac), tz,
    )  # fmt: skip


def _time(d: Mapping[str, Any], key: str, what: str) -> datetime:
    return parse_time(_req(d, key, str, what))


# --- runtime ---


@dataclass(frozen=True)
class RuntimeCapabilities:
    """What a provider declares it can do. Capabilities describe supported semantics; they do not prove
    security or provider health."""

    schema: ClassVar[str] = "#/components/schemas/RuntimeCapabilities"

    command_execution: bool = _wire("commandExecution")
    file_access: bool = _wire("fileAccess")
    interactive_terminal: bool = _wire("interactiveTerminal")
    port_forwarding: bool = _wire("portForwarding")
    pause_resume: bool = _wire("pauseResume")
    filesystem_snapshot: bool = _wire("filesystemSnapshot")
    memory_snapshot: bool = _wire("memorySnapshot")
    persistent_volume: bool = _wire("persistentVolume")
    network_policy: bool = _wire("networkPolicy")
    image_reference: bool = _wire("imageReference")
    template_reference: bool = _wire("templateReference")
    resource_limits: bool = _wire("resourceLimits")

    @classmethod
    def from_json(cls, v: Any) -> RuntimeCapabilities:
        d = _obj(v, "capabilities")
        return cls(*(_req(d, f.metadata["json"], bool, "capabilities") for f in _fields(cls)))

    def names(self) -> List[str]:
        """The wire names of the capabilities that are present, e.g. ``["commandExecution", ...]``."""
        return [f.metadata["json"] for f in _fields(type(self)) if getattr(self, f.name)]

    def __contains__(self, name: object) -> bool:
        """``"pauseResume" in caps``: whether the capability of that wire name is present."""
        return isinstance(name, str) and name in self.names()


@dataclass(frozen=True)
class ProviderManifest:
    """The provider's self-description."""

    schema: ClassVar[str] = "#/components/schemas/ProviderManifest"

    name: str = _wire("name")
    version: str = _wire("version")
    runtime_class: str = _wire("runtimeClass")
    capabilities: RuntimeCapabilities = _wire("capabilities")

    @classmethod
    def from_json(cls, v: Any) -> ProviderManifest:
        d = _obj(v, "provider")
        return cls(
            name=_req(d, "name", str, "provider"),
            version=_req(d, "version", str, "provider"),
            runtime_class=_req(d, "runtimeClass", str, "provider"),
            capabilities=RuntimeCapabilities.from_json(_req(d, "capabilities", dict, "provider")),
        )


@dataclass(frozen=True)
class RuntimeInfo:
    """The answer of ``GET /v1/runtime``: the protocol version and the provider's manifest."""

    schema: ClassVar[str] = "#/components/schemas/RuntimeInfo"

    protocol_version: str = _wire("protocolVersion")
    provider: ProviderManifest = _wire("provider")

    @classmethod
    def from_json(cls, v: Any) -> RuntimeInfo:
        d = _obj(v, "runtime")
        return cls(
            protocol_version=_req(d, "protocolVersion", str, "runtime"),
            provider=ProviderManifest.from_json(_req(d, "provider", dict, "runtime")),
        )


# --- sandboxes ---


@dataclass(frozen=True)
class Resources:
    """Resource limits a spec asks for. A provider without ``resourceLimits`` records them and does not
    enforce them; require the capability to be sure."""

    schema: ClassVar[str] = "#/components/schemas/SandboxSpec/properties/resources"

    cpu_millis: Optional[int] = _wire("cpuMillis", default=None)
    memory_mib: Optional[int] = _wire("memoryMiB", default=None)
    disk_mib: Optional[int] = _wire("diskMiB", default=None)

    @classmethod
    def from_json(cls, v: Any) -> Resources:
        d = _obj(v, "resources")
        return cls(
            cpu_millis=_opt(d, "cpuMillis", int, "resources"),
            memory_mib=_opt(d, "memoryMiB", int, "resources"),
            disk_mib=_opt(d, "diskMiB", int, "resources"),
        )

    def to_json(self) -> JSONObject:
        out: JSONObject = {}
        if self.cpu_millis is not None:
            out["cpuMillis"] = self.cpu_millis
        if self.memory_mib is not None:
            out["memoryMiB"] = self.memory_mib
        if self.disk_mib is not None:
            out["diskMiB"] = self.disk_mib
        return out


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandbox is made from. ``client_request_id`` names one create intent: repeating a create with
    the same id and spec returns the same sandbox. :meth:`sandboxd.Sandbox.create` fills it in."""

    schema: ClassVar[str] = "#/components/schemas/SandboxSpec"

    client_request_id: str = _wire("clientRequestId")
    image: Optional[str] = _wire("image", default=None)
    template: Optional[str] = _wire("template", default=None)
    resources: Optional[Resources] = _wire("resources", default=None)
    required_capabilities: Optional[Tuple[str, ...]] = _wire("requiredCapabilities", default=None)
    extensions: Optional[Mapping[str, Any]] = _wire("extensions", default=None)

    @classmethod
    def from_json(cls, v: Any) -> SandboxSpec:
        d = _obj(v, "spec")
        res = _opt(d, "resources", dict, "spec")
        caps = _opt(d, "requiredCapabilities", list, "spec")
        return cls(
            client_request_id=_req(d, "clientRequestId", str, "spec"),
            image=_opt(d, "image", str, "spec"),
            template=_opt(d, "template", str, "spec"),
            resources=None if res is None else Resources.from_json(res),
            required_capabilities=None if caps is None else tuple(str(c) for c in caps),
            extensions=_opt(d, "extensions", dict, "spec"),
        )

    def to_json(self) -> JSONObject:
        out: JSONObject = {"clientRequestId": self.client_request_id}
        if self.image is not None:
            out["image"] = self.image
        if self.template is not None:
            out["template"] = self.template
        if self.resources is not None:
            out["resources"] = self.resources.to_json()
        if self.required_capabilities:
            out["requiredCapabilities"] = list(self.required_capabilities)
        if self.extensions:
            out["extensions"] = dict(self.extensions)
        return out


@dataclass(frozen=True)
class Endpoint:
    """Where a provider says a sandbox can be reached."""

    schema: ClassVar[str] = "#/components/schemas/SandboxResource/properties/endpoint"

    base_url: str = _wire("baseUrl")

    @classmethod
    def from_json(cls, v: Any) -> Endpoint:
        return cls(base_url=_req(_obj(v, "endpoint"), "baseUrl", str, "endpoint"))


@dataclass(frozen=True)
class Failure:
    """Why a sandbox is ``failed``: a stable code and a message."""

    schema: ClassVar[str] = "#/components/schemas/SandboxResource/properties/failure"

    code: str = _wire("code")
    message: str = _wire("message")

    @classmethod
    def from_json(cls, v: Any) -> Failure:
        d = _obj(v, "failure")
        return cls(code=_req(d, "code", str, "failure"), message=_req(d, "message", str, "failure"))


@dataclass(frozen=True)
class SandboxResource:
    """A sandbox as the daemon reported it at one moment. :class:`sandboxd.Sandbox` holds the newest one
    it has seen."""

    schema: ClassVar[str] = "#/components/schemas/SandboxResource"

    id: str = _wire("id")
    generation: int = _wire("generation")
    state: str = _wire("state")
    spec: SandboxSpec = _wire("spec")
    provider: str = _wire("provider")
    created_at: datetime = _wire("createdAt")
    updated_at: datetime = _wire("updatedAt")
    endpoint: Optional[Endpoint] = _wire("endpoint", default=None)
    provider_extensions: Optional[Mapping[str, Any]] = _wire("providerExtensions", default=None)
    failure: Optional[Failure] = _wire("failure", default=None)

    @classmethod
    def from_json(cls, v: Any) -> SandboxResource:
        d = _obj(v, "sandbox")
        ep = _opt(d, "endpoint", dict, "sandbox")
        fl = _opt(d, "failure", dict, "sandbox")
        return cls(
            id=_req(d, "id", str, "sandbox"),
            generation=_req(d, "generation", int, "sandbox"),
            state=_req(d, "state", str, "sandbox"),
            spec=SandboxSpec.from_json(_req(d, "spec", dict, "sandbox")),
            provider=_req(d, "provider", str, "sandbox"),
            created_at=_time(d, "createdAt", "sandbox"),
            updated_at=_time(d, "updatedAt", "sandbox"),
            endpoint=None if ep is None else Endpoint.from_json(ep),
            provider_extensions=_opt(d, "providerExtensions", dict, "sandbox"),
            failure=None if fl is None else Failure.from_json(fl),
        )


# --- commands and files ---


@dataclass(frozen=True)
class CommandResult:
    """How a command ended. A command that ran is a result whatever its exit code; one that could not
    start has exit code 127 and the reason on stderr. ``exit_code`` is None when it timed out or was
    cancelled (the sandbox was paused or terminated under it, or the client went away).

    ``stdout`` and ``stderr`` are bytes (each capped by the request's ``max_output_bytes``, 1 MiB unless
    set; ``truncated`` says one was cut). The daemon carries them as JSON text, so bytes that are not
    UTF-8 arrive as U+FFFD.
    """

    schema: ClassVar[str] = "#/components/schemas/CommandResult"

    exit_code: Optional[int] = _wire("exitCode")
    stdout: bytes = _wire("stdout")
    stderr: bytes = _wire("stderr")
    timed_out: bool = _wire("timedOut")
    cancelled: bool = _wire("cancelled")
    truncated: bool = _wire("truncated")
    started_at: datetime = _wire("startedAt")
    finished_at: datetime = _wire("finishedAt")

    @classmethod
    def from_json(cls, v: Any) -> CommandResult:
        d = _obj(v, "command result")
        w = "command result"
        if "exitCode" not in d:
            raise UnexpectedResponse(f"{w}: required property 'exitCode' is missing")
        return cls(
            exit_code=_opt(d, "exitCode", int, w),
            stdout=_req(d, "stdout", str, w).encode("utf-8", "surrogatepass"),
            stderr=_req(d, "stderr", str, w).encode("utf-8", "surrogatepass"),
            timed_out=_req(d, "timedOut", bool, w),
            cancelled=_req(d, "cancelled", bool, w),
            truncated=_req(d, "truncated", bool, w),
            started_at=_time(d, "startedAt", w),
            finished_at=_time(d, "finishedAt", w),
        )

    @property
    def ok(self) -> bool:
        """True when the command ran to the end with exit code 0."""
        return self.exit_code == 0

    @property
    def stdout_text(self) -> str:
        """stdout as text (UTF-8)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr as text (UTF-8)."""
        return self.stderr.decode("utf-8", "replace")

    @property
    def text(self) -> str:
        """stdout as text: the usual thing to want from a command."""
        return self.stdout_text

    @property
    def duration(self) -> timedelta:
        """How long the command ran, by the daemon's clock."""
        return self.finished_at - self.started_at


@dataclass(frozen=True)
class FileReadResult:
    """The answer of a file read or write. After a write, ``content_base64`` is empty and ``size`` the
    number of bytes written. :meth:`sandboxd.Files.read` returns the decoded content instead."""

    schema: ClassVar[str] = "#/components/schemas/FileReadResult"

    path: str = _wire("path")
    content_base64: str = _wire("contentBase64")
    size: int = _wire("size")

    @classmethod
    def from_json(cls, v: Any) -> FileReadResult:
        d = _obj(v, "file")
        return cls(
            path=_req(d, "path", str, "file"),
            content_base64=_req(d, "contentBase64", str, "file"),
            size=_req(d, "size", int, "file"),
        )

    def content(self) -> bytes:
        """The decoded content."""
        try:
            return base64.b64decode(self.content_base64, validate=True)
        except ValueError as e:
            raise UnexpectedResponse(f"file {self.path}: contentBase64 is not base64: {e}") from None


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing. ``path`` can be passed back to read or list it."""

    schema: ClassVar[str] = "#/components/schemas/FileEntry"

    path: str = _wire("path")
    kind: str = _wire("kind")
    size: int = _wire("size")

    @classmethod
    def from_json(cls, v: Any) -> FileEntry:
        d = _obj(v, "file entry")
        return cls(
            path=_req(d, "path", str, "file entry"),
            kind=_req(d, "kind", str, "file entry"),
            size=_req(d, "size", int, "file entry"),
        )

    @property
    def name(self) -> str:
        """The last element of the path."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def is_dir(self) -> bool:
        return self.kind == "directory"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"


# --- events ---


@dataclass(frozen=True)
class SandboxEvent:
    """One change of a sandbox, from the daemon's event log. ``cursor`` is strictly increasing and never
    reused; pass the last one you handled as ``after`` to continue. ``data`` depends on ``type``:

    - ``sandbox.created``: ``{"clientRequestId": ..., "spec": {...}}``
    - ``sandbox.state_changed``: ``{"from": "starting", "to": "ready", "reason": "..."}``
    - ``sandbox.command_completed``: ``{"exitCode": 0, "timedOut": false, ..., "durationMs": 12}``
    - ``sandbox.file_written``: ``{"path": "...", "size": 123}``
    """

    schema: ClassVar[str] = "#/components/schemas/SandboxEvent"

    cursor: int = _wire("cursor")
    type: str = _wire("type")
    sandbox_id: str = _wire("sandboxId")
    generation: int = _wire("generation")
    timestamp: datetime = _wire("timestamp")
    data: Mapping[str, Any] = _wire("data")

    @classmethod
    def from_json(cls, v: Any) -> SandboxEvent:
        d = _obj(v, "event")
        return cls(
            cursor=_req(d, "cursor", int, "event"),
            type=_req(d, "type", str, "event"),
            sandbox_id=_req(d, "sandboxId", str, "event"),
            generation=_req(d, "generation", int, "event"),
            timestamp=_time(d, "timestamp", "event"),
            data=_req(d, "data", dict, "event"),
        )

    @property
    def new_state(self) -> Optional[str]:
        """The state this event moved its sandbox's generation into: ``data["to"]`` of a state change,
        ``"requested"`` for a created generation, else None."""
        if self.type == "sandbox.state_changed":
            to = self.data.get("to")
            return to if isinstance(to, str) else None
        if self.type == "sandbox.created":
            return "requested"
        return None


def _fields(cls: type) -> Tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)
