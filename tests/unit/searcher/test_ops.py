"""Operations: validation and their JSON form."""

from __future__ import annotations

import json

import pytest

from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    operation_from_json,
    operation_to_json,
)


@pytest.mark.parametrize(
    "op",
    [
        Create("7d0f2c1e-0000-4000-8000-000000000000", {"lr": 0.1, "n": {"k": [1, 2]}}, 42),
        ValidateAfter("r1", 937),
        Close("r1"),
        Shutdown(),
        Shutdown(cancel=True),
        Shutdown(failure=True),
    ],
)
def test_json_round_trip(op):
    data = json.loads(json.dumps(operation_to_json(op)))
    assert operation_from_json(data) == op


def test_json_forms():
    assert operation_to_json(ValidateAfter("r", 5)) == {
        "type": "validate_after",
        "request_id": "r",
        "length": 5,
    }
    assert operation_to_json(Shutdown(cancel=True)) == {
        "type": "shutdown",
        "cancel": True,
        "failure": False,
    }


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"type": "stop", "request_id": "r"}, ValueError),
        ({"type": "close"}, ValueError),
        ({"type": "close", "request_id": "r", "extra": 1}, ValueError),
        ({"type": "validate_after", "request_id": "r", "length": 0}, ValueError),
        ({"type": "create", "request_id": "r", "hparams": [], "seed": 1}, TypeError),
        ({"type": "create", "request_id": "r", "hparams": {}, "seed": 2**31}, ValueError),
        (["close", "r"], TypeError),
    ],
)
def test_from_json_rejects(bad, error):
    with pytest.raises(error):
        operation_from_json(bad)


def test_operations_validate_fields():
    with pytest.raises(TypeError, match="request_id"):
        Close("")
    with pytest.raises(ValueError, match="length"):
        ValidateAfter("r", True)
    with pytest.raises(TypeError):
        Shutdown(cancel=1)
    with pytest.raises(TypeError):
        operation_to_json("close")


def test_exited_reason_values_match_wire_names():
    assert [r.value for r in ExitedReason] == ["ERRORED", "USER_CANCELED", "INVALID_HP"]
