"""Acknowledged metric reports survive a SIGKILL of the master (issue 19, metric ingest).

A master acknowledges a report once its ``metrics`` row and its pending-fold row are
committed and folds the summaries later, in bulk. Here four trials (a pretend agent over
REST) post reports of 64 metrics back to back while the master is killed with SIGKILL;
the restarted master must hold every acknowledged report, in the paged metrics route
and in the M4 series (which fold what the killed master left pending). Runs on SQLite
and on a fresh PostgreSQL database.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx
import numpy as np
import pytest
import yaml
from sqlalchemy import create_engine, text

from dauntless.master.metric_series import m4

pytestmark = pytest.mark.integration

TRIALS = 4
METRICS = 64


def _start_trials(cluster, n: int) -> list[dict]:
    """Task specs (with session tokens) of ``n`` running trials that a pretend agent,
    registered over REST, took in its heartbeat."""
    headers = cluster.headers()
    api = cluster.url + "/api/v1"
    slots = [{"id": str(i), "type": "cpu"} for i in range(n)]
    r = httpx.post(
        api + "/agents",
        json={"id": "pretend", "hostname": "localhost", "slots": slots},
        headers=headers,
        timeout=30,
    )
    r.raise_for_status()
    config = {
        "name": "ingest-kill",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": {
            "name": "random",
            "metric": "metric_0",
            "max_trials": n,
            "max_concurrent_trials": n,
            "max_length": {"batches": 10**9},
        },
    }
    r = httpx.post(
        api + "/experiments", data={"config": yaml.safe_dump(config)}, headers=headers, timeout=30
    )
    r.raise_for_status()
    specs: list[dict] = []
    deadline = time.time() + cluster.deadline(60)
    while len(specs) < n:
        assert time.time() < deadline, f"only {len(specs)} trials started"
        r = httpx.post(
            api + "/agents/pretend/heartbeat",
            json={"running": [s["allocation_id"] for s in specs]},
            headers=headers,
            timeout=30,
        )
        r.raise_for_status()
        specs += r.json()["start"]
        time.sleep(0.1)
    return specs


def _values(batches: int) -> dict[str, float]:
    return {f"metric_{i}": batches * 0.5 + i * ((-1) ** batches) for i in range(METRICS)}


def _stored_batches(cluster, trial_id: int) -> list[int]:
    """Every training report's batch count of a trial, through the paged route."""
    out: list[int] = []
    after = None
    while True:
        params = {"group": "training", "limit": 500}
        if after is not None:
            params["after_batches"] = after
        body = cluster.api(f"/trials/{trial_id}/metrics", **params)
        for m in body["metrics"]:
            assert m["values"] == _values(m["total_batches"])
        out += [m["total_batches"] for m in body["metrics"]]
        after = body["next_after_batches"]
        if after is None:
            return out


def test_acknowledged_reports_survive_master_sigkill(cluster_factory, db_url):
    cluster = cluster_factory(db_url)
    cluster.start_master()
    specs = _start_trials(cluster, TRIALS)
    acked: dict[int, list[int]] = {s["trial_id"]: [] for s in specs}
    stop = threading.Event()

    def report(spec: dict) -> None:
        headers = {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
        with httpx.Client(base_url=cluster.url + "/api/v1", headers=headers, timeout=30) as c:
            batches = 0
            while not stop.is_set():
                batches += 1
                body = {
                    "group": "training",
                    "steps_completed": batches,
                    "trial_run_id": 1,
                    "metrics": _values(batches),
                }
                try:
                    r = c.post(f"/trials/{spec['trial_id']}/metrics", json=body)
                except httpx.HTTPError:
                    return  # the master is gone: this report was never acknowledged
                assert r.status_code == 200, r.text
                assert r.json()["stored"] is True
                acked[spec["trial_id"]].append(batches)

    threads = [threading.Thread(target=report, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    deadline = time.time() + cluster.deadline(60)
    while min(len(v) for v in acked.values()) < 20:  # each trial has some acknowledged
        assert time.time() < deadline, f"reports too slow: {[len(v) for v in acked.values()]}"
        time.sleep(0.05)
    cluster.stop(cluster.master, sig=signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(60)
    assert cluster.master is not None and cluster.master.returncode == -signal.SIGKILL

    # Reports kept arriving until the kill and the master folds every 5 s: some of the
    # acknowledged ones were still unfolded, so the restart has to fold them.
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            pending = conn.execute(text("SELECT count(*) FROM metric_folds_pending")).scalar()
    finally:
        engine.dispose()
    assert pending and pending > 0, "no report was left unfolded by the kill"

    cluster.start_master()
    for trial_id, mine in acked.items():
        stored = _stored_batches(cluster, trial_id)
        assert set(mine) <= set(stored), f"trial {trial_id} lost {sorted(set(mine) - set(stored))}"
        assert len(stored) == len(set(stored))  # each report once
        series = cluster.api(
            f"/trials/{trial_id}/metrics",
            group="training",
            downsample=1024,
            names="metric_0,metric_63",
        )["series"]
        assert [s["name"] for s in series] == ["metric_0", "metric_63"]
        for s in series:
            i = int(s["name"].split("_")[1])
            x = np.array(sorted(stored), dtype=np.int64)
            y = np.array([_values(int(b))[f"metric_{i}"] for b in x])
            assert s["raw_points"] == x.size
            width = 1
            while np.unique(x // width).size > 256:  # CAP_BUCKETS
                width *= 2
            wx, wy = m4(x, y, width)  # what one M4 pass over every stored report keeps
            assert s["batches"] == wx.tolist() and s["values"] == wy.tolist()
