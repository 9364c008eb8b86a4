"""The in-memory search simulator and preview_search."""

from __future__ import annotations

from collections import Counter

import pytest

from dauntless import InvalidHP
from dauntless.searcher import ExitedReason, Shutdown, grid_points, preview_search, simulate

HPS = {
    "x": {"type": "double", "minval": -1, "maxval": 1},
    "n": {"type": "int", "minval": 1, "maxval": 4},
}


def quadratic(hparams, length, seed):
    return hparams["x"] ** 2 + 1.0 / length


def test_random_ten_thousand_trials(make_config):
    cfg = make_config(
        {
            "name": "random",
            "max_trials": 10_000,
            "max_concurrent_trials": 16,
            "max_length": {"batches": 50},
        },
        HPS,
    )
    result = simulate(cfg, quadratic, seed=1)
    assert len(result.trials) == 10_000
    assert result.total_batches == 10_000 * 50
    assert all(t.lengths == [50] and t.batches_trained == 50 for t in result.trials)
    assert result.shutdown == Shutdown() and result.progress == 1.0
    best = min(result.trials, key=lambda t: t.metrics[0][1])
    assert result.best is best and result.best_metric == best.metrics[0][1]
    # Unlimited cluster, 16 at a time: 625 waves of 50 batches.
    assert result.makespan == 625 * 50


def test_same_seed_same_search(make_config):
    cfg = make_config(
        {
            "name": "adaptive_asha",
            "max_trials": 30,
            "max_time": 81,
            "time_metric": "batches",
            "divisor": 3,
        },
        HPS,
    )
    a = simulate(cfg, quadratic, seed=5, max_concurrent=4)
    b = simulate(cfg, quadratic, seed=5, max_concurrent=4)
    c = simulate(cfg, quadratic, seed=6, max_concurrent=4)
    assert [(t.request_id, t.hparams, t.seed, t.lengths) for t in a.trials] == [
        (t.request_id, t.hparams, t.seed, t.lengths) for t in b.trials
    ]
    assert [t.hparams for t in a.trials] != [t.hparams for t in c.trials]


def test_asha_stops_early_and_trains_the_best_fully(make_config):
    cfg = make_config(
        {
            "name": "adaptive_asha",
            "max_trials": 64,
            "max_time": 256,
            "time_metric": "batches",
            "divisor": 4,
            "mode": "standard",
            "max_concurrent_trials": 8,
        },
        HPS,
    )
    result = simulate(cfg, lambda h, n, s: abs(h["x"]), seed=2)
    assert len(result.trials) == 64
    assert result.total_batches < 64 * 256 / 4
    for trial in result.trials:
        assert trial.lengths in (
            [4, 16, 64, 256][: len(trial.lengths)],
            [16, 64, 256][: len(trial.lengths)],
            [64, 256][: len(trial.lengths)],
        )
    # The best value of a rung is always promoted, so the overall best trains to the end.
    best = min(result.trials, key=lambda t: abs(t.hparams["x"]))
    assert best.lengths[-1] == 256 and result.best is best


def test_sequential_cluster(make_config):
    cfg = make_config({"name": "random", "max_trials": 5, "max_length": {"batches": 7}}, HPS)
    result = simulate(cfg, quadratic, seed=0, max_concurrent=1)
    assert result.makespan == result.total_batches == 35


def test_invalid_hp_from_the_objective(make_config):
    cfg = make_config({"name": "random", "max_trials": 20, "max_length": {"batches": 10}}, HPS)

    def objective(hparams, length, seed):
        if hparams["n"] == 1:
            raise InvalidHP("n=1 is not supported")
        return quadratic(hparams, length, seed)

    result = simulate(cfg, objective, seed=4)
    invalid = [t for t in result.trials if t.exited_reason is ExitedReason.INVALID_HP]
    assert invalid and all(t.hparams["n"] == 1 for t in invalid)
    assert len(result.trials) - len(invalid) == 20

    def always_invalid(hparams, length, seed):
        raise InvalidHP("never valid")

    with pytest.raises(RuntimeError, match="trial_limit"):
        simulate(cfg, always_invalid, seed=4, trial_limit=100)


def test_preview_random_and_grid(make_config):
    cfg = make_config(
        {"name": "random", "max_trials": 3, "max_length": {"records": 640}},
        {"global_batch_size": {"type": "categorical", "vals": [32, 64]}},
    )
    preview = preview_search(cfg, seed=9)
    assert len(preview) == 3
    assert all(lengths == [640 // h["global_batch_size"]] for h, lengths in preview)
    assert preview == preview_search(cfg, seed=9)

    grid = make_config(
        {"name": "grid", "max_length": {"batches": 10}},
        {
            "a": {"type": "int", "minval": 0, "maxval": 10, "count": 3},
            "b": {"type": "categorical", "vals": ["u", "v"]},
        },
    )
    preview = preview_search(grid)
    assert [h for h, _ in preview] == grid_points(grid.hyperparameters)[::-1]
    assert {tuple(lengths) for _, lengths in preview} == {(10,)}


def test_preview_asha_reference_example(make_config):
    cfg = make_config(
        {"name": "adaptive_asha", "max_trials": 16, "max_time": 937, "time_metric": "batches"}, HPS
    )
    preview = preview_search(cfg, seed=0)
    # Equal metrics: ties go to the earlier report, so one trial per rung is promoted.
    assert Counter(tuple(lengths) for _, lengths in preview) == {
        (58,): 11,
        (58, 234, 937): 1,
        (234,): 3,
        (234, 937): 1,
    }


def test_simulate_checks_arguments(make_config):
    cfg = make_config({"name": "single", "max_length": {"batches": 1}})
    with pytest.raises(ValueError, match="max_concurrent"):
        simulate(cfg, quadratic, seed=0, max_concurrent=0)
    with pytest.raises(ValueError, match="trial_limit"):
        simulate(cfg, quadratic, seed=0, trial_limit=0)
