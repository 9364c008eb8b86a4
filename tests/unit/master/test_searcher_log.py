"""Issue 37: the searcher's events stored as rows after a snapshot compacted now and
then; a master that restores the searcher from them (a restart) decides exactly as one
that never stopped, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import yaml
from sqlalchemy import func, select

from dauntless.master.db import ExperimentRow, SearcherEventRow, TrialRow, TrialSearcherRecordRow
from dauntless.master.models import search, searcher_log

CONFIG = {
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "reproducibility": {"experiment_seed": 7},
    "searcher": {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 12,
        "max_length": {"batches": 16},
        "divisor": 2,
        "max_concurrent_trials": 3,
    },
}


def create(client) -> int:
    r = client.post(
        "/api/v1/experiments", data={"config": yaml.safe_dump(CONFIG), "activate": "true"}
    )
    assert r.status_code == 201, r.text
    return int(r.json()["experiment"]["id"])


def stored(ctx, exp_id):
    with ctx.db.read() as s:
        exp = s.get(ExperimentRow, exp_id)
        rows = s.scalar(
            select(func.count())
            .select_from(SearcherEventRow)
            .where(SearcherEventRow.experiment_id == exp_id)
        )
        return exp.state, exp.searcher_seq, exp.searcher_snapshot_seq, rows


def step(ctx, exp_id) -> bool:
    """Complete the open searcher operation of the experiment's oldest live trial (the
    metric a function of its hyperparameter); False when none is open."""
    with ctx.db.write() as s:
        trials = s.scalars(
            select(TrialRow)
            .where(TrialRow.experiment_id == exp_id, TrialRow.state == "ACTIVE")
            .order_by(TrialRow.id)
        ).all()
        for t in trials:
            op, done = t.searcher_op_length, t.searcher_completed_length
            if op is not None and (done is None or op > done):
                search.complete_operation(s, ctx, t.id, op, abs(t.hparams["x"] - 0.3))
                return True
    return False


def run(ctx, exp_id, restart_every: int | None) -> list[tuple]:
    """Drive the search to its end; ``restart_every``: forget the kept searcher after
    every that many events, so the next one restores it from the rows (what a master
    restart does)."""
    peak_rows = 0
    n = 0
    while step(ctx, exp_id):
        n += 1
        peak_rows = max(peak_rows, stored(ctx, exp_id)[3])
        if restart_every and n % restart_every == 0:
            search._cache(ctx).clear()
    assert n > 20
    with ctx.db.read() as s:
        trials = s.scalars(
            select(TrialRow).where(TrialRow.experiment_id == exp_id).order_by(TrialRow.id)
        ).all()
        return [
            (t.request_id, t.hparams["x"], t.state, t.searcher_completed_length) for t in trials
        ], peak_rows


def test_events_are_rows_and_a_restored_searcher_decides_as_the_kept_one(master, monkeypatch):
    client, ctx = master
    monkeypatch.setattr(searcher_log, "MIN_EVENTS_BEFORE_COMPACTION", 6)
    monkeypatch.setattr(searcher_log, "EVENTS_PER_TRIAL_BEFORE_COMPACTION", 1)
    kept_id, restored_id = create(client), create(client)
    kept, kept_peak = run(ctx, kept_id, restart_every=None)
    restored, restored_peak = run(ctx, restored_id, restart_every=3)

    assert restored == kept  # the same trials, hyperparameters, lengths and ends
    for exp_id in (kept_id, restored_id):
        state, seq, snapshot_seq, rows = stored(ctx, exp_id)
        assert state == "COMPLETED"
        assert seq >= snapshot_seq > 0
        assert rows == seq - snapshot_seq  # the rows are exactly the events after it
    # Events were stored as rows between compactions, and compacted away.
    assert 0 < kept_peak <= 12 + 6 and 0 < restored_peak <= 12 + 6
    with ctx.db.read() as s:
        a = search.searcher_for(ctx, s.get(ExperimentRow, kept_id), read_only=True)
        search._cache(ctx).clear()
        b = search.searcher_for(ctx, s.get(ExperimentRow, restored_id), read_only=True)
        assert a.snapshot() == b.snapshot()
        assert a.is_shut_down and b.is_shut_down


def test_an_ended_search_keeps_no_searcher_in_memory(master):
    """Issue 37 scope 2: the master keeps a running search's searcher (a record per
    trial) and drops it when the experiment ends; a later reader restores it."""
    client, ctx = master
    exp_id = create(client)
    assert step(ctx, exp_id)
    assert exp_id in search._cache(ctx)
    run(ctx, exp_id, restart_every=None)
    assert stored(ctx, exp_id)[0] == "COMPLETED"
    assert exp_id not in search._cache(ctx)
    with ctx.db.read() as s:
        assert search.searcher_for(ctx, s.get(ExperimentRow, exp_id), read_only=True).is_shut_down


def test_deleting_an_experiment_deletes_its_events(master, monkeypatch):
    client, ctx = master
    monkeypatch.setattr(searcher_log, "MIN_EVENTS_BEFORE_COMPACTION", 1000)
    exp_id = create(client)
    for _ in range(4):
        assert step(ctx, exp_id)
    assert stored(ctx, exp_id)[3] > 0
    assert client.post(f"/api/v1/experiments/{exp_id}/kill").status_code in (200, 204)
    r = client.delete(f"/api/v1/experiments/{exp_id}")
    assert r.status_code in (200, 202, 204), r.text
    with ctx.db.read() as s:
        left = s.scalar(
            select(func.count())
            .select_from(SearcherEventRow)
            .where(SearcherEventRow.experiment_id == exp_id)
        )
    assert left == 0


def test_the_masters_caches_are_bounded():
    """Issue 37 scope 2: per-allocation and per-experiment caches keep a fixed number of
    entries (the newest stored), however many trials ran."""
    from dauntless.master.context import BoundedDict

    cache: BoundedDict[int, int] = BoundedDict(3)
    cache.update({i: i for i in range(5)})
    cache[1] = 1
    cache.setdefault(9, 9)
    assert list(cache.items()) == [(4, 4), (1, 1), (9, 9)]
    with pytest.raises(ValueError, match="max_items"):
        BoundedDict(0)


RANDOM = {
    **CONFIG,
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 60,
        "max_length": {"batches": 4},
        "max_concurrent_trials": 3,
    },
}


def create_random(client) -> int:
    r = client.post(
        "/api/v1/experiments", data={"config": yaml.safe_dump(RANDOM), "activate": "true"}
    )
    assert r.status_code == 201, r.text
    return int(r.json()["experiment"]["id"])


def test_ended_trials_records_leave_the_masters_memory_and_the_snapshot(master, monkeypatch):
    """Issue 37 scope 2: a search's kept searcher and its stored snapshot hold the live
    trials' records only (and a fixed number of ended ones in memory); each ended
    trial's record is in its row. Fails when ended trials' records are kept again."""
    from dauntless.searcher import _base as searcher_base

    client, ctx = master
    monkeypatch.setattr(searcher_base, "RECENTLY_ENDED_KEPT", 4, raising=False)
    monkeypatch.setattr(searcher_log, "MIN_EVENTS_BEFORE_COMPACTION", 6)
    exp_id = create_random(client)
    most = 0
    for n in range(1, 1000):
        if not step(ctx, exp_id):
            break
        if n % 5 == 0 and stored(ctx, exp_id)[0] == "ACTIVE":
            searcher = search._cache(ctx)[exp_id][2]
            assert len(searcher.trials()) <= 3  # the live ones
            most = max(most, searcher.trials_in_memory)
            with ctx.db.read() as s:
                assert len(s.get(ExperimentRow, exp_id).searcher_state["trials"]) <= 3
    assert stored(ctx, exp_id)[0] == "COMPLETED"
    # live + waiting to be written + recently ended
    assert 3 < most <= 3 + searcher_log.ENDED_RECORDS_PER_WRITE + 4
    with ctx.db.read() as s:
        rows = s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id)).all()
        assert len(rows) == 60
        records = dict(
            s.execute(
                select(TrialSearcherRecordRow.request_id, TrialSearcherRecordRow.record).where(
                    TrialSearcherRecordRow.experiment_id == exp_id
                )
            ).all()
        )
        assert len(records) == 60
        for t in rows:
            record = records[t.request_id]
            assert record["request_id"] == t.request_id and record["ended"]
            assert record["hparams"] == t.hparams and record["seed"] == t.seed
            assert record["completed"] == t.searcher_completed_length == 4


def test_a_search_stored_before_archiving_continues_as_one_archived_throughout(master, monkeypatch):
    """A snapshot written by a master that kept every record (before issue 37 scope 2:
    ended records in the snapshot, none in the rows) is read by one that archives; its
    ended records move to their rows and the search goes on as it would have."""
    from dauntless.searcher._basic import RandomSearch

    client, ctx = master
    monkeypatch.setattr(searcher_log, "MIN_EVENTS_BEFORE_COMPACTION", 6)
    monkeypatch.setattr(searcher_log, "EVENTS_PER_TRIAL_BEFORE_COMPACTION", 1)
    throughout = create_random(client)
    expected = run(ctx, throughout, restart_every=None)[0]

    upgraded = create_random(client)
    with monkeypatch.context() as m:
        m.setattr(RandomSearch, "archivable", False)  # the master before the change
        for _ in range(30):
            assert step(ctx, upgraded)
        with ctx.db.read() as s:
            exp = s.get(ExperimentRow, upgraded)
            assert "archived" not in exp.searcher_state
            assert sum(t["ended"] for t in exp.searcher_state["trials"]) > 10
    search._cache(ctx).clear()  # the upgraded master restores it from the rows
    assert run(ctx, upgraded, restart_every=7)[0] == expected
    with ctx.db.read() as s:
        trials = set(
            s.scalars(select(TrialRow.request_id).where(TrialRow.experiment_id == upgraded))
        )
        stored_records = set(
            s.scalars(
                select(TrialSearcherRecordRow.request_id).where(
                    TrialSearcherRecordRow.experiment_id == upgraded
                )
            )
        )
        assert trials and stored_records == trials


def test_a_reopened_trial_is_not_replayed_from_its_later_record(master, monkeypatch):
    """``det experiment continue`` reopens an archived (canceled) trial, which then
    completes; a master restarted after that restores the searcher as it was: the reopen
    is in the snapshot, not an event that would read the record its completion wrote
    (exit None, so the cancel would never be taken back)."""
    from dauntless.searcher import _base as searcher_base

    client, ctx = master
    monkeypatch.setattr(searcher_base, "RECENTLY_ENDED_KEPT", 0)
    monkeypatch.setattr(searcher_log, "MIN_EVENTS_BEFORE_COMPACTION", 1000)
    config = {**RANDOM, "searcher": {**RANDOM["searcher"], "max_trials": 6}}
    r = client.post(
        "/api/v1/experiments", data={"config": yaml.safe_dump(config), "activate": "true"}
    )
    exp_id = int(r.json()["experiment"]["id"])
    with ctx.db.read() as s:
        first = s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id)).first()
        first_id, canceled = first.id, first.request_id
    assert client.post(f"/api/v1/trials/{first_id}/kill").status_code == 200
    while step(ctx, exp_id):
        pass
    assert stored(ctx, exp_id)[0] == "COMPLETED"
    r = client.post("/api/v1/experiments/continue", json={"id": exp_id})
    assert r.status_code == 200, r.text
    assert step(ctx, exp_id) and not step(ctx, exp_id)  # the reopened trial completes
    assert stored(ctx, exp_id)[0] == "COMPLETED"
    search._cache(ctx).clear()  # a restart
    with ctx.db.read() as s:
        searcher = search.searcher_for(ctx, s.get(ExperimentRow, exp_id), read_only=True)
        snapshot = searcher.snapshot()
        record = s.scalars(
            select(TrialSearcherRecordRow.record).where(
                TrialSearcherRecordRow.experiment_id == exp_id,
                TrialSearcherRecordRow.request_id == canceled,
            )
        ).first()
    assert record["exit"] is None and record["completed"] == 4
    assert snapshot["archived"] == {"count": 6, "exits": {}, "groups": [[0, 6, 0]]}
    assert searcher.is_shut_down and searcher.progress() == 1.0
