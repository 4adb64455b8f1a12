"""Checks documents against their schemas in the contract, api/openapi.yaml, and in sandboxd's
extensions, api/extensions.yaml (JSON Schema 2020-12).

A pointer names a schema: ``#/components/...`` in the contract, ``extensions.yaml#/components/...`` in
the extensions (the ``schema`` of the classes of sandboxd.types and of sandboxd.extensions)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import jsonschema
import yaml

from sandboxd.types import _TS

API = Path(__file__).resolve().parents[3] / "api"
CONTRACT = API / "openapi.yaml"
EXTENSIONS = API / "extensions.yaml"
DOCS: Dict[str, Dict[str, Any]] = {
    "": yaml.safe_load(CONTRACT.read_text()),
    "extensions.yaml": yaml.safe_load(EXTENSIONS.read_text()),
}
DOC = DOCS[""]
"""The contract."""

_formats = jsonschema.FormatChecker()


def _date_time(v: object) -> bool:
    return not isinstance(v, str) or _TS.match(v) is not None


def _uri(v: object) -> bool:
    return not isinstance(v, str) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", v) is not None


# Registered by a call, not as decorators: mypy --strict refuses an untyped decorator.
_formats.checks("date-time")(_date_time)
_formats.checks("uri")(_uri)


def _escape(s: str) -> str:
    return s.replace("~", "~0").replace("/", "~1")


def split(pointer: str) -> Tuple[str, str]:
    """(document, pointer within it) of a pointer: ``"extensions.yaml#/a"`` is ("extensions.yaml", "#/a")."""
    doc, _, at = pointer.partition("#")
    if doc not in DOCS:
        raise KeyError(f"{pointer}: no document {doc!r}")
    return doc, "#" + at


def _operations() -> Dict[str, Tuple[str, str, str]]:
    out: Dict[str, Tuple[str, str, str]] = {}
    for name, doc in DOCS.items():
        for p, item in doc["paths"].items():
            for m, op in item.items():
                if isinstance(op, dict) and "operationId" in op:
                    assert op["operationId"] not in out, f"operationId {op['operationId']} twice"
                    out[op["operationId"]] = (name, p, m)
    return out


# operationId -> (document, path template, method)
OPERATIONS: Dict[str, Tuple[str, str, str]] = _operations()

EXTENSION_OPERATIONS = frozenset(
    {
        "getSandboxStats",
        "getMetrics",
        "checkpointSandbox",
        "listCheckpoints",
        "listVolumes",
        "createVolume",
        "getVolume",
        "deleteVolume",
        "getNetwork",
        "setNetwork",
        "streamNetworkDenials",
        "listImages",
        "pullImage",
        "importImage",
        "getImage",
        "removeImage",
        "pruneImages",
        "snapshotSandbox",
        "listSnapshots",
        "getSnapshot",
        "deleteSnapshot",
        "forkSnapshot",
        "buildTemplate",
        "listTemplates",
        "getTemplate",
        "deleteTemplate",
        "startProcess",
        "listProcesses",
        "getProcess",
        "waitProcess",
        "writeProcessStdin",
        "signalProcess",
        "streamProcessOutput",
        "resizeProcess",
        "createPreviewToken",
        "relayPort",
        "putRawFile",
        "getRawFile",
        "getUploadState",
        "watchFiles",
    }
)
"""The operations of api/extensions.yaml the SDK has methods for (sandboxd.extensions). Each must be in
the document, have its answers mirrored by classes and be checked during a run; the others are reached
through request(), whose answers are checked against the document too."""

EXTENSION_KEYS = frozenset({"sandboxd.lifetime", "sandboxd.volumes", "sandboxd.network"})
"""The sandboxd.* spec.extensions keys the SDK has a type for."""

_TEMPLATES = [
    (m.upper(), re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(p)) + "$"), op)
    for op, (_, p, m) in OPERATIONS.items()
]


def operation_of(method: str, p: str) -> Optional[str]:
    """The operationId of a request to p (without its query) with method, in either document."""
    for m, pattern, op in _TEMPLATES:
        if m == method and pattern.match(p):
            return op
    return None

_validators: Dict[str, Any] = {}
validated: Counter[str] = Counter()
"""How many documents of each operationId (and "streamEvents" events) were checked."""


def validator(pointer: str) -> Any:
    """A validator of the schema at pointer (a JSON pointer into the contract, "#/components/...", or
    into the extensions, "extensions.yaml#/components/...")."""
    v = _validators.get(pointer)
    if v is None:
        name, at = split(pointer)
        root = dict(DOCS[name])
        root["$ref"] = at
        v = jsonschema.Draft202012Validator(root, format_checker=_formats)
        _validators[pointer] = v
    return v


def resolve(name: str, node: Dict[str, Any], at: str) -> Tuple[Dict[str, Any], str]:
    """node, or what its $ref names within document name, with its pointer."""
    while "$ref" in node:
        at = node["$ref"]
        node = DOCS[name]
        for part in at[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node, at


def response_pointer(operation: str, status: int) -> Optional[str]:
    """The pointer of the schema of operation's answer with that status, or None when its document
    lists no such answer."""
    if operation == "streamEvents" and status == 200:
        return "#/components/schemas/SandboxEvent"
    if operation == "streamNetworkDenials" and status == 200:
        return "extensions.yaml#/components/schemas/NetworkDenial"  # each "denial" event's data
    if operation == "streamProcessOutput" and status == 200:
        return "extensions.yaml#/components/schemas/ProcessOutputEvent"  # each "output" event's data
    if operation == "watchFiles" and status == 200:
        return "extensions.yaml#/components/schemas/FileChangeEvent"  # each "change" event's data
    if operation == "streamHeartbeat" and status == 200:
        return "extensions.yaml#/components/schemas/StreamHeartbeatEvent"  # each "heartbeat" event's data
    if operation == "imageProgress" and status == 200:
        return "extensions.yaml#/components/schemas/ImageProgress"  # each "progress" event's data of a pull or import
    if operation == "imageStreamError" and status == 200:
        return ERROR_RESPONSE  # the "error" event's data of a pull or import
    if operation not in OPERATIONS:
        return None
    name, p, m = OPERATIONS[operation]
    responses = DOCS[name]["paths"][p][m]["responses"]
    if str(status) not in responses:
        return None
    at = f"#/paths/{_escape(p)}/{m}/responses/{status}"
    resp, at = resolve(name, responses[str(status)], at)
    content = resp.get("content", {})
    if not content:
        return NO_CONTENT
    media = "application/json" if "application/json" in content else next(iter(content))
    return f"{name}{at}/content/{_escape(media)}/schema"


STREAMED = frozenset({"streamEvents", "streamHeartbeat"})
"""The names of the events of streams whose data is checked and counted as an operation's answer."""

ERROR_RESPONSE = "#/components/schemas/ErrorResponse"
NO_CONTENT = "-"
"""The pointer of an answer documented without a body (a 204), which the client decodes as None."""


def check(operation: str, status: int, doc: Any) -> None:
    """Raises AssertionError unless doc is what its document says operation answers with status. An
    error status the document does not list for the operation (401, 405, 413 are the transport's) must
    still be an ErrorResponse; a 2xx it does not list is a failure."""
    if operation not in OPERATIONS and " " in operation:  # a request() call: "METHOD /path"
        method, p = operation.split(" ", 1)
        operation = operation_of(method, p.split("?", 1)[0]) or operation
    pointer = response_pointer(operation, status)
    if pointer is None:
        if status < 400:
            raise AssertionError(f"{operation}: the document has no {status} answer")
        pointer = ERROR_RESPONSE
    if pointer == NO_CONTENT:
        if doc is not None:
            raise AssertionError(f"{operation} {status}: the document says no body, got {doc!r}")
        validated[operation] += 1
        return
    errors = sorted(validator(pointer).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise AssertionError(
            f"{operation} {status}: answer does not match {pointer}: {e.message} at {list(e.path)}"
        )
    validated[operation if operation in OPERATIONS or operation in STREAMED else "custom"] += 1
