"""Metric ingest: 32 trials each reporting 256 metrics per report, as fast as acked.

Starts a real master (a subprocess) on SQLite in a temporary directory, or on a fresh
PostgreSQL database (``--db postgres``: 127.0.0.1:5432, user postgres, trust auth; the
database is dropped afterwards), registers a pretend agent with ``--trials`` slots over
REST, creates one ``random`` search of that many trials and takes their task specs (and
session tokens) in a heartbeat. Then ``--trials`` threads, one per trial, each with its
own HTTP connection, post training reports (``POST /trials/{id}/metrics``, ``--metrics``
values each, batch counts 1, 2, ...) back to back for ``--seconds``, as a trial's
metrics sender does. Each report is acknowledged when the master answers 200, which it
does after the transaction that stores it committed.

With ``--sender-rate R`` each trial instead makes R reports a second and sends what
gathered while its previous request was in flight as one ``POST /metrics/batch``, as the
Core API's background sender does; a report's latency then runs from its making to its
acknowledgement.

Printed: metric values per second (acknowledged), reports per second, p50/p99 of the
acknowledgement latency, and the master's CPU per report. The baseline of the same run is
one trial reporting alone (``--trials 1`` figures are printed first). Targets: >= 20,000
values/s with 32 trials x 256 metrics, p99 <= 50 ms.

Usage::

    python benchmarks/metric_ingest.py [--db sqlite|postgres] [--trials 32]
                                       [--metrics 256] [--seconds 10] [--sender-rate R]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from master_long_poll_cpu import cpu_seconds  # noqa: E402
from trial_throughput import _free_port  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    """A database URL for the master; a PostgreSQL database is dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp}/master.db"
        return
    import psycopg

    name = "ingest_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def master(tmp: Path, db_url: str) -> Iterator[tuple[str, int]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dauntless.master",
            "--port",
            str(port),
            "--data-dir",
            str(tmp / "data"),
            "--db-url",
            db_url,
            "--agent-timeout",
            "3600",
            "--log-level",
            "warning",
        ],
        stdout=open(tmp / "master.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("DET_")},
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                httpx.get(url + "/api/v1/master", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the master did not start: see {tmp}/master.log") from None
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def start_trials(url: str, n: int) -> list[dict]:
    """Task specs of ``n`` running trials (a pretend agent took them)."""
    c = httpx.Client(base_url=url + "/api/v1", timeout=30)
    r = c.post("/auth/login", json={"username": "admin", "password": ""})
    r.raise_for_status()
    c.headers["Authorization"] = f"Bearer {r.json()['token']}"
    slots = [{"id": str(i), "type": "cpu"} for i in range(n)]
    c.post("/agents", json={"id": "ingest", "hostname": "localhost", "slots": slots})
    config = {
        "name": f"ingest-{n}",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": {
            "name": "random",
            "metric": "m0",
            "max_trials": n,
            "max_concurrent_trials": n,
            "max_length": {"batches": 10**9},
        },
    }
    c.post("/experiments", data={"config": yaml.safe_dump(config)}).raise_for_status()
    specs: list[dict] = []
    deadline = time.time() + 60
    while len(specs) < n:
        if time.time() > deadline:
            raise RuntimeError(f"only {len(specs)} trials started")
        r = c.post(
            "/agents/ingest/heartbeat", json={"running": [s["allocation_id"] for s in specs]}
        )
        r.raise_for_status()
        specs += r.json()["start"]
        time.sleep(0.05)
    return specs


def run_sender(
    url: str, pid: int, specs: list[dict], metrics: int, seconds: float, rate: float
) -> dict:
    """Each trial makes ``rate`` reports per second and sends what has gathered while
    its previous request was in flight as one ``POST /metrics/batch``, as the Core API's
    background sender does; a report's latency is from its making to its ack."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def reporter(spec: dict) -> None:
        token = spec["env"]["DET_SESSION_TOKEN"]
        mine: list[float] = []
        made = 0
        start = time.perf_counter()
        with httpx.Client(
            base_url=url + "/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"}
        ) as c:
            while not stop.is_set():
                due = int((time.perf_counter() - start) * rate)
                if due <= made:
                    time.sleep(max(0.0, (made + 1) / rate - (time.perf_counter() - start)))
                    continue
                batch, times = [], []
                for b in range(made + 1, due + 1):
                    batch.append(
                        {
                            "group": "training",
                            "steps_completed": b,
                            "trial_run_id": 1,
                            "metrics": {f"metric_{i}": b * 0.001 + i for i in range(metrics)},
                        }
                    )
                    times.append(start + b / rate)
                made = due
                r = c.post(f"/trials/{spec['trial_id']}/metrics/batch", json={"reports": batch})
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                acked = time.perf_counter()
                mine += [acked - t for t in times]
        with lock:
            latencies.extend(mine)

    return _drive(pid, specs, reporter, metrics, seconds, latencies, stop, errors)


def _drive(pid, specs, reporter, metrics, seconds, latencies, stop, errors) -> dict:  # noqa: ANN001
    threads = [threading.Thread(target=reporter, args=(s,)) for s in specs]
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    if errors:
        raise RuntimeError(f"reports refused: {errors[:3]}")
    latencies.sort()
    n = len(latencies)
    return {
        "reports": n,
        "values_per_s": n * metrics / wall,
        "reports_per_s": n / wall,
        "p50_ms": latencies[n // 2] * 1e3,
        "p99_ms": latencies[min(n - 1, int(0.99 * n))] * 1e3,
        "master_cpu_ms_per_report": cpu / max(n, 1) * 1e3,
        "wall_s": wall,
        "master_cpu_s": cpu,
    }


def run(url: str, pid: int, specs: list[dict], metrics: int, seconds: float) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def reporter(spec: dict) -> None:
        token = spec["env"]["DET_SESSION_TOKEN"]
        mine: list[float] = []
        with httpx.Client(
            base_url=url + "/api/v1", timeout=60, headers={"Authorization": f"Bearer {token}"}
        ) as c:
            batches = 0
            while not stop.is_set():
                batches += 1
                body = {
                    "group": "training",
                    "steps_completed": batches,
                    "trial_run_id": 1,
                    "metrics": {f"metric_{i}": batches * 0.001 + i for i in range(metrics)},
                }
                t = time.perf_counter()
                r = c.post(f"/trials/{spec['trial_id']}/metrics", json=body)
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    return _drive(pid, specs, reporter, metrics, seconds, latencies, stop, errors)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--metrics", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument(
        "--sender-rate",
        type=float,
        default=0.0,
        help="instead of one report per request as fast as acked: each trial makes this "
        "many reports per second, sent in batches as the Core API's sender does",
    )
    args = p.parse_args()
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    for trials in (1, args.trials):
        with (
            tempfile.TemporaryDirectory(prefix="dauntless-ingest-") as tmp_s,
            database(args.db, Path(tmp_s)) as db_url,
            master(Path(tmp_s), db_url) as (url, pid),
        ):
            specs = start_trials(url, trials)
            if args.sender_rate > 0:
                res = run_sender(url, pid, specs, args.metrics, args.seconds, args.sender_rate)
            else:
                res = run(url, pid, specs, args.metrics, args.seconds)
        mode = f", {args.sender_rate:g} reports/s each, batched" if args.sender_rate else ""
        print(
            f"{args.db}, {trials} trial(s) x {args.metrics} metrics{mode}: "
            f"{res['values_per_s']:,.0f} values/s ({res['reports_per_s']:.1f} reports/s), "
            f"ack p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms, "
            f"master CPU {res['master_cpu_ms_per_report']:.1f} ms/report "
            f"({res['master_cpu_s']:.2f} CPU s in {res['wall_s']:.2f} s wall)"
        )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
