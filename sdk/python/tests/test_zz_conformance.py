"""Runs last: every operation of the contract, and every one of api/extensions.yaml the SDK has methods
for, had its answers checked against its document during this run (conformance.check, hooked into the
decoding of every answer)."""

from __future__ import annotations

from conformance import EXTENSION_OPERATIONS, OPERATIONS, STREAMED, validated


def test_every_operation_was_checked() -> None:
    want = [op for op, (doc, _, _) in OPERATIONS.items() if doc == "" or op in EXTENSION_OPERATIONS]
    missing = sorted(op for op in want + sorted(STREAMED) if validated[op] == 0)
    assert not missing, f"no answer of {missing} was checked against its document"
