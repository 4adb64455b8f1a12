"""The errors the client raises.

Every error is a :class:`SandboxdError`. An error the daemon answered is an instance of the class of its
``error.code`` (never guessed from the HTTP status: 409 alone has three meanings):

==============================  ==============================
``error.code``                  class
==============================  ==============================
``invalid_request``             :class:`ValidationError`
``unauthenticated``             :class:`Unauthenticated`
``not_found``                   :class:`NotFound`
``method_not_allowed``          :class:`MethodNotAllowed`
``request_too_large``           :class:`RequestTooLarge`
``generation_conflict``         :class:`GenerationConflict`
``idempotency_conflict``        :class:`IdempotencyConflict`
``invalid_state``               :class:`InvalidState`
``unsupported_capability``      :class:`UnsupportedCapability`
``provider_protocol_error``     :class:`ProviderProtocolError`
``port_unreachable``            :class:`PortUnreachable`
``provider_unavailable``        :class:`ProviderUnavailable`
``event_history_unavailable``   :class:`EventHistoryUnavailable`
``internal``                    :class:`InternalError`
==============================  ==============================

A code this client does not know is a plain :class:`SandboxdError` carrying it. Errors of the client's own
(no answer, a malformed answer, a wait that ran out of time, a sandbox that failed) have classes of their
own and ``status`` None.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Mapping, Optional, Tuple, Type

if TYPE_CHECKING:
    from .types import CommandResult, Failure, SandboxResource

__all__ = [
    "CommandFailed",
    "ConnectionFailed",
    "EventHistoryUnavailable",
    "GenerationConflict",
    "IdempotencyConflict",
    "InternalError",
    "InvalidState",
    "MethodNotAllowed",
    "NotFound",
    "ProviderProtocolError",
    "ProviderUnavailable",
    "RequestTooLarge",
    "SandboxFailed",
    "SandboxdError",
    "Unauthenticated",
    "UnexpectedResponse",
    "UnexpectedState",
    "UnsupportedCapability",
    "ValidationError",
    "WaitTimeout",
    "error_class",
    "error_from_response",
]


class SandboxdError(Exception):
    """The base of every error of this package.

    ``code`` is the contract's ``error.code`` for an error the daemon answered, ``message`` its
    ``error.message``, ``status`` the HTTP status, and ``details`` any other members of the error object
    (none in this version of the contract). Errors of the client itself have codes of their own and
    ``status`` None.
    """

    wire_code: ClassVar[Optional[str]] = None
    """The contract code this class stands for (None for the base and the client's own errors)."""

    default_code: ClassVar[str] = "unknown"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        details: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.wire_code or self.default_code
        self.status = status
        self.details: Mapping[str, Any] = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ValidationError(SandboxdError):
    """``invalid_request``: the request does not match the contract (bad JSON, a schema violation, a bad
    cursor, a directory where a file is expected)."""

    wire_code = "invalid_request"


class Unauthenticated(SandboxdError):
    """``unauthenticated``: the bearer token is missing or not accepted."""

    wire_code = "unauthenticated"


class NotFound(SandboxdError):
    """``not_found``: no such sandbox, file or route."""

    wire_code = "not_found"


class MethodNotAllowed(SandboxdError):
    """``method_not_allowed``: the path does not take that method."""

    wire_code = "method_not_allowed"


class RequestTooLarge(SandboxdError):
    """``request_too_large``: the body is over the daemon's limit (32 MiB; a file over 24 MiB)."""

    wire_code = "request_too_large"


_CURRENT = re.compile(r"generation (\d+), current (\d+)")


class GenerationConflict(SandboxdError):
    """``generation_conflict``: the sandbox is no longer the generation this call was fenced by (someone
    recreated it). ``current_generation`` is the one it has, when the daemon's message says so;
    :meth:`sandboxd.Sandbox.refresh` adopts it."""

    wire_code = "generation_conflict"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        m = _CURRENT.search(message)
        self.expected_generation: Optional[int] = int(m.group(1)) if m else None
        self.current_generation: Optional[int] = int(m.group(2)) if m else None


class IdempotencyConflict(SandboxdError):
    """``idempotency_conflict``: the clientRequestId was used with another spec, or belongs to a
    generation a recreate has replaced."""

    wire_code = "idempotency_conflict"


class InvalidState(SandboxdError):
    """``invalid_state``: the action does not apply to the sandbox's state (a command while it is paused,
    a recreate of a sandbox that is not terminated)."""

    wire_code = "invalid_state"


class UnsupportedCapability(SandboxdError):
    """``unsupported_capability``: the provider cannot do what the request needs."""

    wire_code = "unsupported_capability"


class ProviderProtocolError(SandboxdError):
    """``provider_protocol_error``: the provider answered something malformed."""

    wire_code = "provider_protocol_error"


class PortUnreachable(SandboxdError):
    """``port_unreachable`` (502): nothing answered on a sandbox's port that the ports proxy reached:
    nothing listens there, or what listens answered no HTTP."""

    wire_code = "port_unreachable"


class ProviderUnavailable(SandboxdError):
    """``provider_unavailable``: the provider failed or could not be reached."""

    wire_code = "provider_unavailable"


_PRUNED = re.compile(r"before cursor (\d+)")


class EventHistoryUnavailable(SandboxdError):
    """``event_history_unavailable`` (410): the cursor is older than the history the daemon keeps, so
    events after it are lost. ``oldest_cursor`` is the oldest event still kept, when the message says."""

    wire_code = "event_history_unavailable"

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        m = _PRUNED.search(message)
        self.oldest_cursor: Optional[int] = int(m.group(1)) if m else None


class InternalError(SandboxdError):
    """``internal``: the daemon failed unexpectedly (it logged the detail)."""

    wire_code = "internal"


# --- the client's own errors ---


class UnexpectedResponse(SandboxdError):
    """The daemon (or something between) answered what the contract does not allow: not JSON, a missing
    property, an error body that is not an ErrorResponse."""

    default_code = "unexpected_response"


class ConnectionFailed(SandboxdError, ConnectionError):
    """No answer: the daemon could not be reached, the connection broke, or it did not answer in time
    (after the retries the call allows)."""

    default_code = "connection_failed"


class WaitTimeout(SandboxdError, TimeoutError):
    """A wait for a state ran out of time. ``sandbox`` is the sandbox as last seen."""

    default_code = "wait_timeout"

    def __init__(self, message: str, *, sandbox: Optional[SandboxResource] = None, wanted: str = "") -> None:
        super().__init__(message)
        self.sandbox = sandbox
        self.wanted = wanted


class UnexpectedState(InvalidState):
    """A wait found the sandbox settled in a state other than the one wanted, which it will not leave by
    itself (e.g. ``terminated`` while waiting for ``ready``). ``sandbox`` is the sandbox as seen then."""

    def __init__(self, message: str, *, sandbox: SandboxResource, wanted: str) -> None:
        super().__init__(message, details={"state": sandbox.state, "wanted": wanted})
        self.sandbox = sandbox
        self.wanted = wanted


class SandboxFailed(UnexpectedState):
    """The sandbox is ``failed``; ``failure`` says why (a stable ``code`` and a ``message``)."""

    def __init__(self, message: str, *, sandbox: SandboxResource, wanted: str) -> None:
        super().__init__(message, sandbox=sandbox, wanted=wanted)
        self.failure: Optional[Failure] = sandbox.failure


class CommandFailed(SandboxdError):
    """``run(..., check=True)`` found the command did not exit 0. ``result`` is its result."""

    default_code = "command_failed"

    def __init__(self, message: str, *, result: CommandResult) -> None:
        super().__init__(message)
        self.result = result


_CLASSES: Tuple[Type[SandboxdError], ...] = (
    ValidationError,
    Unauthenticated,
    NotFound,
    MethodNotAllowed,
    RequestTooLarge,
    GenerationConflict,
    IdempotencyConflict,
    InvalidState,
    UnsupportedCapability,
    ProviderProtocolError,
    PortUnreachable,
    ProviderUnavailable,
    EventHistoryUnavailable,
    InternalError,
)
_BY_CODE: Dict[str, Type[SandboxdError]] = {c.wire_code: c for c in _CLASSES if c.wire_code is not None}


def error_class(code: str) -> Type[SandboxdError]:
    """The class of a contract ``error.code``; :class:`SandboxdError` for a code this client does not
    know."""
    return _BY_CODE.get(code, SandboxdError)


def error_from_response(status: int, body: bytes) -> SandboxdError:
    """The error of a non-2xx answer: the class of its ``error.code``, or :class:`UnexpectedResponse`
    when the body is not an ErrorResponse (a proxy's page, say)."""
    try:
        doc = json.loads(body)
        err = doc["error"]
        code, message = err["code"], err["message"]
        if not isinstance(code, str) or not code or not isinstance(message, str):
            raise TypeError("code and message must be strings")
    except (ValueError, TypeError, KeyError):
        text = body[:300].decode("utf-8", "replace").strip()
        return UnexpectedResponse(f"HTTP {status}: {text or 'no ErrorResponse body'}", status=status)
    details = {k: v for k, v in err.items() if k not in ("code", "message")}
    return error_class(code)(message, code=code, status=status, details=details)
