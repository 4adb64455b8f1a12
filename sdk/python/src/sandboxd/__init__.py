"""sandboxd: a Python client of the sandboxd runtime.

::

    from sandboxd import Sandbox

    with Sandbox.create() as sandbox:          # $SANDBOXD_URL, $SANDBOXD_TOKEN
        print(sandbox.run(["echo", "hello"]).text)

:class:`Client` and :class:`Sandbox` are synchronous; :class:`AsyncClient` and :class:`AsyncSandbox` are
the same API as coroutines. Errors are in :mod:`sandboxd.errors`, data types in :mod:`sandboxd.types`,
what sandboxd offers beyond the contract (``api/extensions.yaml``) in :mod:`sandboxd.extensions`.
Only the standard library is used.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .aio import AsyncClient, AsyncDenialStream, AsyncEventStream, AsyncFiles, AsyncOutputStream, AsyncSandbox
from .client import Client, EventStream
from .errors import (
    CommandFailed,
    ConnectionFailed,
    EventHistoryUnavailable,
    GenerationConflict,
    IdempotencyConflict,
    InternalError,
    InvalidState,
    MethodNotAllowed,
    NotFound,
    ProviderProtocolError,
    PortUnreachable,
    ProviderUnavailable,
    RequestTooLarge,
    SandboxdError,
    SandboxFailed,
    Unauthenticated,
    UnexpectedResponse,
    UnexpectedState,
    UnsupportedCapability,
    ValidationError,
    WaitTimeout,
)
from .extensions import (
    Checkpoint,
    ImageInfo,
    ImageProgress,
    Lifetime,
    NetworkDenial,
    NetworkDenialsEnd,
    NetworkPolicy,
    NetworkStatus,
    OutputChunk,
    OutputDropped,
    PreviewToken,
    Process,
    ProcessEnd,
    RecordedLifetime,
    SandboxStats,
    SnapshotInfo,
    StreamHeartbeat,
    TemplateInfo,
    TemplateVersion,
    Volume,
    VolumeMount,
)
from .relay import AsyncPortConnection, AsyncPortForward, PortConnection, PortForward
from .sandbox import DenialStream, Files, OutputStream, Sandbox
from .types import (
    CommandResult,
    Endpoint,
    Failure,
    FileEntry,
    FileReadResult,
    ProviderManifest,
    Resources,
    RuntimeCapabilities,
    RuntimeInfo,
    SandboxEvent,
    SandboxResource,
    SandboxSpec,
)

__all__ = [
    "AsyncClient",
    "AsyncDenialStream",
    "AsyncEventStream",
    "AsyncFiles",
    "AsyncOutputStream",
    "AsyncSandbox",
    "Checkpoint",
    "Client",
    "CommandFailed",
    "CommandResult",
    "AsyncPortConnection",
    "AsyncPortForward",
    "ConnectionFailed",
    "DenialStream",
    "Endpoint",
    "EventHistoryUnavailable",
    "EventStream",
    "Failure",
    "FileEntry",
    "FileReadResult",
    "Files",
    "GenerationConflict",
    "IdempotencyConflict",
    "ImageInfo",
    "ImageProgress",
    "SnapshotInfo",
    "TemplateInfo",
    "TemplateVersion",
    "InternalError",
    "InvalidState",
    "Lifetime",
    "MethodNotAllowed",
    "NetworkDenial",
    "NetworkDenialsEnd",
    "NetworkPolicy",
    "NetworkStatus",
    "NotFound",
    "OutputChunk",
    "OutputDropped",
    "OutputStream",
    "Process",
    "ProcessEnd",
    "ProviderManifest",
    "ProviderProtocolError",
    "PortConnection",
    "PortForward",
    "PortUnreachable",
    "ProviderUnavailable",
    "PreviewToken",
    "RecordedLifetime",
    "RequestTooLarge",
    "Resources",
    "RuntimeCapabilities",
    "RuntimeInfo",
    "Sandbox",
    "SandboxEvent",
    "SandboxFailed",
    "SandboxResource",
    "SandboxSpec",
    "SandboxStats",
    "SandboxdError",
    "StreamHeartbeat",
    "Unauthenticated",
    "UnexpectedResponse",
    "UnexpectedState",
    "UnsupportedCapability",
    "ValidationError",
    "Volume",
    "VolumeMount",
    "WaitTimeout",
]
