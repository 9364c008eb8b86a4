"""Issue 37 scope 2: a searcher that archives its ended trials' records
(``archive_ended``) keeps a bounded number of records in memory and decides exactly as
one that keeps them all, through snapshots, restores and reopens."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.searcher import _base as searcher_base
from dauntless.searcher import make_searcher, restore_searcher

from .test_snapshot import CONFIGS, Driver


class Archive:
    """The caller's store of ended trials' records (the master keeps them in rows)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.lookups = 0

    def lookup(self, request_id: str) -> dict | None:
        self.lookups += 1
        return self.rows.get(request_id)

    def take(self, searcher) -> None:
        for record in searcher.take_ended():
            self.rows[record["request_id"]] = json.loads(json.dumps(record))


class ReopeningDriver(Driver):
    """``Driver`` whose steps may also reopen an ended trial (``det experiment
    continue``), and which hands the archived records to ``archive`` after each step."""

    def __init__(self, searcher, archive: Archive | None = None) -> None:
        super().__init__(searcher)
        self.archive = archive
        self.ended: list[str] = []

    def step(self, choice, metric):
        live = set(self.targets) | set(self.closing)
        if choice % 5 == 4 and self.ended and self.searcher.can_reopen:
            rid = self.ended.pop((choice // 5) % len(self.ended))
            self.apply(self.searcher.reopen_trial(rid))
        else:
            super().step(choice, metric)
        now = set(self.targets) | set(self.closing)
        self.ended += sorted(live - now)
        if self.archive is not None:
            self.archive.take(self.searcher)


def round_trip(searcher, config, archive: Archive | None):
    restored = restore_searcher(config, json.loads(json.dumps(searcher.snapshot())))
    if archive is not None:
        restored.archive_ended(archive.lookup)
    return restored


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 2**31 - 1),
    steps=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.7, -3.0, math.nan])),
        min_size=10,
        max_size=120,
    ),
    start=st.floats(0.0, 0.6),
    cut=st.floats(0.0, 1.0),
    kept=st.sampled_from([0, 1, 256]),
)
def test_an_archiving_searcher_decides_as_one_that_keeps_every_record(
    kind, seed, steps, start, cut, kept
):
    """Archiving from step ``start`` on, a snapshot round trip at ``cut`` (both shares
    of the steps), and
    ``kept`` recently ended records (0: every ended trial named again is looked up)."""
    config = CONFIGS[kind]
    start, cut = int(start * len(steps)), int(cut * len(steps))
    original = ReopeningDriver(make_searcher(config, seed))
    original.apply(original.searcher.initial_operations())
    for step in steps:
        original.step(*step)

    archive = Archive()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(searcher_base, "RECENTLY_ENDED_KEPT", kept)
        archived = ReopeningDriver(make_searcher(config, seed))
        archived.apply(archived.searcher.initial_operations())
        for i, step in enumerate(steps):
            if i == start:
                archived.archive = archive
                archived.searcher.archive_ended(archive.lookup)
                archive.take(archived.searcher)
            if i == cut:
                archived.searcher = round_trip(archived.searcher, config, archived.archive)
            archived.step(*step)

    assert archived.log == original.log
    assert archived.searcher.progress() == original.searcher.progress()
    assert archived.searcher.is_shut_down == original.searcher.is_shut_down
    assert archived.searcher.trial_count == original.searcher.trial_count
    if archived.archive is not None:
        live = {t.request_id for t in original.searcher.trials() if not t.ended}
        assert {t.request_id for t in archived.searcher.trials()} == live
        assert archived.searcher.trials_in_memory <= len(live) + kept
        ended = {t.request_id: t.to_json() for t in original.searcher.trials() if t.ended}
        assert {rid: archive.rows[rid] for rid in ended} == ended


@pytest.mark.parametrize("kind", ["random", "asha", "grid"])
def test_records_in_memory_stay_bounded_as_trials_end(kind):
    """Fails when ended trials' records stay in the searcher again: after every trial
    ended it holds at most the recently ended ones; one that keeps them all holds
    every trial's."""
    config = CONFIGS[kind]
    for archiving in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(searcher_base, "RECENTLY_ENDED_KEPT", 2)
            archive = Archive()
            driver = ReopeningDriver(make_searcher(config, 5), archive if archiving else None)
            if archiving:
                driver.searcher.archive_ended(archive.lookup)
            driver.apply(driver.searcher.initial_operations())
            for i in range(3000):
                if driver.searcher.is_shut_down:
                    break
                driver.step(i * 7 + 3, float(i % 5))
            searcher = driver.searcher
            assert searcher.is_shut_down and searcher.trial_count > 4
            if archiving:
                assert searcher.trials_in_memory <= 2
                assert searcher.snapshot_trials == 0
                assert len(archive.rows) == searcher.trial_count
            else:
                assert searcher.trials_in_memory == searcher.trial_count


def test_an_event_about_an_unknown_trial_is_refused_when_archiving():
    archive = Archive()
    searcher = make_searcher(CONFIGS["random"], 1)
    searcher.archive_ended(archive.lookup)
    searcher.initial_operations()
    with pytest.raises(ValueError, match="not a trial this searcher created"):
        searcher.on_trial_closed("no-such-trial")
    assert archive.lookups == 1


def test_searchers_that_read_ended_records_do_not_archive():
    from dauntless.config import parse_experiment_config

    config = parse_experiment_config(
        {
            "searcher": {
                "name": "pbt",
                "metric": "loss",
                "population_size": 2,
                "num_rounds": 2,
                "length_per_round": {"batches": 10},
                "replace_function": {"truncate_fraction": 0.5},
                "explore_function": {"resample_probability": 0.5, "perturb_factor": 0.2},
            },
            "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
        }
    )
    searcher = make_searcher(config, 1)
    assert not searcher.archivable
    with pytest.raises(ValueError, match="cannot archive"):
        searcher.archive_ended(Archive().lookup)
