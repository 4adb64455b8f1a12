"""Checks documents against their schemas in the contract, api/openapi.yaml (JSON Schema 2020-12)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import jsonschema
import yaml

from sandboxd.types import _TS

CONTRACT = Path(__file__).resolve().parents[3] / "api" / "openapi.yaml"
DOC: Dict[str, Any] = yaml.safe_load(CONTRACT.read_text())

_formats = jsonschema.FormatChecker()


@_formats.checks("date-time")
def _date_time(v: object) -> bool:
    return not isinstance(v, str) or _TS.match(v) is not None


@_formats.checks("uri")
def _uri(v: object) -> bool:
    return not isinstance(v, str) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", v) is not None


def _escape(s: str) -> str:
    return s.replace("~", "~0").replace("/", "~1")


# operationId -> (path template, method)
OPERATIONS: Dict[str, Tuple[str, str]] = {
    op["operationId"]: (p, m) for p, item in DOC["paths"].items() for m, op in item.items() if isinstance(op, dict) and "operationId" in op
}

_validators: Dict[str, Any] = {}
validated: Counter[str] = Counter()
"""How many documents of each operationId (and "streamEvents" events) were checked."""


def validator(pointer: str) -> Any:
    """A validator of the schema at pointer (a JSON pointer into the contract, "#/components/...")."""
    v = _validators.get(pointer)
    if v is None:
        root = dict(DOC)
        root["$ref"] = pointer
        v = jsonschema.Draft202012Validator(root, format_checker=_formats)
        _validators[pointer] = v
    return v


def _resolve(node: Dict[str, Any], at: str) -> Tuple[Dict[str, Any], str]:
    while "$ref" in node:
        at = node["$ref"]
        node = DOC
        for part in at[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node, at


def response_pointer(operation: str, status: int) -> Optional[str]:
    """The pointer of the schema of operation's answer with that status, or None when the contract
    lists no such answer."""
    if operation == "streamEvents" and status == 200:
        return "#/components/schemas/SandboxEvent"
    if operation not in OPERATIONS:
        return None
    p, m = OPERATIONS[operation]
    responses = DOC["paths"][p][m]["responses"]
    if str(status) not in responses:
        return None
    at = f"#/paths/{_escape(p)}/{m}/responses/{status}"
    resp, at = _resolve(responses[str(status)], at)
    return f"{at}/content/{_escape('application/json')}/schema"


ERROR_RESPONSE = "#/components/schemas/ErrorResponse"


def check(operation: str, status: int, doc: Any) -> None:
    """Raises AssertionError unless doc is what the contract says operation answers with status. An
    error status the contract does not list for the operation (401, 405, 413 are the transport's) must
    still be an ErrorResponse; a 2xx it does not list is a failure."""
    pointer = response_pointer(operation, status)
    if pointer is None:
        if status < 400:
            raise AssertionError(f"{operation}: the contract has no {status} answer")
        pointer = ERROR_RESPONSE
    errors = sorted(validator(pointer).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise AssertionError(
            f"{operation} {status}: answer does not match {pointer}: {e.message} at {list(e.path)}"
        )
    validated[operation if operation in OPERATIONS or operation == "streamEvents" else "custom"] += 1
