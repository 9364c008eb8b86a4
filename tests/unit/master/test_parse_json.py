"""The body limits' parse (issue 37): orjson where it reads the text, and exactly what
``json.loads`` and :func:`dauntless.config.load_json` give or refuse everywhere."""

from __future__ import annotations

import json
import math

import pytest

from dauntless.config import LimitError, load_json
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
