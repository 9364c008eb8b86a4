"""A Gaussian-process search above GP_TRIALS_WARNING trials is warned about at create,
naming searcher.max_trials; smaller ones and other samplers are not."""

from __future__ import annotations

from typing import Any

import pytest

from dauntless.config._fields import GP_TRIALS_WARNING, config_warnings


def _raw(searcher: dict[str, Any]) -> dict[str, Any]:
    return {
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": {"metric": "loss", **searcher},
    }


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "gp", "max_trials": GP_TRIALS_WARNING + 1},
        {"name": "adaptive_asha", "sampler": "gp", "max_trials": 1000, "max_time": 8},
    ],
)
def test_large_gp_search_warns_naming_max_trials(searcher: dict[str, Any]) -> None:
    [warning] = config_warnings(_raw(searcher))
    assert warning.startswith("searcher.max_trials: "), warning
    assert str(searcher["max_trials"]) in warning and "gp" in warning


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "gp", "max_trials": GP_TRIALS_WARNING},
        {"name": "tpe", "max_trials": 5000},
        {"name": "adaptive_asha", "sampler": "tpe", "max_trials": 5000, "max_time": 8},
    ],
)
def test_small_gp_and_other_samplers_do_not_warn(searcher: dict[str, Any]) -> None:
    assert config_warnings(_raw(searcher)) == []
