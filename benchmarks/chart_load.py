"""Time the WebUI's learning-curve request at scale: stored summaries against a raw scan.

A SQLite master database gets one experiment of ``--trials`` trials, each with
``--points`` training reports of one metric (``loss``, a noisy decaying curve with a
spike), stored the way the master stores them: the ``metrics`` rows and, in the same
transaction, :func:`dauntless.master.metric_series.fold_metric_reports` (here one call per
trial with all its reports, the master's per-report path in bulk). Then, through a
freshly started in-process app (a restarted master; fastapi's ``TestClient``), it times
the first and a repeated ``GET /api/v1/experiments/{id}/metrics?group=training&name=loss``,
and, in the same run on the same database, the raw scan the route did before summaries
were stored: every metrics row of the experiment read (SQLite ``json_extract``) and M4
run over it. The two answers must hold the same points; the script fails if not.

It also times the cost of storing one report the master's way
(``dauntless.master.models.metrics.report_metrics``: the row, and the report queued for the lazy fold)
on a trial whose summary is full, and of folding that report into the summary afterwards
(:func:`dauntless.master.metric_fold.fold_pending`, as a reader or the background folder
does).

Usage::

    python benchmarks/chart_load.py [--trials 1000] [--points 1000] [--full]
                                    [--db PATH] [--seed 0]

``--full`` is ``--points 10000`` (the issue's 1,000 trials x 10,000 points: about 10
million rows, 1.2 GB of SQLite, a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.db import Database, ExperimentRow, MetricRow, TrialRow
from dauntless.master.metric_series import (
    POINT_BUDGET,
    M4Series,
    fold_metric_reports,
)
from dauntless.master.models import metrics
from dauntless.master.testing import sign_in

TARGET_SECONDS = 1.0
GROUP, NAME, MAX_POINTS = "training", "loss", 400
_IN_CHUNK = 500


def build(db: Database, trials: int, points: int, seed: int) -> tuple[int, float, float]:
    """Store the experiment; returns (experiment id, seconds storing rows, seconds folding)."""
    rng = np.random.default_rng(seed)
    with db.write() as s:
        exp = ExperimentRow(
            name="chart-load",
            state="COMPLETED",
            config={"searcher": {"metric": NAME}},
            original_config="",
            seed=seed,
            start_time=time.time(),
        )
        s.add(exp)
        s.flush()
        exp_id = exp.id
        rows = [
            TrialRow(
                experiment_id=exp_id,
                request_id=f"r{i}",
                state="COMPLETED",
                hparams={"lr": float(lr)},
                seed=i,
                start_time=time.time(),
            )
            for i, lr in enumerate(rng.uniform(1e-4, 1e-1, trials))
        ]
        s.add_all(rows)
        s.flush()
        trial_ids = [t.id for t in rows]
    batches = np.arange(1, points + 1, dtype=np.int64) * 10
    store_s = fold_s = 0.0
    now = time.time()
    for i, trial_id in enumerate(trial_ids):
        loss = 2.0 * np.exp(-batches / (2000.0 + 30 * i)) + rng.normal(0, 0.02, points)
        loss[rng.integers(points)] += 5.0  # a spike the chart must keep
        reports = [(int(b), {NAME: float(v)}) for b, v in zip(batches, loss, strict=True)]
        with db.write() as s:
            t0 = time.perf_counter()
            s.execute(
                insert(MetricRow.__table__),
                [  # Core executemany: the fastest portable
                    {
                        "trial_id": trial_id,
                        "kind": GROUP,
                        "total_batches": b,
                        "values": m,
                        "trial_run_id": 0,
                        "reported_at": now,
                    }
                    for b, m in reports
                ],
            )
            t1 = time.perf_counter()
            fold_metric_reports(s, trial_id, GROUP, reports)
            t2 = time.perf_counter()
        store_s += t1 - t0
        fold_s += t2 - t1
    return exp_id, store_s, fold_s


def raw_scan(db: Database, exp_id: int) -> dict:
    """The chart answer the old way: every metrics row of the experiment read, then M4."""
    path = '$."' + NAME + '"'
    with db.read() as s:
        trial_ids = list(
            s.scalars(
                select(TrialRow.id).where(TrialRow.experiment_id == exp_id).order_by(TrialRow.id)
            )
        )
        xs: dict[int, list[int]] = {}
        ys: dict[int, list[float]] = {}
        for i in range(0, len(trial_ids), _IN_CHUNK):
            q = select(
                MetricRow.trial_id,
                MetricRow.total_batches,
                func.json_extract(MetricRow.values, path),
            ).where(MetricRow.kind == GROUP, MetricRow.trial_id.in_(trial_ids[i : i + _IN_CHUNK]))
            for trial_id, b, v in s.execute(q):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    xs.setdefault(trial_id, []).append(b)
                    ys.setdefault(trial_id, []).append(float(v))
    per_series = min(MAX_POINTS, max(8, POINT_BUDGET // max(1, len(xs))))
    series = []
    for trial_id in trial_ids:
        if trial_id not in xs:
            continue
        summary = M4Series()
        summary.extend(xs[trial_id], ys[trial_id])
        x, y = summary.points(per_series)
        series.append(
            {
                "trial_id": trial_id,
                "batches": x.tolist(),
                "values": y.tolist(),
                "raw_points": summary.raw_points,
                "downsampled": int(x.size) < summary.raw_points,
            }
        )
    return {"max_points": per_series, "series": series}


def report_cost(ctx, trial_id: int, start: int, reports: int) -> tuple[float, float]:
    """Median milliseconds of one ``report_metrics`` call (stored and acknowledged; its
    summary update is queued), and of folding that one report into the summaries
    (:func:`dauntless.master.metric_fold.fold_pending` for the trial, as a reader or the
    background folder does it)."""
    from dauntless.master.metric_fold import fold_pending

    calls: list[float] = []
    folds: list[float] = []
    for k in range(reports):
        t0 = time.perf_counter()
        metrics.report_metrics(
            ctx, trial_id, GROUP, start + 10 * (k + 1), 0, {NAME: 1.0 / (k + 1)}, None
        )
        calls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        folded = fold_pending(ctx.db, [trial_id])
        folds.append(time.perf_counter() - t0)
        if folded != 1:
            raise RuntimeError(f"expected to fold the 1 report just made, folded {folded}")
    return 1000 * statistics.median(calls), 1000 * statistics.median(folds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--points", type=int, default=1000, help="reports per trial")
    parser.add_argument("--full", action="store_true", help="--points 10000")
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="an empty directory for the database, kept (default: a temporary one, removed)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    points = 10_000 if args.full else args.points
    if args.trials < 1 or points < 1:
        parser.error("--trials and --points must be >= 1")
    if args.db is not None and (args.db / "dauntless.db").exists():
        parser.error(f"--db {args.db} already holds a database; give an empty directory")
    data_dir = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="chart-load-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    config = MasterConfig(data_dir=str(data_dir))
    try:
        db = Database(f"sqlite:///{data_dir}/dauntless.db")
        db.migrate()
        t0 = time.perf_counter()
        exp_id, store_s, fold_s = build(db, args.trials, points, args.seed)
        build_s = time.perf_counter() - t0
        db.dispose()
        size = os.path.getsize(data_dir / "dauntless.db") + sum(
            os.path.getsize(p) for p in data_dir.glob("dauntless.db-*")
        )
        print(
            f"{args.trials} trials x {points} reports of {NAME!r}: built in {build_s:.1f} s "
            f"(rows {store_s:.1f} s, summaries {fold_s:.1f} s), {size / 2**20:.0f} MiB"
        )

        app = create_app(config, run_loop=False)  # a freshly started master
        url = f"/api/v1/experiments/{exp_id}/metrics"
        params = {"group": GROUP, "name": NAME, "max_points": MAX_POINTS}
        with TestClient(app) as client:
            sign_in(client)
            t0 = time.perf_counter()
            r = client.get(url, params=params)
            first = time.perf_counter() - t0
            r.raise_for_status()
            t0 = time.perf_counter()  # the experiment page asks for the names first
            client.get(f"{url}/names").raise_for_status()
            names_s = time.perf_counter() - t0
            repeats = []
            for _ in range(3):
                t0 = time.perf_counter()
                client.get(url, params=params).raise_for_status()
                repeats.append(time.perf_counter() - t0)
            body = r.json()
            t0 = time.perf_counter()
            old = raw_scan(app.state.ctx.db, exp_id)
            scan = time.perf_counter() - t0
            t0 = time.perf_counter()
            json.dumps(old)  # the old route answered the same JSON
            scan += time.perf_counter() - t0
            last = app.state.ctx.db
            with last.read() as s:
                probe = s.scalar(
                    select(TrialRow.id)
                    .where(TrialRow.experiment_id == exp_id)
                    .order_by(TrialRow.id)
                )
            call_ms, fold_ms = report_cost(app.state.ctx, probe, 10 * points, 200)
        if body["max_points"] != old["max_points"] or body["series"] != old["series"]:
            raise SystemExit("FAIL: the stored summaries answer differs from the raw scan")
        n_pts = sum(len(s["batches"]) for s in body["series"])
        print(
            f"answer: {len(body['series'])} series, {n_pts} points "
            f"({body['max_points']} per series at most), {len(r.content) / 2**20:.1f} MiB"
        )
        print(
            f"first load (stored summaries): {first:.3f} s "
            f"[target < {TARGET_SECONDS:.1f} s: {'met' if first < TARGET_SECONDS else 'MISSED'}]"
        )
        print(f"repeated load (median of 3):    {statistics.median(repeats):.3f} s")
        print(f"raw scan + M4 (old first load): {scan:.3f} s")
        print(f"metric names (GET .../metrics/names): {names_s:.3f} s")
        print(f"ratio raw scan / first load:    {scan / first:.1f}x")
        print(
            f"one report_metrics call on a full series: {call_ms:.2f} ms median; "
            f"folding it into the summary afterwards: {fold_ms:.2f} ms median"
        )
    finally:
        if args.db is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
