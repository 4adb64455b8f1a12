"""What the synchronous and the asynchronous transport share: the base URL, the description of one
request, the retry rules and the backoff, the headers, the decoding of answers. No I/O here."""

from __future__ import annotations

import enum
import json
import os
import random
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote, urlencode, urlsplit

from . import __version__
from .errors import ConnectionFailed, SandboxdError, UnexpectedResponse, ValidationError, error_from_response

DEFAULT_URL = "http://127.0.0.1:4311"
DEFAULT_TIMEOUT = 30.0
USER_AGENT = f"sandboxd-python/{__version__}"

ResponseHook = Callable[[str, int, Any], None]
RESPONSE_HOOKS: List[ResponseHook] = []
"""Called with (operationId, status, decoded JSON) for every JSON body the client decodes (the text of a
text/plain answer as a str), and with ("streamEvents", 200, event) for every event of a stream. The test
suite checks them against the contract and api/extensions.yaml."""


def observe(operation: str, status: int, doc: Any) -> None:
    for hook in RESPONSE_HOOKS:
        hook(operation, status, doc)


class Retry(enum.IntEnum):
    """When a request may be sent again. Every request may be when it never left (the connection was
    refused); the contract decides the rest."""

    UNSENT = 0
    """Only when it was never sent: commands, file writes (repeating them would do them twice)."""
    LOST = 1
    """Also when it was sent and the answer lost: actions whose repeat answers 200 with the sandbox as
    it is (pause, resume, terminate), and recreate (whose own clientRequestId tells a repeat apart). A
    5xx answer to them is final: the daemon has failed the sandbox, and a repeat could only say
    invalid_state."""
    SERVER = 2
    """Also on 500, 502 and 503 answers: reads, creates (fenced by their clientRequestId) and reconcile."""


RETRY_STATUSES = frozenset({500, 502, 503})

@dataclass(frozen=True)
class Request:
    """One API call, before it is sent."""

    operation: str  # the contract's operationId
    method: str
    path: str  # below the base URL, escaped
    query: Tuple[Tuple[str, str], ...] = ()
    body: Optional[bytes] = None
    retry: Retry = Retry.UNSENT
    timeout: Optional[float] = None  # seconds the answer may take; None: the client's timeout
    headers: Tuple[Tuple[str, str], ...] = ()
    text: bool = False  # the answer is text/plain, returned as a str
    empty: bool = False  # the answer is a 204 without a body, returned as None

    def target(self, base_path: str) -> str:
        t = base_path + self.path
        if self.query:
            t += "?" + urlencode(self.query)
        return t


def json_body(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def path(*segments: str) -> str:
    """The escaped path of segments: ``path("v1", "sandboxes", id)``."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


@dataclass(frozen=True)
class Base:
    """The parsed base URL of a daemon."""

    url: str
    scheme: str
    host: str
    port: int
    path: str  # without a trailing slash

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        h = f"[{self.host}]" if ":" in self.host else self.host
        return h if self.port == default else f"{h}:{self.port}"


def parse_base(url: Optional[str]) -> Base:
    """The daemon's URL: url, else $SANDBOXD_URL, else http://127.0.0.1:4311."""
    raw = url or os.environ.get("SANDBOXD_URL") or DEFAULT_URL
    u = urlsplit(raw.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValidationError(f"daemon URL {raw!r}: want http://host:port or https://host:port")
    if u.query or u.fragment:
        raise ValidationError(f"daemon URL {raw!r}: a base URL has no query or fragment")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise ValidationError(f"daemon URL {raw!r}: bad port") from None
    return Base(url=raw, scheme=u.scheme, host=u.hostname, port=port, path=u.path.rstrip("/"))


def resolve_token(token: Optional[str]) -> Optional[str]:
    """The bearer token: token, else $SANDBOXD_TOKEN, else none."""
    t = token if token is not None else os.environ.get("SANDBOXD_TOKEN")
    return t.strip() or None if t else None


def headers(base: Base, token: Optional[str], req: Request) -> List[Tuple[str, str]]:
    """The headers of req (Host and framing excepted)."""
    h = [("User-Agent", USER_AGENT)]
    if not any(k == "Accept" for k, _ in req.headers):
        h.append(("Accept", "application/json"))
    if token:
        h.append(("Authorization", "Bearer " + token))
    if req.body is not None:
        h.append(("Content-Type", "application/json"))
    h.extend(req.headers)
    return h


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff with jitter: the wait before retry n (1-based) is
    ``min(max_delay, base * 2**(n-1))``, less up to a quarter, so clients retrying together spread out."""

    retries: int = 3
    base: float = 0.1
    max_delay: float = 2.0

    def delay(self, n: int) -> float:
        d: float = min(self.max_delay, self.base * float(2 ** min(n - 1, 30)))
        return d - random.uniform(0, d / 4)


class Unsent(Exception):
    """The request never reached the daemon (connect failed)."""


class Lost(Exception):
    """The request was sent, and its answer did not arrive whole."""


def should_retry(req: Request, attempt: int, backoff: Backoff, err: BaseException) -> bool:
    """Whether the failed attempt (1-based) of req may be repeated."""
    if attempt > backoff.retries:
        return False
    if isinstance(err, Unsent):
        return True
    if isinstance(err, Lost):
        return req.retry >= Retry.LOST
    if isinstance(err, SandboxdError) and err.status in RETRY_STATUSES:
        return req.retry >= Retry.SERVER
    return False


def transport_error(req: Request, base: Base, err: BaseException) -> ConnectionFailed:
    cause = err.__cause__ or err
    what = "could not connect to" if isinstance(err, Unsent) else "lost the answer of"
    return ConnectionFailed(f"{req.method} {req.path}: {what} {base.url}: {cause}")


def decode(req: Request, status: int, ctype: str, body: bytes) -> Any:
    """The JSON document of a 2xx answer (its text when req.text), or raises the error of another."""
    if status // 100 != 2:
        err = error_from_response(status, body)
        if RESPONSE_HOOKS and not isinstance(err, UnexpectedResponse):
            observe(req.operation, status, json.loads(body))
        raise err
    if req.empty and status == 204:
        if RESPONSE_HOOKS:
            observe(req.operation, status, None)
        return None
    if req.text:
        if not ctype.startswith("text/plain"):
            raise UnexpectedResponse(f"{req.method} {req.path}: answer of type {ctype!r}, want text/plain", status=status)
        text = body.decode("utf-8", "replace")
        if RESPONSE_HOOKS:
            observe(req.operation, status, text)
        return text
    if not ctype.startswith("application/json"):
        raise UnexpectedResponse(f"{req.method} {req.path}: answer of type {ctype!r}, want JSON", status=status)
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise UnexpectedResponse(f"{req.method} {req.path}: answer is not JSON: {e}", status=status) from None
    if RESPONSE_HOOKS:
        observe(req.operation, status, doc)
    return doc


def check_stream(req: Request, status: int, ctype: str, body: Callable[[], bytes]) -> None:
    """Raises the error of a stream's answer that is not a 200 event stream."""
    if status != 200:
        decode(req, status, ctype, body())
        raise UnexpectedResponse(f"{req.method} {req.path}: answer {status}, want 200", status=status)
    if not ctype.startswith("text/event-stream"):
        raise UnexpectedResponse(f"{req.method} {req.path}: answer of type {ctype!r}, want text/event-stream")


def header_tokens(value: Optional[str]) -> Sequence[str]:
    return [t.strip().lower() for t in (value or "").split(",")]


def lower_keys(h: Mapping[str, str]) -> Mapping[str, str]:
    return {k.lower(): v for k, v in h.items()}
