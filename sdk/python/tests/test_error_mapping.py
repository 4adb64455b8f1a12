"""The mapping of error codes to classes: by the code, never the status."""

from __future__ import annotations

import json
import re
from pathlib import Path

import sandboxd
from sandboxd.errors import SandboxdError, error_class, error_from_response

REPO = Path(__file__).resolve().parents[3]


def body(code: str, message: str = "m") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def test_every_code_of_the_daemon_has_its_class() -> None:
    # The daemon's own table of codes (the domain's error.go): each has a class of its own.
    src = (REPO / "error.go").read_text()
    codes = set(re.findall(r'ErrorCode = "([a-z_]+)"', src))
    assert "generation_conflict" in codes and "internal" in codes
    classes = {code: error_class(code) for code in codes}
    assert all(c is not SandboxdError for c in classes.values()), classes
    assert len(set(classes.values())) == len(codes)
    for code, cls in classes.items():
        assert cls.wire_code == code


def test_the_code_decides_not_the_status() -> None:
    for code, cls in [
        ("generation_conflict", sandboxd.GenerationConflict),
        ("idempotency_conflict", sandboxd.IdempotencyConflict),
        ("invalid_state", sandboxd.InvalidState),
    ]:
        e = error_from_response(409, body(code))
        assert type(e) is cls and e.status == 409 and e.code == code
    e = error_from_response(500, body("not_found"))
    assert type(e) is sandboxd.NotFound


def test_an_unknown_code_is_the_base_class() -> None:
    e = error_from_response(418, json.dumps({"error": {"code": "teapot", "message": "short", "hint": 1}}).encode())
    assert type(e) is SandboxdError
    assert (e.code, e.message, e.status, dict(e.details)) == ("teapot", "short", 418, {"hint": 1})
    assert str(e) == "teapot: short"


def test_a_body_that_is_no_error_response() -> None:
    e = error_from_response(502, b"<html>bad gateway</html>")
    assert type(e) is sandboxd.UnexpectedResponse and e.status == 502 and "bad gateway" in e.message


def test_generation_conflict_carries_the_current_generation() -> None:
    e = error_from_response(409, body("generation_conflict", "exec sbx_x: generation 2, current 3: generation conflict"))
    assert isinstance(e, sandboxd.GenerationConflict)
    assert (e.expected_generation, e.current_generation) == (2, 3)
    e = error_from_response(409, body("generation_conflict", "stale"))
    assert isinstance(e, sandboxd.GenerationConflict) and e.current_generation is None


def test_the_error_body_is_the_contracts() -> None:
    # error_from_response reads error.code and error.message, and keeps the other members as details.
    from conformance import DOC

    err = DOC["components"]["schemas"]["ErrorResponse"]["properties"]["error"]
    assert sorted(err["required"]) == sorted(err["properties"]) == ["code", "message"]
