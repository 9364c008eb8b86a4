"""Bytes the master keeps per finished trial (issue 37 scope 2), by tracemalloc.

Runs a master in-process (SQLite in a temporary directory, no control loop, no agents)
and drives a ``random`` (or ``--searcher adaptive_asha``) search of ``--n`` trials, at most
``--concurrent`` at once, through the master's own searcher path: each step completes the
searcher operation of the oldest live trial (``search.complete_operation``, what a
trial's ``POST .../searcher/completed_operation`` does), which closes it, ends it and
creates the next. tracemalloc snapshots (after a full garbage collection) are taken when
``--lo`` and ``--hi`` trials have ended; printed:

- the growth between them in bytes per finished trial, in all and in the master's
  searcher cache alone;
- the ``--top`` tracebacks (``--frames`` deep) that grew most, with bytes per trial;
- the searcher's in-memory trial records (``Searcher.trials_in_memory``) at both points.

With ``--cpu`` no tracemalloc runs; instead the process's CPU per ended trial (random
search: one step per trial) is printed for the first and the last ``--window`` trials,
side by side: the master's cost of a searcher event at the search's start and end.

Usage::

    python benchmarks/master_memory_per_trial.py [--n 2100] [--lo 500] [--hi 2000]
        [--concurrent 16] [--searcher random] [--top 12] [--frames 6]
    python benchmarks/master_memory_per_trial.py --cpu [--n 2100] [--window 500]

Pure Python, single-threaded, no subprocesses: CPU seconds and wall are printed together
with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.db import ExperimentRow, TrialRow
from dauntless.master.models import search
from dauntless.master.testing import sign_in


def config(searcher: str, n: int, concurrent: int) -> dict[str, Any]:
    """The experiment config of the driven search."""
    cfg: dict[str, Any] = {"name": searcher, "metric": "loss", "max_trials": n}
    cfg["max_concurrent_trials"] = concurrent
    if searcher == "adaptive_asha":
        cfg.update(max_length={"batches": 16}, divisor=4, max_rungs=3)
    else:
        cfg["max_length"] = {"batches": 1}
    return {
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
        "reproducibility": {"experiment_seed": 7},
        "searcher": cfg,
    }


def step(ctx: Any, exp_id: int) -> bool:
    """Complete the oldest live trial's open operation; False when none is open."""
    with ctx.db.write() as s:
        row = s.execute(
            select(TrialRow.id, TrialRow.hparams, TrialRow.searcher_op_length)
            .where(
                TrialRow.experiment_id == exp_id,
                TrialRow.state == "ACTIVE",
                TrialRow.searcher_op_length.is_not(None),
                (TrialRow.searcher_completed_length.is_(None))
                | (TrialRow.searcher_completed_length < TrialRow.searcher_op_length),
            )
            .order_by(TrialRow.id)
            .limit(1)
        ).first()
        if row is None:
            return False
        search.complete_operation(s, ctx, row.id, row.searcher_op_length, row.hparams["x"])
        return True


def ended(ctx: Any, exp_id: int) -> int:
    """Trials of the experiment that ended."""
    with ctx.db.read() as s:
        return len(
            s.scalars(
                select(TrialRow.id).where(
                    TrialRow.experiment_id == exp_id, TrialRow.state != "ACTIVE"
                )
            ).all()
        )


def searcher_records(ctx: Any, exp_id: int) -> int | None:
    """Trial records the master's kept searcher of the experiment holds, or None."""
    kept = search._cache(ctx).get(exp_id)
    if kept is None:
        return None
    searcher = kept[2]
    count = getattr(searcher, "trials_in_memory", None)
    return count if count is not None else len(searcher._trials)


def snap() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot()


@contextlib.contextmanager
def searching(a: argparse.Namespace) -> Iterator[tuple[Any, int]]:
    """A master in-process (SQLite in a temporary directory, no control loop) with the
    search of ``a`` created and active: yields (its context, the experiment id)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "dauntless.db"
        app = create_app(
            MasterConfig(data_dir=tmp, port=18080, db_url=f"sqlite:///{db}"), run_loop=False
        )
        with TestClient(app) as client:
            sign_in(client)
            body = {"config": yaml.safe_dump(config(a.searcher, a.n, a.concurrent))}
            r = client.post("/api/v1/experiments", data={**body, "activate": "true"})
            assert r.status_code == 201, r.text
            yield app.state.ctx, int(r.json()["experiment"]["id"])


def cpu_per_trial(a: argparse.Namespace) -> None:
    """``--cpu``: CPU ms per trial of the first and last ``--window`` trials."""
    if a.searcher != "random" or not 0 < 2 * a.window <= a.n:
        sys.exit("--cpu needs --searcher random and 2 * --window <= --n")
    t0, c0 = time.monotonic(), time.process_time()
    print(f"load before: {os.getloadavg()}")
    marks: list[float] = []
    with searching(a) as (ctx, exp_id):
        done = 0
        for_marks = {0, a.window, a.n - a.window, a.n}
        while True:
            if done in for_marks:
                marks.append(time.process_time())
            if not step(ctx, exp_id):
                break
            done += 1
    if len(marks) != 4:
        sys.exit(f"the search ended after {done} trials, not {a.n}")
    first = (marks[1] - marks[0]) / a.window * 1000
    last = (marks[3] - marks[2]) / a.window * 1000
    print(
        f"random search, {a.n} trials, {a.concurrent} at once: CPU per trial, trials "
        f"1-{a.window}: {first:.2f} ms; {a.n - a.window + 1}-{a.n}: {last:.2f} ms; "
        f"last / first {last / first:.2f}"
    )
    print(
        f"wall {time.monotonic() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, "
        f"load after: {os.getloadavg()}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2100)
    p.add_argument("--lo", type=int, default=500)
    p.add_argument("--hi", type=int, default=2000)
    p.add_argument("--concurrent", type=int, default=16)
    p.add_argument("--searcher", default="random", choices=["random", "adaptive_asha"])
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--frames", type=int, default=6)
    p.add_argument("--cpu", action="store_true", help="CPU per trial, no tracemalloc")
    p.add_argument("--window", type=int, default=500)
    a = p.parse_args()
    if a.cpu:
        cpu_per_trial(a)
        return
    if not 0 < a.lo < a.hi < a.n:
        sys.exit("need 0 < --lo < --hi < --n")
    t0, c0 = time.monotonic(), time.process_time()
    print(f"load before: {os.getloadavg()}")
    with searching(a) as (ctx, exp_id):
        tracemalloc.start(a.frames)
        # point -> (snapshot, searcher records, trials ended when it was taken)
        shots: dict[int, tuple[tracemalloc.Snapshot, int | None, int]] = {}
        steps = 0
        while step(ctx, exp_id):
            steps += 1
            if a.searcher == "random":
                n_ended = steps  # one step ends one trial
            elif steps % 20:
                continue
            else:
                n_ended = ended(ctx, exp_id)
            for point in (a.lo, a.hi):
                if point not in shots and n_ended >= point:
                    shots[point] = (snap(), searcher_records(ctx, exp_id), n_ended)
        tracemalloc.stop()
        with ctx.db.read() as s:
            state = s.get(ExperimentRow, exp_id).state
    if a.lo not in shots or a.hi not in shots:
        sys.exit(f"the search ended before {a.hi} trials had ended")
    (lo_snap, lo_recs, lo_n), (hi_snap, hi_recs, hi_n) = shots[a.lo], shots[a.hi]
    trials = hi_n - lo_n
    stats = hi_snap.compare_to(lo_snap, "traceback")
    total = sum(st.size_diff for st in stats)
    print(
        f"searcher {a.searcher}, {a.n} trials ({state}), {a.concurrent} at once; "
        f"growth between {lo_n} and {hi_n} ended trials: {total / trials:,.0f} B per trial"
    )
    print(f"searcher records in memory: {lo_recs} at {lo_n}, {hi_recs} at {hi_n}")
    for st in stats[: a.top]:
        if st.size_diff <= 0:
            break
        print(f"  {st.size_diff / trials:8.1f} B/trial  {st.count_diff:+6d} blocks")
        for line in st.traceback.format()[-2 * a.frames :]:
            print("      " + line.strip())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"wall {time.monotonic() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, "
        f"max RSS {ru.ru_maxrss / 1024:.0f} MB, load after: {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
