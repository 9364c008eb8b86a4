"""The body limits' parse (issue 37): orjson where it reads the text, and exactly what
``json.loads`` and :func:`dauntless.config.load_json` give or refuse everywhere."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from dauntless.config import MAX_DEPTH, LimitError, load_json
from dauntless.master import body_limits
from dauntless.master.body_limits import parse_json

READ_ALIKE = [
    b'{"a": 1, "a": 2}',  # the last of duplicate keys
    b'{"x": 0.1, "y": 1e-320, "z": -0.0, "w": 1E2, "v": 2.5e308}',
    b"[9223372036854775807, -9223372036854775808, 0, -0]",
    b'"\\u00e9\\ud83d\\ude00 caf\xc3\xa9"',
    b"  [true, false, null, {}, []]\n",
    b"NaN",  # orjson refuses these four; json.loads reads them
    b"[1e400, -Infinity]",
    b'"\\ud800"',
    '{"a": [1, 2]}'.encode("utf-16"),
    b"[1e19, -9.3e18, 9.2e18, 1.5]",  # a float past 2**63 is read by json.loads too
]

REFUSED_ALIKE = [
    b"{",
    b"[1,]",
    b"\xff",
    b"[9223372036854775808]",  # past a signed 64 bits: orjson reads it, the limit refuses
    b"[18446744073709551616]",  # orjson makes these a float; json.loads an int
    b'{"a": [-9223372036854775809]}',
    b"[1234567890123456789012345]",
    b"[" * 100 + b"]" * 100,
    b"[" * 5000 + b"]" * 5000,
]


@pytest.mark.parametrize("text", READ_ALIKE)
def test_values_are_those_of_json_loads(text: bytes) -> None:
    got, want = parse_json(text), json.loads(text)
    assert repr(got) == repr(want)  # also NaN and -0.0, and the types
    if isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)


@pytest.mark.parametrize("text", REFUSED_ALIKE)
def test_refusals_are_those_of_load_json(text: bytes) -> None:
    with pytest.raises(LimitError) as want:
        load_json(text)
    with pytest.raises(LimitError) as got:
        parse_json(text)
    assert (got.value.field, got.value.detail) == (want.value.field, want.value.detail)


def test_longer_than_the_limit_is_refused_unread() -> None:
    with pytest.raises(LimitError, match="at most 4"):
        parse_json(b"[1, 2]", max_bytes=4)


def _outcome(parse: Callable[[bytes], Any], text: bytes) -> tuple[str, str]:
    """What ``parse`` makes of ``text``: its value's repr, or its refusal."""
    try:
        return "value", repr(parse(text))
    except LimitError as exc:
        return "refused", f"{exc.field}: {exc.detail}"


def _nested(levels: int, inner: bytes) -> bytes:
    return b"[" * levels + inner + b"]" * levels


MIXED = [
    b"1e19",  # a lone float past 2**63: json.loads reads it too
    b"9223372036854775807",
    b"-9223372036854775809",
    b"[[1e19], 9223372036854775808]",  # a huge float and an integer out of range
    b'{"a": {"b": [1.5, 18446744073709551616]}, "c": 2}',
    b'{"a": {"b": [1.5, 1e300]}, "c": true}',
    _nested(MAX_DEPTH - 1, b"1"),
    _nested(MAX_DEPTH, b"1"),
    _nested(MAX_DEPTH + 1, b"1"),
    _nested(MAX_DEPTH, b"1e19"),
    _nested(MAX_DEPTH + 1, b"1e19"),
    _nested(MAX_DEPTH - 1, b"18446744073709551616"),
    _nested(MAX_DEPTH + 1, b"18446744073709551616"),
]


@pytest.mark.parametrize("text", MIXED)
def test_outcomes_near_the_limits_are_those_of_load_json(text: bytes) -> None:
    assert _outcome(parse_json, text) == _outcome(load_json, text)


def test_a_plain_report_is_walked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report within the limits is checked in one walk (issue 37): neither the
    huge-float scan nor check_tree runs; a body outside them still gets both."""
    calls: list[str] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            calls.append(name)
            return real(*args)

        return wrapper

    monkeypatch.setattr(
        body_limits, "_holds_huge_float", counted("huge", body_limits._holds_huge_float)
    )
    monkeypatch.setattr(body_limits, "check_tree", counted("tree", body_limits.check_tree))
    report = {
        "group": "training",
        "steps_completed": 7,
        "trial_run_id": 1,
        "metrics": {f"m{i}": i * 0.5 for i in range(256)} | {"n": 3, "ok": True, "s": None},
    }
    body = json.dumps({"reports": [report, report]}).encode()
    assert parse_json(body) == json.loads(body)
    assert calls == []
    with pytest.raises(LimitError, match="out of range"):
        parse_json(b'{"reports": [{"steps_completed": 9223372036854775808}]}')
    assert calls == ["huge", "tree"]
