"""single, random and grid searchers: creation, concurrency, replacement, Shutdown."""

from __future__ import annotations

import pytest

from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    SearcherConfigError,
    Shutdown,
    ValidateAfter,
    grid_points,
    make_searcher,
)

HPS = {
    "lr": {"type": "log", "minval": -4, "maxval": -1},
    "n": {"type": "int", "minval": 1, "maxval": 100},
    "global_batch_size": {"type": "categorical", "vals": [16, 32]},
}


def random_config(make_config, max_trials=5, max_concurrent_trials=2, **length):
    return make_config(
        {
            "name": "random",
            "max_trials": max_trials,
            "max_concurrent_trials": max_concurrent_trials,
            "max_length": length or {"batches": 100},
        },
        HPS,
    )


def test_single_one_trial_validate_close_shutdown(make_config, master_for):
    cfg = make_config({"name": "single", "max_length": {"batches": 50}}, HPS)
    m = master_for(make_searcher(cfg, 3))
    ops = m.start()
    assert len(ops) == 2 and isinstance(ops[0], Create)
    rid = ops[0].request_id
    assert ops[1] == ValidateAfter(rid, 50)
    assert m.searcher.progress() == 0.0
    assert m.validate(rid, 0.5) == [Close(rid)]
    assert m.shutdown is None
    assert m.close(rid) == [Shutdown()]
    assert m.searcher.progress() == 1.0


def test_single_replaces_invalid_hp(make_config, master_for):
    cfg = make_config({"name": "single", "max_length": {"batches": 50}}, HPS)
    m = master_for(make_searcher(cfg, 3))
    first = m.start()[0].request_id
    ops = m.exit_early(first, ExitedReason.INVALID_HP)
    assert [type(o) for o in ops] == [Create, ValidateAfter]
    second = ops[0].request_id
    m.validate(second, 1.0)
    assert m.close(second) == [Shutdown()]


def test_random_initial_concurrency_and_replacement_on_close(make_config, master_for):
    m = master_for(make_searcher(random_config(make_config, 5, 2), 11))
    m.start()
    assert len(m.created) == 2
    a, b = (c.request_id for c in m.created)
    assert m.validate(a, 1.0) == [Close(a)]
    assert len(m.created) == 2  # the place frees only once the trial has ended
    ops = m.close(a)
    assert [type(o) for o in ops] == [Create, ValidateAfter]
    assert len(m.created) == 3


def test_random_all_at_once_when_unlimited(make_config, master_for):
    m = master_for(make_searcher(random_config(make_config, 7, 0), 11))
    m.start()
    assert len(m.created) == 7
    assert m.searcher.on_trial_closed(m.created[0].request_id) == []


def test_random_length_converts_through_the_trials_batch_size(make_config, master_for):
    cfg = random_config(make_config, 20, 0, records=1000)
    m = master_for(make_searcher(cfg, 5))
    m.start()
    for create in m.created:
        assert m.targets[create.request_id] == 1000 // create.hparams["global_batch_size"]
    assert {c.hparams["global_batch_size"] for c in m.created} == {16, 32}


def test_random_invalid_hp_replaced_and_not_counted(make_config, master_for):
    m = master_for(make_searcher(random_config(make_config, 3, 3), 2))
    m.start()
    first = [c.request_id for c in m.created]
    ops = m.exit_early(first[0], ExitedReason.INVALID_HP)
    assert isinstance(ops[0], Create)
    replacement = ops[0].request_id
    for rid in [*first[1:], replacement]:
        m.validate(rid, 0.1)
    # The invalid trial does not count: 3 valid trials, no more creates.
    assert sum(1 for o in m.log if o["type"] == "create") == 4
    for rid in list(m.closing)[:-1]:
        assert m.close(rid) == []
    assert m.close(m.closing[0]) == [Shutdown()]


def test_random_errored_counts_and_shutdown_flags(make_config, master_for):
    m = master_for(make_searcher(random_config(make_config, 2, 2), 2))
    m.start()
    a, b = (c.request_id for c in m.created)
    assert m.exit_early(a, ExitedReason.ERRORED) == []
    assert m.exit_early(b, ExitedReason.ERRORED) == [Shutdown(failure=True)]

    m = master_for(make_searcher(random_config(make_config, 2, 2), 2))
    m.start()
    a, b = (c.request_id for c in m.created)
    m.exit_early(a, ExitedReason.USER_CANCELED)
    assert m.exit_early(b, ExitedReason.USER_CANCELED) == [Shutdown(cancel=True)]

    m = master_for(make_searcher(random_config(make_config, 2, 2), 2))
    m.start()
    a, b = (c.request_id for c in m.created)
    m.exit_early(a, ExitedReason.ERRORED)
    m.validate(b, 0.3)
    assert m.close(b) == [Shutdown()]


def test_shutdown_only_after_every_trial_ended(make_config, master_for):
    m = master_for(make_searcher(random_config(make_config, 4, 2), 9))
    m.start()
    steps = 0
    while m.shutdown is None:
        rid = next(iter(m.targets)) if m.targets else None
        if rid is not None:
            m.validate(rid, float(steps))
        if m.closing:
            m.close(m.closing[0])
        steps += 1
        assert steps < 50
    assert len(m.created) == 4 and not m.targets and not m.closing
    # Nothing after Shutdown.
    assert m.searcher.on_trial_closed(m.created[0].request_id) == []
    assert m.searcher.progress() == 1.0


def test_events_after_end_are_ignored_and_unknown_ids_rejected(make_config, master_for):
    s = make_searcher(random_config(make_config, 3, 1), 4)
    rid = s.initial_operations()[0].request_id
    assert s.on_trial_created(rid) == [ValidateAfter(rid, 100)]
    assert s.on_trial_created(rid) == []
    assert s.current_operation(rid) == ValidateAfter(rid, 100)
    assert s.on_validation_completed(rid, 0.1, 40) == []  # intermediate validation
    assert s.on_validation_completed(rid, 0.1, 100) == [Close(rid)]
    assert s.current_operation(rid) is None
    assert s.on_validation_completed(rid, 0.1, 100) == []
    with pytest.raises(ValueError, match="not a trial"):
        s.on_trial_closed("nope")
    with pytest.raises(TypeError, match="metric"):
        s.on_validation_completed(rid, "0.1", 100)
    with pytest.raises(ValueError, match="reason"):
        s.on_trial_exited_early(rid, "CRASHED")
    with pytest.raises(RuntimeError):
        s.initial_operations()


def test_random_reproducible_from_seed(make_config):
    cfg = random_config(make_config, 10, 0)

    def creates(seed):
        return [
            (c.request_id, c.hparams, c.seed) for c in make_searcher(cfg, seed).initial_operations()
        ]

    assert creates(42) == creates(42)
    other = creates(43)
    assert all(a != b for a, b in zip(creates(42), other, strict=True))
    assert len({c[0] for c in creates(42)}) == 10


def test_grid_trials_pop_from_the_end(make_config, master_for):
    hps = {
        "a": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "b": {"type": "categorical", "vals": ["x", "y"]},
    }
    cfg = make_config(
        {"name": "grid", "max_length": {"batches": 10}, "max_concurrent_trials": 4}, hps
    )
    s = make_searcher(cfg, 0)
    assert s.grid_size == 6
    m = master_for(s)
    m.start()
    assert len(m.created) == 4
    while m.shutdown is None:
        rid = next(iter(m.targets))
        m.validate(rid, 1.0)
        m.close(rid)
    expected = grid_points(cfg.hyperparameters)
    assert [c.hparams for c in m.created] == expected[::-1]


def test_grid_invalid_points_not_retried(make_config, master_for):
    hps = {"a": {"type": "categorical", "vals": [1, 2, 3]}}
    cfg = make_config(
        {"name": "grid", "max_length": {"batches": 10}, "max_concurrent_trials": 0}, hps
    )
    m = master_for(make_searcher(cfg, 0))
    m.start()
    ids = [c.request_id for c in m.created]
    assert m.exit_early(ids[0], ExitedReason.INVALID_HP) == []
    m.validate(ids[1], 0.0)
    m.close(ids[1])
    assert m.exit_early(ids[2], ExitedReason.INVALID_HP) == [Shutdown()]
    assert len(m.created) == 3


def test_grid_missing_count_fails_at_make_searcher(make_config):
    cfg = make_config(
        {"name": "grid", "max_length": {"batches": 10}},
        {"lr": {"type": "double", "minval": 0.1, "maxval": 0.2}},
    )
    with pytest.raises(SearcherConfigError, match="hyperparameters.lr"):
        make_searcher(cfg, 0)


def test_make_searcher_checks_arguments(make_config):
    cfg = random_config(make_config)
    with pytest.raises(TypeError):
        make_searcher({"searcher": {}}, 0)
    with pytest.raises(ValueError):
        make_searcher(cfg, -5)
