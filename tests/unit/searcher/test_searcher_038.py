"""Determined 0.38 search semantics: no max_length, and ASHA deciding from reported
validation metrics (reference §2.4 step 7)."""

from __future__ import annotations

import math

import pytest

from dauntless.config import parse_experiment_config, searcher_length
from dauntless.searcher import (
    AsyncHalvingSearch,
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    make_searcher,
    preview_document,
    restore_searcher,
    simulate,
)

HPS = {"lr": {"type": "double", "minval": 0.0, "maxval": 1.0}}


def config(searcher, entrypoint="python3 train.py", **extra):
    raw = {"entrypoint": entrypoint, "searcher": {"metric": "loss", **searcher}}
    raw["hyperparameters"] = extra.pop("hyperparameters", HPS)
    raw.update(extra)
    return parse_experiment_config(raw)


def asha(time_metric="epochs", **kw):
    fields = {
        "name": "adaptive_asha",
        "max_trials": 4,
        "max_time": 16,
        "time_metric": time_metric,
        "divisor": 4,
        "mode": "aggressive",
        "max_rungs": 3,
        "max_concurrent_trials": 4,
    }
    fields.update(kw)
    return config(fields)


@pytest.mark.parametrize("name", ["single", "random", "grid"])
def test_no_max_length_gives_no_operations(name):
    extra = {"max_trials": 3} if name == "random" else {}
    hps = {"x": {"type": "categorical", "vals": [1, 2, 3]}}
    cfg = config({"name": name, **extra}, hyperparameters=hps)
    assert searcher_length(cfg) is None
    s = make_searcher(cfg, 1)
    ops = s.initial_operations()
    creates = [op for op in ops if isinstance(op, Create)]
    assert len(creates) == (1 if name == "single" else 3)
    for c in creates:
        assert s.on_trial_created(c.request_id) == []
        # Validation metrics are ignored by these searchers.
        assert s.on_validation_metrics(c.request_id, {"loss": 1.0}) == []
    ops = []
    for c in creates:
        ops += s.on_trial_closed(c.request_id)  # the trial exited 0 on its own
    assert ops[-1] == Shutdown(cancel=False, failure=False) and s.progress() == 1.0


def test_max_length_is_still_honoured():
    cfg = config({"name": "single", "max_length": {"batches": 7}})
    s = make_searcher(cfg, 1)
    (create,) = s.initial_operations()
    assert s.on_trial_created(create.request_id) == [ValidateAfter(create.request_id, 7)]


def test_asha_038_stops_from_metrics_and_replaces():
    s = make_searcher(asha(bracket_rungs=[3]), 3)
    assert s.metric_mode and [b.lengths for b in s.brackets] == [(1, 4, 16)]
    creates = [op for op in s.initial_operations() if isinstance(op, Create)]
    assert len(creates) == 4
    a, b, c, d = (op.request_id for op in creates)
    for rid in (a, b, c, d):
        assert s.on_trial_created(rid) == []
        assert s.validation_times(rid) == [1.0, 4.0, 16.0]
    # Below the first threshold nothing is decided.
    assert s.on_validation_metrics(a, {"loss": 0.5, "epochs": 0.5}) == []
    # a reaches rung 0 first: kept (quota max(int(1/4),1) = 1) and promoted.
    assert s.on_validation_metrics(a, {"loss": 0.5, "epochs": 1}) == []
    # b is worse at rung 0: position 1 >= quota 1 -> stopped; the budget (4) is spent.
    assert s.on_validation_metrics(b, {"loss": 0.9, "epochs": 1.0}) == [Close(b)]
    # c ties a: 0.38 inserts before equal values, so c takes the first place.
    assert s.on_validation_metrics(c, {"loss": 0.5, "epochs": 1}) == []
    # A report past several thresholds climbs rung by rung: rung 0 (d is best) -> up;
    # rung 1 (first entry, quota 1) -> up to rung 2 (threshold 16 not reached).
    assert s.on_validation_metrics(d, {"loss": 0.1, "epochs": 4}) == []
    # The top rung stops the trial (done).
    assert s.on_validation_metrics(d, {"loss": 0.1, "epochs": 16}) == [Close(d)]
    # A stopped trial's further reports are ignored.
    assert s.on_validation_metrics(d, {"loss": 0.0, "epochs": 17}) == []
    ops = []
    for rid in (b, d):
        ops += s.on_trial_closed(rid)
    assert ops == []
    # a exits on its own (0) before being stopped: no replacement; c errors.
    assert s.on_trial_closed(a) == []
    ops = s.on_trial_exited_early(c, ExitedReason.ERRORED) + s.on_trial_closed(c)
    assert ops == [Shutdown(cancel=False, failure=False)]


def test_asha_038_progress_follows_rung_zero_then_ended_trials():
    s = make_searcher(asha(max_trials=2, max_concurrent_trials=2, bracket_rungs=[2]), 0)
    a, b = (op.request_id for op in s.initial_operations() if isinstance(op, Create))
    assert s.progress() == 0.0
    s.on_validation_metrics(a, {"loss": 0.1, "epochs": 4})
    assert s.progress() == pytest.approx(1 / 2.4)  # 1 rung-0 result of N = 2, over 1.2 N
    s.on_validation_metrics(b, {"loss": 0.5, "epochs": 4})  # rung 0 full; b stopped
    assert s.progress() == 0.0  # then: ended trials / N
    s.on_trial_closed(b)
    assert s.progress() == 0.5


def test_asha_038_replaces_stopped_trials_while_budget_lasts():
    s = make_searcher(asha(max_trials=6, max_concurrent_trials=2, bracket_rungs=[3]), 0)
    creates = [op for op in s.initial_operations() if isinstance(op, Create)]
    assert len(creates) == 2
    first, second = (op.request_id for op in creates)
    assert s.on_validation_metrics(first, {"loss": 0.1, "epochs": 1}) == []
    ops = s.on_validation_metrics(second, {"loss": 0.2, "epochs": 1})
    assert ops[0] == Close(second) and isinstance(ops[1], Create)


def test_asha_038_metric_errors_name_the_metric():
    s = make_searcher(asha(time_metric="my_steps"), 0)
    rid = next(op.request_id for op in s.initial_operations() if isinstance(op, Create))
    with pytest.raises(ValueError, match="'my_steps'.*searcher.time_metric"):
        s.on_validation_metrics(rid, {"loss": 1.0})
    with pytest.raises(ValueError, match="'loss'.*searcher.metric"):
        s.on_validation_metrics(rid, {"loss": "bad", "my_steps": 3})
    with pytest.raises(TypeError):
        s.on_validation_metrics(rid, [1, 2])


def test_asha_038_larger_is_better():
    s = make_searcher(
        config(
            {
                "name": "adaptive_asha",
                "max_trials": 2,
                "max_time": 4,
                "time_metric": "batches",
                "smaller_is_better": False,
                "divisor": 2,
                "mode": "aggressive",
                "max_concurrent_trials": 2,
            }
        ),
        0,
    )
    a, b = (op.request_id for op in s.initial_operations() if isinstance(op, Create))
    assert [p.lengths for p in s.brackets] == [(2, 4)]
    assert s.on_validation_metrics(a, {"loss": 0.9, "batches": 2}) == []
    assert s.on_validation_metrics(b, {"loss": 0.1, "batches": 2}) == [Close(b)]


def test_snapshot_round_trip_in_038_mode():
    cfg = asha(max_trials=8, max_concurrent_trials=2, bracket_rungs=[3])
    s = make_searcher(cfg, 5)
    rids = [op.request_id for op in s.initial_operations() if isinstance(op, Create)]
    s.on_validation_metrics(rids[0], {"loss": 0.3, "epochs": 1})
    copy = restore_searcher(cfg, s.snapshot())
    ops_a = s.on_validation_metrics(rids[1], {"loss": 0.7, "epochs": 1})
    ops_b = copy.on_validation_metrics(rids[1], {"loss": 0.7, "epochs": 1})
    assert ops_a == ops_b and ops_a[0] == Close(rids[1])
    assert copy.snapshot() == s.snapshot()


def test_async_halving_one_bracket_both_modes():
    cfg = config(
        {
            "name": "async_halving",
            "num_rungs": 3,
            "max_trials": 8,
            "max_time": 9,
            "time_metric": "user_metric",
            "max_concurrent_trials": 0,
        }
    )
    s = make_searcher(cfg, 0)
    assert isinstance(s, AsyncHalvingSearch) and s.metric_mode
    assert [(b.rungs, b.trials, b.max_concurrent, b.lengths) for b in s.brackets] == [
        (3, 8, 8, (1, 2, 9))
    ]
    legacy = config(
        {"name": "async_halving", "num_rungs": 2, "max_trials": 2, "max_length": {"batches": 8}}
    )
    s = make_searcher(legacy, 0)
    assert not s.metric_mode
    rid = s.initial_operations()[0].request_id
    assert s.on_trial_created(rid) == [ValidateAfter(rid, 2)]


def test_simulate_and_preview_cover_038_asha():
    cfg = asha(time_metric="epochs", max_trials=16, max_concurrent_trials=4)
    result = simulate(cfg, lambda hp, length, seed: hp["lr"] / (length + 1), 1)
    assert result.shutdown == Shutdown(cancel=False, failure=False)
    assert len(result.trials) == 16
    stopped = [t for t in result.trials if t.batches_trained < 16]
    assert stopped and any(t.batches_trained == 16 for t in result.trials)
    # Each trial validated at the thresholds it reached, and no further.
    for t in result.trials:
        assert [m for m, _ in t.metrics] == [x for x in (1, 4, 16) if x <= t.batches_trained]
    doc = preview_document(cfg, 1)
    assert doc["summary"]["length_unit"] == "epochs"
    assert doc["summary"]["brackets"][0]["unit"] == "epochs"
    # Without any length, the preview says the trial's code decides.
    doc = preview_document(config({"name": "random", "max_trials": 2}), 1)
    assert doc["summary"]["length_unit"] is None
    assert [t["lengths"] for t in doc["trials"]] == [[], []]


def test_simulate_random_without_max_length_uses_trial_length():
    cfg = config({"name": "random", "max_trials": 3, "max_concurrent_trials": 1})
    result = simulate(cfg, lambda hp, length, seed: math.sqrt(length), 0, trial_length=5)
    assert [t.batches_trained for t in result.trials] == [5, 5, 5]
    assert result.makespan == 15


def test_batches_on_a_trial_class_keeps_the_length_driven_mode():
    hps = {**HPS, "global_batch_size": 8}
    raw = {"name": "adaptive_asha", "max_trials": 4, "max_time": 16, "time_metric": "batches"}
    cfg = config(raw, entrypoint="model_def:Trial", hyperparameters=hps)
    assert searcher_length(cfg) is not None and not make_searcher(cfg, 0).metric_mode
    cfg = config(raw, entrypoint="python3 train.py", hyperparameters=hps)
    assert searcher_length(cfg) is None and make_searcher(cfg, 0).metric_mode


def test_reopen_trial_for_continue():
    cfg = config({"name": "single", "max_length": {"batches": 5}})
    s = make_searcher(cfg, 0)
    (create,) = s.initial_operations()
    rid = create.request_id
    s.on_trial_created(rid)
    s.on_validation_completed(rid, 1.0, 5)
    assert isinstance(s.on_trial_closed(rid)[-1], Shutdown)
    longer = config({"name": "single", "max_length": {"batches": 9}})
    s2 = restore_searcher(longer, s.snapshot())
    assert s2.reopen_trial(rid) == [ValidateAfter(rid, 9)] and not s2.is_shut_down
    assert s2.on_validation_completed(rid, 0.5, 9) == [Close(rid)]
    assert isinstance(s2.on_trial_closed(rid)[-1], Shutdown)
    # ASHA: an errored trial continues at its rung, its +inf placeholder forgotten.
    a = make_searcher(asha(max_trials=2, max_concurrent_trials=2, bracket_rungs=[2]), 0)
    r1, r2 = (op.request_id for op in a.initial_operations() if isinstance(op, Create))
    assert a.on_validation_metrics(r1, {"loss": 0.1, "epochs": 4}) == []  # to rung 1
    a.on_trial_exited_early(r1, ExitedReason.ERRORED)
    a.on_trial_closed(r1)
    assert [v for v, _ in a.rung_results(0, 1)] == [math.inf]
    assert a.reopen_trial(r1) == [] and a.rung_results(0, 1) == []
    assert a.on_validation_metrics(r1, {"loss": 0.1, "epochs": 16}) == [Close(r1)]
