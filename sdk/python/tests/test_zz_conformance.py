"""Runs last: every operation of the contract and of api/extensions.yaml had its answers checked
against its document during this run (conformance.check, hooked into the decoding of every answer)."""

from __future__ import annotations

from conformance import OPERATIONS, validated


def test_every_operation_was_checked() -> None:
    missing = sorted(op for op in list(OPERATIONS) + ["streamEvents"] if validated[op] == 0)
    assert not missing, f"no answer of {missing} was checked against its document"
