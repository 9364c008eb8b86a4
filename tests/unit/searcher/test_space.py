"""Hyperparameter sampling (reference §2.1) and grid axes (reference §2.3)."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest

from dauntless.config import parse_hyperparameters
from dauntless.searcher import (
    GridSpace,
    SearcherConfigError,
    grid_axis,
    grid_points,
    round_half_away,
    sample_hparams,
)
from dauntless.searcher._rng import (
    draw_request_id,
    draw_trial_seed,
    new_rng,
    rng_from_json,
    rng_to_json,
)

HPS = parse_hyperparameters(
    {
        "lr": {"type": "log", "minval": -4, "maxval": -1},
        "layers": {"type": "int", "minval": 1, "maxval": 4},
        "dropout": {"type": "double", "minval": 0.1, "maxval": 0.5},
        "act": {"type": "categorical", "vals": ["relu", "tanh", {"name": "gelu"}]},
        "global_batch_size": 32,
        "opt": {"name": "sgd", "momentum": {"type": "double", "minval": 0.0, "maxval": 1.0}},
    }
)


def test_sample_follows_sorted_keys_and_documented_draws():
    hps = parse_hyperparameters(
        {
            "b": {"type": "double", "minval": 2.0, "maxval": 4.0},
            "a": {"type": "int", "minval": -3, "maxval": 3},
            "c": {"type": "categorical", "vals": ["x", "y", "z"]},
            "d": {"type": "log", "minval": 1, "maxval": 2, "base": 2},
        }
    )
    got = sample_hparams(hps, np.random.RandomState(7))
    rs = np.random.RandomState(7)
    a = -3 + rs.randint(0, 7)
    b = 2.0 + 2.0 * rs.random_sample()
    c = ["x", "y", "z"][rs.randint(0, 3)]
    d = 2 ** (1 + rs.random_sample())
    assert list(got) == ["a", "b", "c", "d"]
    assert got == {"a": a, "b": b, "c": c, "d": d}
    assert type(got["a"]) is int and type(got["b"]) is float


def test_sample_ranges_and_nesting():
    rng = np.random.RandomState(3)
    layers, acts = set(), set()
    for _ in range(400):
        h = sample_hparams(HPS, rng)
        assert list(h) == sorted(h) and list(h["opt"]) == ["momentum", "name"]
        assert 1e-4 <= h["lr"] < 1e-1
        assert 0.1 <= h["dropout"] < 0.5
        assert h["global_batch_size"] == 32 and h["opt"]["name"] == "sgd"
        layers.add(h["layers"])
        acts.add(str(h["act"]))
    assert layers == {1, 2, 3, 4}
    assert acts == {"relu", "tanh", "{'name': 'gelu'}"}


def test_sample_copies_values():
    h = sample_hparams(parse_hyperparameters({"k": [1, 2]}), np.random.RandomState(0))
    h["k"].append(3)
    assert sample_hparams(parse_hyperparameters({"k": [1, 2]}), np.random.RandomState(0)) == {
        "k": [1, 2]
    }


def test_sample_rejects_bad_arguments():
    with pytest.raises(TypeError, match="RandomState"):
        sample_hparams(HPS, 3)
    with pytest.raises(TypeError, match="hyperparameters.x"):
        sample_hparams({"x": 3}, np.random.RandomState(0))


def test_rng_json_round_trip_continues_identically():
    rng = new_rng(12345)
    rng.random_sample(17)
    copy = rng_from_json(rng_to_json(rng))
    assert [draw_request_id(rng) for _ in range(3)] == [draw_request_id(copy) for _ in range(3)]
    assert draw_trial_seed(rng) == draw_trial_seed(copy)


def test_request_ids_are_uuid4_and_seeds_in_range():
    rng = new_rng(0)
    ids = {draw_request_id(rng) for _ in range(100)}
    assert len(ids) == 100
    assert all(uuid.UUID(i).version == 4 for i in ids)
    assert all(0 <= draw_trial_seed(rng) <= 2**31 - 1 for _ in range(100))


def test_new_rng_validates_seed():
    with pytest.raises(ValueError):
        new_rng(-1)
    with pytest.raises(TypeError):
        new_rng("1")


def _axis(raw):
    return grid_axis(parse_hyperparameters({"h": raw})["h"], "hyperparameters.h")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"type": "int", "minval": 1, "maxval": 10, "count": 4}, [1, 4, 7, 10]),
        # 2.5 rounds away from zero (Go's math.Round), not to even.
        ({"type": "int", "minval": 0, "maxval": 5, "count": 3}, [0, 3, 5]),
        ({"type": "int", "minval": 0, "maxval": 5, "count": 1}, [3]),
        ({"type": "int", "minval": -5, "maxval": 0, "count": 3}, [-5, -3, 0]),
        # count above the range is capped at maxval - minval + 1.
        ({"type": "int", "minval": 1, "maxval": 3, "count": 10}, [1, 2, 3]),
        ({"type": "double", "minval": 0, "maxval": 1, "count": 3}, [0.0, 0.5, 1.0]),
        ({"type": "double", "minval": 0, "maxval": 1, "count": 1}, [0.5]),
        ({"type": "categorical", "vals": ["a", 2, None]}, ["a", 2, None]),
        ({"type": "const", "val": [1, 2]}, [[1, 2]]),
        (7, [7]),
    ],
)
def test_grid_axis(raw, expected):
    assert _axis(raw) == expected


def test_grid_log_axis():
    values = _axis({"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3})
    assert values == pytest.approx([1e-3, 1e-2, 1e-1])
    assert _axis({"type": "log", "minval": 1, "maxval": 3, "base": 2, "count": 1}) == [4.0]


@pytest.mark.parametrize("kind", ["int", "double", "log"])
def test_grid_needs_count(kind):
    hps = parse_hyperparameters({"opt": {"lr": {"type": kind, "minval": 1, "maxval": 3}}})
    with pytest.raises(SearcherConfigError, match="hyperparameters.opt.lr") as err:
        GridSpace(hps)
    assert err.value.field == "hyperparameters.opt.lr"
    assert "count" in str(err.value)


def test_grid_points_cartesian_first_name_slowest_nested_expanded():
    hps = parse_hyperparameters(
        {
            "opt": {
                "name": {"type": "categorical", "vals": ["sgd", "adam"]},
                "lr": {"type": "double", "minval": 0, "maxval": 1, "count": 2},
            },
            "a": {"type": "int", "minval": 1, "maxval": 2, "count": 2},
            "const": "x",
            "empty": {},
        }
    )
    points = grid_points(hps)
    assert len(points) == GridSpace(hps).size == 8
    assert [(p["a"], p["opt"]["lr"], p["opt"]["name"]) for p in points] == [
        (1, 0.0, "sgd"),
        (1, 0.0, "adam"),
        (1, 1.0, "sgd"),
        (1, 1.0, "adam"),
        (2, 0.0, "sgd"),
        (2, 0.0, "adam"),
        (2, 1.0, "sgd"),
        (2, 1.0, "adam"),
    ]
    assert all(p["const"] == "x" and p["empty"] == {} for p in points)


def test_grid_of_no_hyperparameters_is_one_empty_point():
    assert grid_points({}) == [{}]
    with pytest.raises(IndexError):
        GridSpace({}).point(1)


def test_round_half_away():
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, -2.5, 2.49)] == [1, 2, 3, -1, -3, 2]
    assert math.isclose(round_half_away(1e9 + 0.5), 1e9 + 1)
