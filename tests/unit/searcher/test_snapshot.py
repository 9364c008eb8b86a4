"""Snapshots: strict JSON, versioned, and a restored searcher decides exactly as the
original would have."""

from __future__ import annotations

import json
import math
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.config import parse_experiment_config
from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    Shutdown,
    ValidateAfter,
    make_searcher,
    operation_to_json,
    restore_searcher,
)


def build_config(searcher, hyperparameters, **extra):
    return parse_experiment_config(
        {"searcher": {"metric": "loss", **searcher}, "hyperparameters": hyperparameters, **extra}
    )


HPS = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "count": 3},
    "width": {"type": "int", "minval": 4, "maxval": 64, "count": 2},
    "global_batch_size": {"type": "categorical", "vals": [8, 16]},
    "opt": {"name": {"type": "categorical", "vals": ["sgd", "adam"]}},
}
CONFIGS = {
    "single": build_config({"name": "single", "max_length": {"records": 640}}, HPS),
    "random": build_config(
        {
            "name": "random",
            "max_trials": 6,
            "max_concurrent_trials": 3,
            "max_length": {"batches": 30},
        },
        HPS,
    ),
    "grid": build_config(
        {"name": "grid", "max_concurrent_trials": 4, "max_length": {"batches": 30}}, HPS
    ),
    "asha": build_config(
        {
            "name": "adaptive_asha",
            "max_trials": 12,
            "max_time": 64,
            "time_metric": "batches",
            "divisor": 2,
            "mode": "standard",
            "max_concurrent_trials": 5,
        },
        HPS,
    ),
    "asha_larger_better": build_config(
        {
            "name": "adaptive_asha",
            "max_trials": 9,
            "max_length": {"epochs": 4},
            "divisor": 3,
            "mode": "conservative",
            "max_concurrent_trials": 0,
            "smaller_is_better": False,
        },
        HPS,
        records_per_epoch=320,
    ),
}


REASONS = [ExitedReason.ERRORED, ExitedReason.INVALID_HP, ExitedReason.USER_CANCELED]


class Driver:
    """Plays a scripted cluster against a searcher; ``step`` picks the event."""

    def __init__(self, searcher):
        self.searcher = searcher
        self.log = []
        self.targets = {}
        self.closing = []

    def apply(self, ops):
        queue = deque(ops)
        while queue:
            op = queue.popleft()
            self.log.append(operation_to_json(op))
            if isinstance(op, Create):
                queue.extend(self.searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                self.targets[op.request_id] = op.length
            elif isinstance(op, Close):
                self.targets.pop(op.request_id, None)
                self.closing.append(op.request_id)

    def step(self, choice, metric):
        options = [("close", r) for r in self.closing] + [("run", r) for r in self.targets]
        if not options:
            return
        what, rid = options[choice % len(options)]
        mode = (choice // len(options)) % 8
        if what == "close":
            self.closing.remove(rid)
            self.apply(self.searcher.on_trial_closed(rid))
        elif mode < len(REASONS):
            del self.targets[rid]
            self.apply(
                self.searcher.on_trial_exited_early(rid, REASONS[mode])
                + self.searcher.on_trial_closed(rid)
            )
        else:
            self.apply(self.searcher.on_validation_completed(rid, metric, self.targets[rid]))


def round_trip(searcher, config):
    text = json.dumps(searcher.snapshot(), allow_nan=False)  # strict JSON
    return restore_searcher(config, json.loads(text))


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 2**31 - 1),
    steps=st.lists(
        st.tuples(
            st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.2, 0.7, -3.0, math.inf, math.nan])
        ),
        max_size=80,
    ),
    cut=st.integers(0, 80),
)
def test_restore_mid_search_gives_the_same_decisions(kind, seed, steps, cut):
    config = CONFIGS[kind]
    original = Driver(make_searcher(config, seed))
    original.apply(original.searcher.initial_operations())
    for step in steps:
        original.step(*step)

    resumed = Driver(make_searcher(config, seed))
    resumed.apply(resumed.searcher.initial_operations())
    for i, step in enumerate(steps):
        if i == cut:
            resumed.searcher = round_trip(resumed.searcher, config)
        resumed.step(*step)
    if cut >= len(steps):
        resumed.searcher = round_trip(resumed.searcher, config)

    assert resumed.log == original.log
    assert resumed.searcher.progress() == original.searcher.progress()
    assert 0.0 <= original.searcher.progress() <= 1.0
    assert resumed.searcher.snapshot() == original.searcher.snapshot()
    shutdowns = [op for op in original.log if op["type"] == "shutdown"]
    assert len(shutdowns) <= 1
    if shutdowns:
        assert original.log[-1]["type"] == "shutdown"
        assert not original.targets and not original.closing


def test_run_to_shutdown_then_restore(make_config):
    config = CONFIGS["asha"]
    driver = Driver(make_searcher(config, 3))
    driver.apply(driver.searcher.initial_operations())
    for i in range(2000):
        driver.step(i * 7 + 3, float(i % 5))
        if driver.log[-1]["type"] == "shutdown":
            break
    assert driver.log[-1]["type"] == "shutdown"
    restored = round_trip(driver.searcher, config)
    assert restored.is_shut_down and restored.progress() == 1.0


def test_snapshot_before_start(make_config):
    config = CONFIGS["random"]
    fresh = make_searcher(config, 8)
    restored = round_trip(fresh, config)
    assert restored.initial_operations() == fresh.initial_operations()
    assert isinstance(fresh.snapshot()["version"], int)


def test_restore_rejects_mismatches(make_config):
    snap = make_searcher(CONFIGS["grid"], 0).snapshot()
    with pytest.raises(ValueError, match="version"):
        restore_searcher(CONFIGS["grid"], {**snap, "version": 99})
    with pytest.raises(ValueError, match="'grid' searcher"):
        restore_searcher(CONFIGS["random"], snap)
    other_grid = make_config(
        {"name": "grid", "max_length": {"batches": 30}},
        {"a": {"type": "categorical", "vals": [1, 2]}},
    )
    with pytest.raises(ValueError, match="grid"):
        restore_searcher(other_grid, snap)
    asha = make_searcher(CONFIGS["asha"], 0).snapshot()
    bigger = make_config(
        {
            "name": "adaptive_asha",
            "max_trials": 40,
            "max_time": 64,
            "time_metric": "batches",
            "divisor": 2,
        },
        HPS,
    )
    with pytest.raises(ValueError, match="brackets"):
        restore_searcher(bigger, asha)
    with pytest.raises(ValueError, match="malformed"):
        restore_searcher(CONFIGS["grid"], {"version": 1, "searcher": "grid"})
    with pytest.raises(TypeError):
        restore_searcher(CONFIGS["grid"], None)


def test_shutdown_is_kept_in_snapshot(make_config, master_for):
    config = make_config({"name": "single", "max_length": {"batches": 5}})
    m = master_for(make_searcher(config, 1))
    rid = m.start()[0].request_id
    m.validate(rid, 1.0)
    assert m.close(rid) == [Shutdown()]
    restored = round_trip(m.searcher, config)
    assert restored.is_shut_down
    assert restored.on_trial_closed(rid) == []


def replayed(snapshot_text, events_text, config):
    """What the master restores (issue 37): the snapshot, then the events after it."""
    searcher = restore_searcher(config, json.loads(snapshot_text))
    searcher.replay_events(json.loads(events_text))
    return searcher


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 2**31 - 1),
    steps=st.lists(
        st.tuples(
            st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.7, -3.0, math.inf, math.nan])
        ),
        max_size=60,
    ),
    cut=st.integers(0, 60),
    resume=st.integers(0, 60),
)
def test_snapshot_plus_replayed_events_gives_the_same_decisions(kind, seed, steps, cut, resume):
    """A snapshot taken at ``cut`` plus the journaled events up to ``resume``, replayed
    into a restored searcher, decides from there exactly as the uninterrupted one."""
    config = CONFIGS[kind]
    original = Driver(make_searcher(config, seed))
    original.apply(original.searcher.initial_operations())
    for step in steps:
        original.step(*step)

    lo, hi = sorted((min(cut, len(steps)), min(resume, len(steps))))
    resumed = Driver(make_searcher(config, seed))
    resumed.searcher.start_journal()
    resumed.apply(resumed.searcher.initial_operations())
    for step in steps[:lo]:
        resumed.step(*step)
    snapshot_text = json.dumps(resumed.searcher.snapshot(), allow_nan=False)
    resumed.searcher.take_events()  # the events the snapshot holds
    for step in steps[lo:hi]:
        resumed.step(*step)
    # Python's JSON, as the rows of searcher_events hold it (a NaN metric stays NaN).
    events_text = json.dumps(resumed.searcher.take_events())
    resumed.searcher = replayed(snapshot_text, events_text, config)
    resumed.searcher.start_journal()
    for step in steps[hi:]:
        resumed.step(*step)

    assert resumed.log == original.log
    assert resumed.searcher.snapshot() == original.searcher.snapshot()


def test_journal_records_outer_events_only(make_config):
    config = CONFIGS["random"]
    searcher = make_searcher(config, 5)
    assert searcher.take_events() == []  # no journal: nothing recorded
    searcher.start_journal()
    creates = searcher.initial_operations()
    rid = creates[0].request_id
    searcher.on_trial_created(rid)
    searcher.on_validation_completed(rid, math.nan, 30)
    searcher.on_trial_exited_early(rid, ExitedReason.ERRORED)
    events = searcher.take_events()
    assert [e[0] for e in events] == [
        "initial_operations",
        "on_trial_created",
        "on_validation_completed",
        "on_trial_exited_early",
    ]
    assert events[3][1] == [rid, "ERRORED"]  # JSON data: the reason by value
    assert searcher.take_events() == []
    with pytest.raises(ValueError, match="not a searcher event"):
        make_searcher(config, 5).replay_events([["snapshot", [], {}]])
