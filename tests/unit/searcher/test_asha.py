"""adaptive_asha: bracket math (reference §2.4) and asynchronous promotions."""

from __future__ import annotations

import math

import pytest

from dauntless.searcher import (
    BracketPlan,
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    bracket_concurrency,
    bracket_rungs,
    bracket_trials,
    floor_log,
    insert_result,
    make_searcher,
    num_rungs,
    plan_brackets,
    promotion_quota,
    rung_lengths,
)


def asha(make_config, hps=None, **searcher):
    fields = {
        "name": "adaptive_asha",
        "max_trials": 16,
        "max_time": 937,
        "time_metric": "batches",
        **searcher,
    }
    return make_config(fields, hps or {"lr": {"type": "double", "minval": 0, "maxval": 1}})


def test_reference_example():
    # Determined's tutorial adaptive.yaml: N=16, T=937, D=4, standard.
    assert num_rungs(937, 16, 4.0, 5) == 3
    assert bracket_rungs("standard", 3) == [3, 2]
    assert bracket_trials([3, 2], 4.0, 16) == [12, 4]
    assert bracket_concurrency(16, 4.0, [12, 4]) == [8, 8]
    assert rung_lengths(937, 4.0, 3) == [58, 234, 937]
    assert rung_lengths(937, 4.0, 2) == [234, 937]
    assert plan_brackets(max_time=937, max_trials=16, divisor=4.0) == [
        BracketPlan(3, 12, 8, (58, 234, 937)),
        BracketPlan(2, 4, 8, (234, 937)),
    ]


def test_reference_example_searcher_starts_twelve(make_config, master_for):
    s = make_searcher(asha(make_config), 1)
    assert [b.trials for b in s.brackets] == [12, 4]
    m = master_for(s)
    m.start()
    assert len(m.created) == 12
    assert sorted(m.targets.values()) == [58] * 8 + [234] * 4


@pytest.mark.parametrize(
    "mode, expected",
    [("aggressive", [5]), ("standard", [5, 4, 3]), ("conservative", [5, 4, 3, 2, 1])],
)
def test_brackets_per_mode(mode, expected):
    assert bracket_rungs(mode, 5) == expected
    assert bracket_rungs(mode, 1) == [1]
    with pytest.raises(ValueError):
        bracket_rungs("wild", 3)


def test_bracket_math_edges():
    assert floor_log(1000, 10) == 3 and floor_log(999, 10) == 2 and floor_log(1, 4) == 0
    assert floor_log(64, 4.0) == 3
    with pytest.raises(ValueError):
        floor_log(0.5, 4)
    # Every bracket gets at least one trial; N not divided goes to the first.
    assert bracket_trials([3, 2, 1], 4.0, 2) == [1, 1, 1]
    assert sum(bracket_trials([5, 4, 3], 4.0, 100)) == 100
    # max_concurrent_trials 0: max(last bracket's trials, int(D)) each.
    assert bracket_concurrency(0, 4.0, [12, 4]) == [4, 4]
    assert bracket_concurrency(0, 3.0, [20, 9]) == [9, 9]
    # Fewer than one per bracket is raised to one each; remainder to the first ones.
    assert bracket_concurrency(1, 4.0, [5, 3, 1]) == [1, 1, 1]
    assert bracket_concurrency(5, 4.0, [5, 3]) == [3, 2]
    assert rung_lengths(3, 4.0, 3) == [1, 1, 3]
    assert plan_brackets(
        max_time=100, max_trials=9, divisor=3, mode="aggressive", bracket_rungs_override=[2, 4]
    ) == [BracketPlan(4, 8, 8, (3, 11, 33, 100)), BracketPlan(2, 1, 8, (33, 100))]


def test_quota_and_insert():
    assert [promotion_quota(n, 4.0) for n in (1, 3, 4, 7, 8, 9)] == [1, 1, 1, 1, 2, 2]
    values = [1.0, 3.0, 5.0]
    assert insert_result(values, 3.0) == 2  # after equal values
    assert values == [1.0, 3.0, 3.0, 5.0]


def hand_case(make_config, master_for, **searcher):
    # One bracket of 3 rungs (lengths 1, 2, 4 batches), D=2, 8 trials all at once.
    cfg = asha(
        make_config, max_trials=8, max_time=4, divisor=2, mode="aggressive", max_rungs=3, **searcher
    )
    s = make_searcher(cfg, 5)
    [plan] = s.brackets
    assert (plan.rungs, plan.trials, plan.lengths) == (3, 8, (1, 2, 4))
    m = master_for(s)
    m.start()
    return m, [c.request_id for c in m.created]


def test_promotions_hand_computed(make_config, master_for):
    m, t = hand_case(make_config, master_for)
    assert len(t) == 8 and set(m.targets.values()) == {1}
    # rung 0, reported in this order; quota = max(int(n/2), 1) of the n results so far.
    expected = {
        0: (5.0, True),  # [5]            quota 1, index 0
        1: (3.0, True),  # [3,5]          quota 1, index 0
        2: (4.0, False),  # [3,4,5]        quota 1, index 1
        3: (1.0, True),  # [1,3,4,5]      quota 2, index 0
        4: (6.0, False),  # [1,3,4,5,6]    quota 2, index 4
        5: (3.0, True),  # [1,3,3,4,5,6]  quota 3, index 2 (after the equal 3)
        6: (2.0, True),  # 7 results      quota 3, index 1
        7: (7.0, False),  # 8 results      quota 4, index 7
    }
    for i, (metric, promoted) in expected.items():
        ops = m.validate(t[i], metric)
        assert ops == ([ValidateAfter(t[i], 2)] if promoted else [Close(t[i])]), i
    # rung 1 (length 2): t0, t1, t3, t5, t6 report.
    assert m.validate(t[3], 0.5) == [ValidateAfter(t[3], 4)]  # [0.5]          quota 1
    assert m.validate(t[0], 0.9) == [Close(t[0])]  # [0.5,0.9]      quota 1
    assert m.validate(t[6], 0.4) == [ValidateAfter(t[6], 4)]  # [.4,.5,.9]     quota 1
    assert m.validate(t[1], 0.8) == [Close(t[1])]  # 4 results      quota 2
    assert m.validate(t[5], 0.1) == [ValidateAfter(t[5], 4)]  # index 0
    # Top rung: done, closed whatever the value.
    for i in (3, 6, 5):
        assert m.validate(t[i], 0.0) == [Close(t[i])]
    # All 8 trials were created at once: closing creates nothing; the last one shuts down.
    while len(m.closing) > 1:
        assert m.close(m.closing[0]) == []
    assert m.close(m.closing[0]) == [Shutdown()]


def test_larger_is_better_negates(make_config, master_for):
    m, t = hand_case(make_config, master_for, smaller_is_better=False)
    assert m.validate(t[0], 1.0) == [ValidateAfter(t[0], 2)]
    assert m.validate(t[1], 2.0) == [ValidateAfter(t[1], 2)]  # better: index 0
    assert m.validate(t[2], 1.5) == [Close(t[2])]
    assert m.validate(t[3], math.nan) == [Close(t[3])]  # NaN is the worst


def test_validation_past_several_rungs_clears_them(make_config, master_for):
    m, t = hand_case(make_config, master_for)
    s = m.searcher
    assert s.on_validation_completed(t[0], 1.0, 3) == [ValidateAfter(t[0], 4)]
    assert s.on_validation_completed(t[1], 1.0, 9) == [Close(t[1])]


def test_errors_count_as_worst_and_invalid_is_removed(make_config, master_for):
    m, t = hand_case(make_config, master_for)
    s = m.searcher
    m.exit_early(t[0], ExitedReason.ERRORED)
    assert s.rung_results(0, 0) == [(math.inf, t[0])]
    # 2 results: quota 1; 2.0 goes before inf: promoted.
    assert m.validate(t[1], 2.0) == [ValidateAfter(t[1], 2)]
    m.validate(t[2], 3.0)  # closed
    m.exit_early(t[2], ExitedReason.INVALID_HP)  # after Close: a normal end
    m.validate(t[3], 4.0)
    m.exit_early(t[3], ExitedReason.INVALID_HP)  # was already closed: normal end
    assert [rid for _, rid in s.rung_results(0, 0)] == [t[1], t[2], t[3], t[0]]
    ops = m.exit_early(t[4], ExitedReason.INVALID_HP)  # open trial: removed, replaced
    assert [type(o) for o in ops] == [Create, ValidateAfter]
    assert t[4] not in [rid for _, rid in s.rung_results(0, 0)]
    assert len(m.created) == 9


def test_replacement_keeps_bracket_concurrency(make_config, master_for):
    m, _ = hand_case(make_config, master_for, max_concurrent_trials=2)
    assert len(m.created) == 2
    while m.shutdown is None:
        if m.closing:
            ops = m.close(m.closing[0])
            assert len([o for o in ops if isinstance(o, Create)]) <= 1
        else:
            rid = next(iter(m.targets))
            m.validate(rid, float(len(m.log)))
        live = len(m.targets) + len(m.closing)
        assert live <= 2
    assert len(m.created) == 8
    assert m.searcher.progress() == 1.0


def test_trial_exiting_on_its_own_is_replaced(make_config, master_for):
    m, t = hand_case(make_config, master_for, max_concurrent_trials=1)
    ops = m.searcher.on_trial_closed(t[0])
    assert isinstance(ops[0], Create)


def test_time_metric_other_than_batches_is_the_038_mode(make_config):
    # Any time metric is accepted (0.38): the trials decide their length and the
    # searcher hands out no ValidateAfter.
    s = make_searcher(asha(make_config, time_metric="epochs"), 0)
    assert s.metric_mode
    created = [op for op in s.initial_operations() if isinstance(op, Create)]
    assert created and all(s.on_trial_created(c.request_id) == [] for c in created)


def test_max_length_in_records_converts_per_trial(make_config, master_for):
    cfg = make_config(
        {
            "name": "adaptive_asha",
            "max_trials": 4,
            "max_length": {"records": 6400},
            "divisor": 4,
            "mode": "aggressive",
            "max_rungs": 2,
        },
        {"global_batch_size": {"type": "categorical", "vals": [32, 64]}},
    )
    s = make_searcher(cfg, 0)
    assert s.brackets[0].lengths == (1600, 6400)
    m = master_for(s)
    m.start()
    for c in m.created:
        assert m.targets[c.request_id] == 1600 // c.hparams["global_batch_size"]
    rid = m.created[0].request_id
    gbs = m.created[0].hparams["global_batch_size"]
    assert m.validate(rid, 0.1) == [ValidateAfter(rid, 6400 // gbs)]


def test_progress_grows_to_one(make_config, master_for):
    m, t = hand_case(make_config, master_for)
    assert m.searcher.progress() == 0.0
    for i, rid in enumerate(t):
        m.validate(rid, float(i))
    assert m.searcher.progress() == 0.0
    m.close(t[7])
    assert m.searcher.progress() == pytest.approx(1 / 8)
