"""Runs last: every operation of the contract the SDK calls had its answers checked against the
contract during this run (conformance.check, hooked into the decoding of every answer)."""

from __future__ import annotations

from conformance import OPERATIONS, validated


def test_every_operation_was_checked() -> None:
    missing = sorted(op for op in list(OPERATIONS) + ["streamEvents"] if validated[op] == 0)
    assert not missing, f"no answer of {missing} was checked against the contract"
