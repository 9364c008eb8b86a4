"""The legacy harness (``module:Class``) under 0.38 ASHA configs: the loop settings it
derives when the config has no ``searcher.max_length``."""

from __future__ import annotations

from dauntless.config import parse_experiment_config
from dauntless.pytorch import Batch, Epoch
from dauntless.pytorch._settings import LoopSettings


def _config(extra=None, **searcher):
    return parse_experiment_config(
        {
            "entrypoint": "model_def:Trial",
            "hyperparameters": {"global_batch_size": 8},
            "records_per_epoch": 64,
            "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 16, **searcher},
            **(extra or {}),
        }
    )


def test_asha_on_epochs_trains_to_max_time_and_validates_at_the_lowest_rung():
    settings = LoopSettings.from_config(_config(max_time=16, time_metric="epochs"), 8)
    # R = min(5, floor(log4 16) + 1, floor(log4 16) + 1) = 3: rung 0 at 16 / 4**2 = 1 epoch.
    assert settings.max_length == Epoch(16)
    assert settings.validation_period == Epoch(1)
    resolved = settings.resolve(epoch_len=8)
    assert resolved.max_length == 128 and resolved.validation_period == 8


def test_an_explicit_validation_period_wins():
    cfg = _config({"min_validation_period": {"batches": 3}}, max_time=16, time_metric="epochs")
    settings = LoopSettings.from_config(cfg, 8)
    assert settings.validation_period == 3 and settings.max_length == Epoch(16)


def test_asha_on_batches_keeps_operations_and_no_cap():
    settings = LoopSettings.from_config(_config(max_time=100, time_metric="batches"), 8)
    assert settings.max_length is None  # the searcher's ValidateAfter lengths drive it
    assert settings.validation_period == 0 and settings.reporting_period != Batch(0)
