"""Chart summaries kept at ingest: the same points as one M4 pass over every report,
whatever the order and batching of reports; kept in the database across a restart;
built once from the metrics rows of a database upgraded from before they existed. Each
test runs on SQLite and on a fresh PostgreSQL database."""

from __future__ import annotations

import math
import random
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from databases import fresh_postgres_database, postgres_available
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import column as sa_column
from sqlalchemy import delete, func, insert, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import table as sa_table

from dauntless.config import MasterConfig
from dauntless.master import fold_worker, metric_fold
from dauntless.master.app import create_app
from dauntless.master.db import Database, ExperimentRow, MetricRow, TrialRow, current_revision
from dauntless.master.db.engine import MIGRATIONS_DIR
from dauntless.master.db.models import MetricFoldPendingRow, MetricSummaryRow
from dauntless.master.metric_series import (
    CAP_BUCKETS,
    TIME_SERIES,
    M4Series,
    build_missing_summaries,
    fold_metric_reports,
    fold_pending,
    m4,
    queue_metric_folds,
)
from dauntless.master.models import metrics
from dauntless.master.testing import sign_in

T0 = 1_700_000_000.0  # reports' times in _store: T0 + batches (seconds)

CONFIG = """
name: curves
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8, lr: 0.1}
searcher: {name: single, metric: loss, smaller_is_better: true, max_length: {batches: 100000}}
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """A database URL: SQLite in tmp_path, or a fresh PostgreSQL database (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/dauntless.db"
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    with fresh_postgres_database() as url:
        yield url


def _insert_at_revision(s, orm_table, **values) -> int:
    """Insert a row the way an older master could: only the columns the database has at
    its revision (Python-side defaults of the ORM's columns that exist are applied; those
    of columns added later are not sent), returning the new id."""
    existing = {c["name"] for c in sa_inspect(s.connection()).get_columns(orm_table.name)}
    for col in orm_table.columns:
        default = col.default
        if col.name in existing and col.name not in values and default is not None:
            if getattr(default, "is_scalar", False):
                values[col.name] = default.arg
    light = sa_table(
        orm_table.name,
        *[sa_column(c.name, c.type) for c in orm_table.columns if c.name in existing],
    )
    return s.execute(insert(light).values(**values).returning(light.c.id)).scalar_one()


def _experiment(db: Database, trials: int) -> tuple[int, list[int]]:
    with db.write() as s:
        exp_id = _insert_at_revision(
            s,
            ExperimentRow.__table__,
            name="e",
            state="ACTIVE",
            config={"searcher": {"metric": "loss"}},
            original_config="",
            seed=0,
            start_time=time.time(),
        )
        ids = [
            _insert_at_revision(
                s,
                TrialRow.__table__,
                experiment_id=exp_id,
                request_id=uuid.uuid4().hex,
                state="ACTIVE",
                hparams={},
                seed=i,
                start_time=time.time(),
            )
            for i in range(trials)
        ]
        return exp_id, ids


def _store(db: Database, trial_id: int, group: str, reports, fold: bool = True) -> None:
    """Store reports as metrics rows and (``fold``) their summaries, in one transaction;
    each report's time is ``T0 + batches`` seconds (the same for every trial)."""
    with db.write() as s:
        s.add_all(
            MetricRow(trial_id=trial_id, kind=group, total_batches=b, values=v, reported_at=T0 + b)
            for b, v in reports
        )
        if fold:
            fold_metric_reports(s, trial_id, group, [(b, v, T0 + b) for b, v in reports])


def _stored(db: Database, trial_id: int, group: str, name: str) -> M4Series:
    with db.read() as s:
        row = s.get(MetricSummaryRow, (trial_id, group, name))
        assert row is not None, f"no summary of {name!r} for trial {trial_id}"
        return M4Series.restore(
            row.width,
            row.raw_points,
            np.frombuffer(row.batches, "<i8"),
            np.frombuffer(row.values, "<f8"),
        )


def _batch_m4(points: list[tuple[int, float]]) -> M4Series:
    """The summary one pass over every finite point gives."""
    x = np.array([p[0] for p in points], dtype=np.int64)
    y = np.array([p[1] for p in points], dtype=np.float64)
    width = 1
    while np.unique(x // width).size > CAP_BUCKETS:
        width *= 2
    kx, ky = m4(x, y, width)
    return M4Series.restore(width, len(points), kx, ky)


def _series_of(body: dict) -> dict[int, tuple[list[int], list[float]]]:
    return {s["trial_id"]: (s["batches"], s["values"]) for s in body["series"]}


def test_ingest_equals_one_pass_in_any_order(db_url):
    db = Database(db_url)
    db.migrate()
    try:
        _, (trial,) = _experiment(db, 1)
        rng = random.Random(7)
        batches = list(range(5, 20_005, 5))  # 4,000 reports
        loss = {b: math.sin(b / 900) + rng.gauss(0, 0.1) for b in batches}
        loss[batches[1717]] = 40.0  # a spike
        reports = []
        for b in batches:
            metrics = {"loss": loss[b], "lr": 0.1}
            if b % 35 == 0:
                metrics["lr"] = None  # a NaN, as finite_json stores it
            if b % 55 == 0:
                metrics["loss"], metrics["flag"], metrics["note"] = "n/a", True, "x"
            reports.append((b, metrics))
        rng.shuffle(reports)  # out of order, in batches of 1..400 reports
        i = 0
        while i < len(reports):
            step = rng.choice([1, 3, 50, 400])
            _store(db, trial, "training", reports[i : i + step])
            i += step

        want = _batch_m4([(b, loss[b]) for b in batches if b % 55])
        got = _stored(db, trial, "training", "loss")
        assert (got.width, got.raw_points) == (want.width, want.raw_points)
        assert got.x.tolist() == want.x.tolist() and got.y.tolist() == want.y.tolist()
        assert got.y.max() == 40.0 and got.x.size <= 4 * CAP_BUCKETS
        lr = _stored(db, trial, "training", "lr")
        assert lr.raw_points == len([b for b in batches if b % 35])
        with db.read() as s:
            names = set(
                s.scalars(select(MetricSummaryRow.name).where(MetricSummaryRow.trial_id == trial))
            )
            marker = s.get(MetricSummaryRow, (trial, "training", ""))
        # strings and bools are not charted; the reports' times are (TIME_SERIES)
        assert names == {"", "loss", "lr", TIME_SERIES}
        assert marker.width == 0 and marker.batches == b""
        times = _stored(db, trial, "training", TIME_SERIES)
        want = _batch_m4([(b, T0 + b) for b in batches])  # every report, whatever its values
        assert times.x.tolist() == want.x.tolist() and times.y.tolist() == want.y.tolist()
    finally:
        db.dispose()


def test_reports_through_the_master_survive_a_restart(db_url, tmp_path):
    config = MasterConfig(data_dir=str(tmp_path), db_url=db_url)
    app = create_app(config, run_loop=False)
    rng = np.random.default_rng(3)
    points = {b: float(v) for b, v in zip(range(10, 3010, 10), rng.normal(size=300), strict=True)}
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        r = client.post("/api/v1/experiments", data={"config": CONFIG, "activate": "false"})
        exp_id = r.json()["experiment"]["id"]
        with ctx.db.write() as s:
            trial = TrialRow(
                experiment_id=exp_id,
                request_id="t",
                state="ACTIVE",
                hparams={},
                seed=1,
                start_time=time.time(),
            )
            s.add(trial)
            s.flush()
            trial_id = trial.id
        order = sorted(points, key=lambda b: (b % 70, b))  # interleaved, not ascending
        for b in order:
            assert metrics.report_metrics(
                ctx, trial_id, "training", b, 0, {"loss": points[b]}, None
            )
        assert not metrics.report_metrics(ctx, trial_id, "training", 10, 0, {"loss": 99.0}, None)
        assert metrics.report_metrics(
            ctx, trial_id, "training", 3010, 0, {"loss": float("nan")}, None
        )
        url = f"/api/v1/experiments/{exp_id}/metrics"
        params = {"group": "training", "name": "loss", "max_points": 1024}
        before = client.get(url, params=params).json()
        assert [s["trial_id"] for s in before["series"]] == [trial_id]
        assert before["series"][0]["batches"] == sorted(points)  # short: whole, ascending
        assert before["series"][0]["values"] == [points[b] for b in sorted(points)]
        assert before["series"][0]["raw_points"] == 300
        small = client.get(url, params={**params, "max_points": 40}).json()["series"][0]
        x = np.array(sorted(points))
        y = np.array([points[b] for b in x])
        width = 1
        while np.unique(x // width).size > 10:  # 40 points: 10 buckets at most
            width *= 2
        wx, wy = m4(x, y, width)  # downsampling the summary == M4 of every point
        assert small["batches"] == wx.tolist() and small["values"] == wy.tolist()

    app = create_app(config, run_loop=False)  # a restarted master
    with TestClient(app) as client:
        sign_in(client)
        with app.state.ctx.db.write() as s:  # charts read only the summaries
            s.execute(delete(MetricRow))
        assert client.get(url, params=params).json() == before
        with app.state.ctx.db.write() as s:  # a deleted trial takes its summaries
            s.execute(delete(TrialRow).where(TrialRow.id == trial_id))
        with app.state.ctx.db.read() as s:
            assert (
                s.scalar(
                    select(func.count())
                    .select_from(MetricSummaryRow)
                    .where(MetricSummaryRow.trial_id == trial_id)
                )
                == 0
            )
        assert client.get(url, params=params).json()["series"] == []


def test_x_axis_by_epochs_and_time(tmp_path):
    """``x_axis=epochs|time``: each series carries the epochs the trial reported (null for
    a trial that reports none, without records_per_epoch) or its reports' times, at its
    points; a summary of report times missing (reports folded before it was kept) is
    rebuilt from the folded rows at the next fold."""
    app = create_app(MasterConfig(data_dir=str(tmp_path)), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        r = client.post("/api/v1/experiments", data={"config": CONFIG, "activate": "false"})
        exp_id = r.json()["experiment"]["id"]
        ids = []
        with ctx.db.write() as s:
            for name in ("a", "b"):
                trial = TrialRow(
                    experiment_id=exp_id,
                    request_id=name,
                    state="ACTIVE",
                    hparams={},
                    seed=1,
                    start_time=time.time(),
                )
                s.add(trial)
                s.flush()
                ids.append(trial.id)
        a, b = ids
        for batches in range(10, 110, 10):
            metrics.report_metrics(
                ctx,
                a,
                "validation",
                batches,
                0,
                {"loss": 1 / batches, "epochs": batches / 20},
                None,
            )
            metrics.report_metrics(ctx, b, "validation", batches, 0, {"loss": 2 / batches}, None)
        url = f"/api/v1/experiments/{exp_id}/metrics"
        plain = client.get(url, params={"name": "loss"}).json()
        assert plain["x_axis"] == "batches"
        assert all("epochs" not in s and "timestamps" not in s for s in plain["series"])

        epochs = client.get(url, params={"name": "loss", "x_axis": "epochs"}).json()
        by_trial = {s["trial_id"]: s for s in epochs["series"]}
        assert epochs["x_axis"] == "epochs"
        assert by_trial[a]["epochs"] == [x / 20 for x in by_trial[a]["batches"]]
        assert by_trial[b]["epochs"] is None  # no epochs reported, no records_per_epoch

        def reported(trial_id: int) -> list[float]:
            rows = client.get(f"/api/v1/trials/{trial_id}/metrics", params={"group": "validation"})
            return [m["reported_at"] for m in rows.json()["metrics"]]

        timed = client.get(url, params={"name": "loss", "x_axis": "time"}).json()
        for s in timed["series"]:
            assert s["timestamps"] == reported(s["trial_id"])  # short series: every point
            assert s["timestamps"] == sorted(s["timestamps"])

        # Trial b's report times as an older master left them: no summary of them.
        c = MetricSummaryRow.__table__.c
        with ctx.db.write() as s:
            s.execute(delete(MetricSummaryRow).where(c.trial_id == b, c.name == TIME_SERIES))
        missing = client.get(url, params={"name": "loss", "x_axis": "time"}).json()
        assert {s["trial_id"]: s["timestamps"] for s in missing["series"]}[b] is None
        metrics.report_metrics(ctx, b, "validation", 110, 0, {"loss": 0.01}, None)
        rebuilt = client.get(url, params={"name": "loss", "x_axis": "time"}).json()
        assert {s["trial_id"]: s["timestamps"] for s in rebuilt["series"]}[b] == reported(b)

        bad = client.get(url, params={"name": "loss", "x_axis": "steps"})
        assert bad.status_code in (400, 422) and "x_axis" in bad.text
        # The summary of times is no metric: not listed among a trial's series.
        names = client.get(f"/api/v1/trials/{b}/metrics", params={"downsample": 64}).json()
        assert {s["name"] for s in names["series"]} == {"loss"}


def _database_at_0001(db_url: str) -> Database:
    db = Database(db_url)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = db.engine
    command.upgrade(cfg, "0001")
    assert current_revision(db.engine) == "0001"
    return db


def test_upgraded_database_is_summarised_once(db_url, tmp_path):
    db = _database_at_0001(db_url)
    try:
        exp_id, trials = _experiment(db, 3)
        old = {t: [(b, {"loss": 1.0 / b + t}) for b in range(1, 2001)] for t in trials}
        # a NaN as an older master stored it on SQLite (the bare word), or a null
        nan = float("nan") if db.engine.dialect.name == "sqlite" else None
        for t in trials[:2]:  # as a master before 0002 did
            _store(db, t, "training", old[t] + [(2500, {"loss": nan, "acc": "x"})], fold=False)
        _store(db, trials[0], "validation", [(100, {"loss": 0.5})], fold=False)
    finally:
        db.dispose()

    app = create_app(MasterConfig(data_dir=str(tmp_path), db_url=db_url), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        db = app.state.ctx.db
        assert current_revision(db.engine) != "0001"
        # trial 1 reports again before any chart: its old rows are summarised first
        _store(db, trials[1], "training", [(2001, {"loss": -5.0})])
        url = f"/api/v1/experiments/{exp_id}/metrics"
        params = {"group": "training", "name": "loss", "max_points": 1024}
        body = client.get(url, params=params).json()  # trial 0: built from rows, once
        series = _series_of(body)
        assert list(series) == trials[:2]
        for t, pts in (
            (trials[0], old[trials[0]]),
            (trials[1], old[trials[1]] + [(2001, {"loss": -5.0})]),
        ):
            want = _batch_m4([(b, v["loss"]) for b, v in pts])
            assert series[t] == (want.x.tolist(), want.y.tolist())
        assert min(series[trials[1]][1]) == -5.0
        with db.read() as s:
            markers = set(
                s.scalars(
                    select(MetricSummaryRow.trial_id).where(
                        MetricSummaryRow.kind == "training", MetricSummaryRow.name == ""
                    )
                )
            )
        assert markers == set(trials)  # the trial without reports is marked too
        assert build_missing_summaries(db, trials, "training") == []  # nothing left to do
        # later reports fold into the stored summaries; the rows are not read again
        _store(db, trials[2], "training", [(5, {"loss": 3.0})])
        with db.write() as s:
            s.execute(delete(MetricRow).where(MetricRow.kind == "training"))
        again = _series_of(client.get(url, params=params).json())
        assert again[trials[0]] == series[trials[0]]
        assert again[trials[2]] == ([5], [3.0])
        # the other group is built on its own first use
        val = client.get(url, params={"group": "validation", "name": "loss"}).json()
        assert _series_of(val) == {trials[0]: ([100], [0.5])}


def test_bad_reports_are_refused_with_the_argument_named(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.db")
    db.migrate()
    try:
        _, (trial,) = _experiment(db, 1)
        with db.write() as s:
            fold_metric_reports(s, trial, "training", [])  # nothing to do
            with pytest.raises(ValueError, match="group"):
                fold_metric_reports(s, trial, "", [(1, {"loss": 1.0})])
            with pytest.raises(ValueError, match="total_batches"):
                fold_metric_reports(s, trial, "training", [(-1, {"loss": 1.0})])
            with pytest.raises(ValueError, match="twice"):
                fold_metric_reports(s, trial, "training", [(1, {"a": 1.0}), (1, {"a": 2.0})])
            with pytest.raises(TypeError, match="mapping"):
                fold_metric_reports(s, trial, "training", [(1, [1.0])])
        with db.read() as s:
            assert s.scalar(select(func.count()).select_from(MetricSummaryRow)) == 0
        with pytest.raises(ValueError, match="group"):
            build_missing_summaries(db, [trial], "x" * 17)
        with pytest.raises(ValueError, match="power of two"):
            M4Series.restore(3, 1, np.array([1]), np.array([1.0]))
        with pytest.raises(ValueError, match="raw_points"):
            M4Series.restore(2, 0, np.array([1]), np.array([1.0]))
    finally:
        db.dispose()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=600),
    st.integers(1, 40),
    st.sampled_from([1, 3, 7]),
    st.integers(1, 8),
)
def test_in_order_reports_fold_like_one_pass(values, chunk, stride, cap):
    """Reports in order (the common case, folded without reducing the older buckets
    again) give what one pass over every point gives, width included."""
    x = np.arange(1, len(values) + 1, dtype=np.int64) * stride
    y = np.array(values)
    summary = M4Series(cap_buckets=cap)
    for i in range(0, x.size, chunk):
        summary.extend(x[i : i + chunk], y[i : i + chunk])
    width = 1
    while np.unique(x // width).size > cap:
        width *= 2
    wx, wy = m4(x, y, width)
    assert summary.width == width and summary.raw_points == x.size
    assert summary.x.tolist() == wx.tolist() and summary.y.tolist() == wy.tolist()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, math.inf]), min_size=1, max_size=400),
    st.sampled_from([1, 2, 5]),
    st.integers(1, 6),
)
def test_one_point_at_a_time_folds_like_one_pass(values, stride, cap):
    """One point per call, as a report adds to each metric (the plain-Python path), with
    many tied values and some non-finite ones: the same summary as one pass."""
    summary = M4Series(cap_buckets=cap)
    xs, ys = [], []
    for i, v in enumerate(values):
        summary.extend([(i + 1) * stride], [v])
        if math.isfinite(v):
            xs.append((i + 1) * stride)
            ys.append(v)
    assert summary.raw_points == len(xs)
    if not xs:
        assert summary.x.size == 0
        return
    x, y = np.array(xs, dtype=np.int64), np.array(ys)
    width = 1
    while np.unique(x // width).size > cap:
        width *= 2
    wx, wy = m4(x, y, width)
    assert summary.width == width
    assert summary.x.tolist() == wx.tolist() and summary.y.tolist() == wy.tolist()
    assert summary.x.dtype == np.int64 and summary.y.dtype == np.float64


def _summary_rows(db: Database, trial_id: int) -> dict[tuple[str, str], tuple]:
    """Every stored summary column of a trial, by (group, name)."""
    c = MetricSummaryRow.__table__.c
    with db.read() as s:
        return {
            (kind, name): rest
            for kind, name, *rest in s.execute(
                select(c.kind, c.name, c.width, c.raw_points, c.batches, c["values"]).where(
                    c.trial_id == trial_id
                )
            )
        }


def _pending_count(db: Database) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(MetricFoldPendingRow)) or 0


@pytest.mark.parametrize("seed", [1, 2])
def test_lazy_fold_equals_eager_fold(db_url, monkeypatch, seed):
    """Reports stored unfolded and folded later in bulk (in chunks smaller than what is
    pending, at random moments) give summaries byte-identical to folding each
    transaction's reports as it is stored; the pending queue ends empty."""
    monkeypatch.setattr(metric_fold, "FOLD_CHUNK", 37)  # several chunks per fold
    db = Database(db_url)
    db.migrate()
    try:
        _, (eager, lazy) = _experiment(db, 2)
        rng = random.Random(seed)
        reports = {"training": [], "validation": []}
        for b in range(1, 1501):
            group = "validation" if b % 10 == 0 else "training"
            metrics = {f"m{i}": rng.choice([rng.gauss(0, 1), 0.0, 1.0]) for i in range(6)}
            metrics["m0"] = None if b % 17 == 0 else metrics["m0"]  # a NaN as stored
            metrics["note"] = "x" if b % 23 == 0 else metrics["m1"]
            reports[group].append((b, metrics))
        todo = [(g, r) for g, rs in reports.items() for r in rs]
        rng.shuffle(todo)  # out of order, in transactions of 1..120 reports
        i = 0
        while i < len(todo):
            step = rng.choice([1, 5, 120])
            chunk = todo[i : i + step]
            i += step
            for group in ("training", "validation"):
                mine = [r for g, r in chunk if g == group]
                if not mine:
                    continue
                _store(db, eager, group, mine)
                _store(db, lazy, group, mine, fold=False)
                with db.write() as s:
                    queue_metric_folds(s, lazy, group, [b for b, _ in mine])
            if rng.random() < 0.2:
                fold_pending(db, [lazy])
        assert _pending_count(db) > 0
        assert fold_pending(db) > 0
        assert _pending_count(db) == 0
        want, got = _summary_rows(db, eager), _summary_rows(db, lazy)
        assert set(got) == set(want) and len(want) > 10
        for key in want:
            assert got[key] == want[key], key
        assert fold_pending(db) == 0  # nothing left: folding again changes nothing
        assert _summary_rows(db, lazy) == got
    finally:
        db.dispose()


def test_reads_after_acknowledged_reports_see_every_one(db_url, tmp_path):
    """Every chart and series read answers with every report acknowledged before it,
    whether the background fold ran yet or not; a report over the HTTP route is
    acknowledged only once its row and its pending row are committed."""
    config = MasterConfig(data_dir=str(tmp_path), db_url=db_url)
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        r = client.post("/api/v1/experiments", data={"config": CONFIG, "activate": "false"})
        exp_id = r.json()["experiment"]["id"]
        (trial_id,) = _experiment_trials(ctx.db, exp_id, 1)
        url = f"/api/v1/experiments/{exp_id}/metrics"
        params = {"group": "training", "name": "loss", "max_points": 1024}
        rng = random.Random(5)
        sent: dict[int, float] = {}
        b = 0
        for _ in range(12):
            batch = []
            for _ in range(rng.choice([1, 4, 30])):
                b += rng.choice([1, 2])
                sent[b] = rng.gauss(0, 1)
                batch.append(
                    {
                        "group": "training",
                        "steps_completed": b,
                        "metrics": {"loss": sent[b], "acc": 1.0},
                    }
                )
            r = client.post(f"/api/v1/trials/{trial_id}/metrics/batch", json={"reports": batch})
            assert r.status_code == 200, r.text
            assert all(r.json()["stored"])
            series = client.get(url, params=params).json()["series"]
            assert [s["trial_id"] for s in series] == [trial_id]
            assert series[0]["raw_points"] == len(sent)
            assert series[0]["batches"] == sorted(sent)
            assert series[0]["values"] == [sent[k] for k in sorted(sent)]
            trial = client.get(
                f"/api/v1/trials/{trial_id}/metrics",
                params={"downsample": 1024, "names": "loss,acc", "group": "training"},
            ).json()["series"]
            assert {s["name"]: s["raw_points"] for s in trial} == {
                "acc": len(sent),
                "loss": len(sent),
            }
        assert _pending_count(ctx.db) == 0  # the reads folded what they needed


def _experiment_trials(db: Database, exp_id: int, n: int) -> list[int]:
    """Add ``n`` ACTIVE trials to an experiment; their ids."""
    with db.write() as s:
        ids = []
        for i in range(n):
            trial = TrialRow(
                experiment_id=exp_id,
                request_id=uuid.uuid4().hex,
                state="ACTIVE",
                hparams={},
                seed=i,
                start_time=time.time(),
            )
            s.add(trial)
            s.flush()
            ids.append(trial.id)
        return ids


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from([-2.0, -1.0, -0.0, 0.0, 1.0, 2.5, math.inf, -math.inf]), max_size=500),
    st.integers(2, 70),
    st.sampled_from([1, 2, 5]),
    st.integers(1, 6),
    st.randoms(use_true_random=False),
)
def test_a_few_points_at_a_time_fold_like_one_pass(values, chunk, stride, cap, rnd):
    """Points folded a few at a time as Python lists, as a lazy fold of a few
    seconds' reports adds them to each metric (the plain-Python path up to 64 points,
    numpy beyond), each chunk shuffled and sometimes reaching back before the kept
    points, with ties, signed zeros and non-finite values: the same summary, width and
    bytes, as one pass."""
    x = [(i + 1) * stride for i in range(len(values))]
    order = list(zip(x, values, strict=True))
    for _ in range(len(order) // 10):  # some reports arrive late, out of order
        i, j = rnd.randrange(len(order)), rnd.randrange(len(order))
        order[i], order[j] = order[j], order[i]
    summary = M4Series(cap_buckets=cap)
    for i in range(0, len(order), chunk):
        pairs = order[i : i + chunk]
        rnd.shuffle(pairs)
        summary.extend([p[0] for p in pairs], [p[1] for p in pairs])
    finite = [(a, b) for a, b in zip(x, values, strict=True) if math.isfinite(b)]
    assert summary.raw_points == len(finite)
    if not finite:
        assert summary.x.size == 0
        return
    fx = np.array([p[0] for p in finite], dtype=np.int64)
    fy = np.array([p[1] for p in finite])
    width = 1
    while np.unique(fx // width).size > cap:
        width *= 2
    wx, wy = m4(fx, fy, width)
    assert summary.width == width
    assert summary.x.tobytes() == wx.astype("<i8").tobytes()
    assert summary.y.tobytes() == wy.astype("<f8").tobytes()


def test_a_trial_deleted_during_a_lazy_fold_is_skipped(db_url, monkeypatch):
    """The fold computes outside the write lock: a trial deleted between its read and
    its write (its reports and pending rows go with it) is skipped, not resurrected as
    orphan summaries, and the other trials are folded."""
    db = Database(db_url)
    db.migrate()
    try:
        _, (doomed, kept) = _experiment(db, 2)
        for t in (doomed, kept):
            _store(db, t, "training", [(1, {"loss": 1.0})])  # summaries exist: updates
            _store(db, t, "training", [(2, {"loss": 2.0, "new": 1.0})], fold=False)
            with db.write() as s:
                queue_metric_folds(s, t, "training", [2])
        plan = metric_fold._plan_fold

        def delete_then_plan(s, trial_id, group, reports):
            out = plan(s, trial_id, group, reports)
            if trial_id == doomed:
                with db.write() as w:
                    w.execute(delete(TrialRow).where(TrialRow.id == doomed))
            return out

        monkeypatch.setattr(metric_fold, "_plan_fold", delete_then_plan)
        assert fold_pending(db) == 1  # the kept trial's report only
        assert _summary_rows(db, doomed) == {}
        assert _stored(db, kept, "training", "loss").raw_points == 2
        assert _stored(db, kept, "training", "new").raw_points == 1
        assert _pending_count(db) == 0
    finally:
        db.dispose()


def test_a_fold_that_another_folder_overtook_writes_nothing(db_url):
    """Two folders of one trial (the master's readers and the fold worker process) that
    read overlapping pending reports: the first to write wins; the second finds some of
    its reports' pending rows gone and writes nothing, deleting no pending row either,
    so no report is folded twice or lost; read again, it folds what came since, as one
    fold of everything would."""
    db = Database(db_url)
    db.migrate()
    try:
        _, (lazy, eager) = _experiment(db, 2)
        first = [(b, {"loss": 1.0 / b, "acc": b * 0.01}) for b in range(1, 6)]
        later = [(b, {"loss": 1.0 / b, "acc": b * 0.01}) for b in range(6, 9)]
        _store(db, lazy, "training", first, fold=False)
        with db.write() as s:
            queue_metric_folds(s, lazy, "training", [b for b, _ in first])
        ids_b, plan_b = metric_fold.read_fold(db, lazy, "training")
        _store(db, lazy, "training", later, fold=False)
        with db.write() as s:
            queue_metric_folds(s, lazy, "training", [b for b, _ in later])
        ids_a, plan_a = metric_fold.read_fold(db, lazy, "training")
        assert len(ids_b) == 5 and ids_a[:5] == ids_b and len(ids_a) == 8
        assert metric_fold.write_fold(db, ids_b, plan_b) is True
        folded_once = _summary_rows(db, lazy)
        assert metric_fold.write_fold(db, ids_a, plan_a) is False
        assert _summary_rows(db, lazy) == folded_once  # nothing written
        assert _pending_count(db) == 3  # the later reports are still pending
        assert fold_pending(db, [lazy]) == 3
        assert _pending_count(db) == 0
        _store(db, eager, "training", first + later)
        want = _summary_rows(db, eager)
        assert _summary_rows(db, lazy) == want
        assert _stored(db, lazy, "training", "loss").raw_points == 8  # each point once
    finally:
        db.dispose()


def _wait_until(what: str, cond, seconds: float = 60.0) -> None:
    until = time.time() + seconds
    while not cond():
        assert time.time() < until, f"not within {seconds} s: {what}"
        time.sleep(0.05)


def test_fold_worker_folds_is_restarted_after_a_crash_and_exits_when_closed(tmp_path, monkeypatch):
    """The master's fold worker process folds pending reports with nobody reading them;
    killed, it is started again; SIGTERM and SIGINT are not for it; closed, its input
    ends and it exits with status 0."""
    monkeypatch.setattr(fold_worker, "RESTART_DELAY", 0.1)
    url = f"sqlite:///{tmp_path}/dauntless.db"
    db = Database(url)
    db.migrate()
    worker = fold_worker.FoldWorker(url, interval=0.2)
    try:
        _, (tid,) = _experiment(db, 1)
        for reports in ([(1, {"loss": 1.0})], [(2, {"loss": 0.5})]):
            _store(db, tid, "training", reports, fold=False)
            with db.write() as s:
                queue_metric_folds(s, tid, "training", [b for b, _ in reports])
            if worker.process is None:
                worker.start()
            else:
                crashed = worker.process
                crashed.kill()
                crashed.wait(30)
                _wait_until("a second worker", lambda c=crashed: worker.process is not c)
            _wait_until("the reports folded", lambda: _pending_count(db) == 0)
        assert worker.starts == 2
        assert _stored(db, tid, "training", "loss").y.tolist() == [1.0, 0.5]
        # SIGTERM or ^C to the master's process group is for the master alone
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
        worker.process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert worker.process.poll() is None
    finally:
        worker.close()
        db.dispose()
    assert worker.process is not None and worker.process.returncode == 0


def test_fold_worker_refuses_bad_arguments():
    """A bad interval or no database URL: status 2 and a message naming what is wrong."""
    run = [sys.executable, "-m", "dauntless.master.fold_worker"]
    bad = subprocess.run([*run, "-1"], input=b"sqlite://\n", capture_output=True, timeout=60)
    assert bad.returncode == 2 and b"INTERVAL must be seconds > 0" in bad.stderr
    none = subprocess.run(run, input=b"", capture_output=True, timeout=60)
    assert none.returncode == 2 and b"database URL on standard input" in none.stderr
