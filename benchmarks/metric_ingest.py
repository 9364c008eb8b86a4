"""Metric ingest: 32 trials each reporting 256 metrics per report.

Starts a real master (a subprocess) on SQLite in a temporary directory, or on a fresh
PostgreSQL database (``--db postgres``: 127.0.0.1:5432, user postgres, trust auth; the
database is dropped afterwards), registers a pretend agent with ``--trials`` slots over
REST, creates one ``random`` search of that many trials and takes their task specs (and
session tokens) in a heartbeat.

The load comes from ``--processes`` generator processes (the trials dealt out among
them), a thread per trial, each with its own keep-alive ``http.client`` connection and
bodies encoded by orjson, as a trial's ``LiteClient`` sends them: a generator sharing
the master's interpreter lock, or spending milliseconds of CPU per request in a heavier
client, would add its own delays to the latencies it measures. Each trial first sends
one untimed report (its connection's set-up and the master's first look at its token);
then all start together, and report for ``--seconds``:

- by default back to back, one report per ``POST /trials/{id}/metrics`` (``--metrics``
  values, batch counts 2, 3, ...), each sent when the previous one was acknowledged;
- with ``--sender-rate R``, each trial makes R reports a second and sends what gathered
  while its previous request was in flight as one ``POST /metrics/batch``, as the Core
  API's background sender does; a report's latency runs from its making to its
  acknowledgement. With ``--phase spread`` (the default) trial i's reports are made
  i / (trials x R) seconds later than trial 0's, as independent trials' are; ``--phase
  same`` makes them all at the same instants (bursts of 32 reports).

A report is acknowledged when the master answers 200, which it does after the
transaction that stores it committed.

Printed per run: metric values per second (acknowledged, over the time from the start
to the last acknowledgement), reports per second, p50/p99/max of the acknowledgement
latency, the CPU seconds of the master with its children (its metric fold worker), in
all and per report, and of the generator processes over the timed part, and the load
average. The baseline of the same run is one trial
reporting alone (printed first) and, with ``--compare-src DIR``, the same load on a
master run from another source tree (e.g. main's ``src/``). Targets (issue 19):
>= 20,000 values/s with 32 trials x 256 metrics, p99 <= 50 ms.

Usage::

    python benchmarks/metric_ingest.py [--db sqlite|postgres] [--trials 32]
                                       [--metrics 256] [--seconds 10] [--sender-rate R]
                                       [--phase spread|same] [--processes 2]
                                       [--compare-src DIR] [--timeline FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing as mp
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
from master_long_poll_cpu import tree_cpu_seconds  # noqa: E402

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


def _post(conn: http.client.HTTPConnection, path: str, token: str, body: Any) -> int:
    """POST ``body`` as JSON (orjson, as the Core API's ``LiteClient`` does); the status."""
    conn.request(
        "POST",
        path,
        body=orjson.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
    return r.status


def _report(b: int, metrics: int) -> dict:
    return {
        "group": "training",
        "steps_completed": b,
        "trial_run_id": 1,
        "metrics": {f"metric_{i}": b * 0.001 + i for i in range(metrics)},
    }


def _generator(
    port: int,
    specs: list[dict],
    args: dict,
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    """One generator process: a thread per trial of ``specs``, each with its own
    keep-alive ``http.client`` connection (a trial's sender has one). Each first sends
    one untimed report (connection set-up, the master's first look at its token), then
    waits for ``go`` (the start, a ``time.perf_counter()`` value: the clock is the
    system's monotonic one, shared by processes) and reports for ``args["seconds"]``.
    Puts ``(latencies, cpu_s, errors, last_ack, timeline)`` on ``out``: the
    acknowledgement latencies in seconds, this process's CPU seconds over the timed
    part, what failed, the time of its last acknowledgement, and (with
    ``args["timeline"]``) one ``(trial id, made, sent, acknowledged, reports)`` per
    request, times in seconds after the start (``made``: its first report's)."""
    metrics, seconds, rate = args["metrics"], args["seconds"], args["rate"]
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []
    warm = threading.Barrier(len(specs) + 1)
    t_go: list[float] = []
    last_ack = [0.0]
    started = threading.Event()
    timeline: list[tuple[int, float, float, float, int]] = []

    def trial(spec: dict, offset: float) -> None:
        token = spec["env"]["DET_SESSION_TOKEN"]
        tid = spec["trial_id"]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine: list[float] = []
        try:
            _post(
                conn,
                f"/api/v1/trials/{tid}/metrics/batch",
                token,
                {"reports": [_report(1, metrics)]},
            )
            warm.wait()
            started.wait()
            start, stop_at = t_go[0] + offset, t_go[0] + seconds
            made = 1  # batch counts 2, 3, ... are timed
            while True:
                now = time.perf_counter()
                if now >= stop_at:
                    break
                if rate > 0:
                    # report b (2, 3, ...) is made at start + (b - 2) / rate
                    due = 2 + int((now - start) * rate) if now >= start else 1
                    if due <= made:
                        time.sleep(max(0.0, start + (made - 1) / rate - now))
                        continue
                    batch = [_report(b, metrics) for b in range(made + 1, due + 1)]
                    times = [start + (b - 2) / rate for b in range(made + 1, due + 1)]
                    made = due
                    sent = time.perf_counter()
                    _post(conn, f"/api/v1/trials/{tid}/metrics/batch", token, {"reports": batch})
                else:
                    made += 1
                    times = [sent := time.perf_counter()]
                    _post(conn, f"/api/v1/trials/{tid}/metrics", token, _report(made, metrics))
                acked = time.perf_counter()
                mine += [acked - t for t in times]
                if args["timeline"]:
                    t0 = t_go[0]
                    timeline.append((tid, times[0] - t0, sent - t0, acked - t0, len(times)))
                with lock:
                    last_ack[0] = max(last_ack[0], acked)
        except Exception as exc:  # noqa: BLE001 - reported by the parent
            errors.append(f"trial {tid}: {exc}")
            warm.abort()  # the others (and the process) stop waiting for this one
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    offsets = args["offsets"]
    threads = [
        threading.Thread(target=trial, args=(spec, off), daemon=True)
        for spec, off in zip(specs, offsets, strict=True)
    ]
    for t in threads:
        t.start()
    try:
        warm.wait()
    except threading.BrokenBarrierError:  # a trial's warm-up report failed
        out.put(([], 0.0, errors, 0.0, []))
        ready.set()
        return
    ready.set()
    t_go.append(go.get())
    c0 = time.process_time()
    started.set()
    for t in threads:
        t.join()
    out.put((latencies, time.process_time() - c0, errors, last_ack[0], timeline))


def drive(
    url: str,
    pid: int,
    specs: list[dict],
    metrics: int,
    seconds: float,
    rate: float,
    processes: int,
    phase: str,
    timeline: bool = False,
) -> dict:
    """Report from ``processes`` generator processes (``specs`` dealt round robin) and
    measure: ``rate`` > 0 makes that many reports a second per trial, sent as the Core
    API's background sender does (what gathered while the previous request was in flight,
    as one ``POST /metrics/batch``; a report's latency runs from when it was due to its
    acknowledgement); ``rate`` 0 posts one report per ``POST /metrics`` back to back.
    ``phase`` "spread": trial i's schedule starts i/(n*rate) s late, so reports arrive
    evenly; "same": all trials report at the same instants (a burst of n reports).
    ``timeline``: also return every request's times (``"timeline"``, see
    :func:`_generator`), to line slow acknowledgements up with what the master did."""
    port = int(url.rsplit(":", 1)[1])
    ctx = mp.get_context("fork")
    n = len(specs)
    offsets = [(i / (n * rate) if phase == "spread" and rate > 0 else 0.0) for i in range(n)]
    out = ctx.Queue()
    gens = []
    for k in range(processes):
        mine = list(range(k, n, processes))
        ready, go = ctx.Event(), ctx.Queue()
        args = {
            "metrics": metrics,
            "seconds": seconds,
            "rate": rate,
            "offsets": [offsets[i] for i in mine],
            "timeline": timeline,
        }
        p = ctx.Process(
            target=_generator, args=(port, [specs[i] for i in mine], args, ready, go, out)
        )
        p.start()
        gens.append((p, ready, go))
    for _, ready, _ in gens:
        if not ready.wait(120):
            raise RuntimeError("the generator processes did not warm up")
    c0 = tree_cpu_seconds(pid)  # with its metric fold worker
    t0 = time.perf_counter() + 0.05
    for _, _, go in gens:
        go.put(t0)
    latencies: list[float] = []
    gen_cpu, end = 0.0, t0
    errors: list[str] = []
    requests: list[tuple[int, float, float, float, int]] = []
    for _ in gens:
        lat, cpu, errs, last, mine_timeline = out.get(timeout=seconds + 300)
        requests += mine_timeline
        end = max(end, last)
        latencies += lat
        gen_cpu += cpu
        errors += errs
    # values/s over the time from the start to the last acknowledgement; the master's
    # CPU until every generator is done (it includes any fold running meanwhile)
    wall, cpu = end - t0, tree_cpu_seconds(pid) - c0
    for p, _, _ in gens:
        p.join(30)
    if errors:
        raise RuntimeError(f"reports refused: {errors[:3]}")
    latencies.sort()
    k = len(latencies)
    return {
        "reports": k,
        "values_per_s": k * metrics / wall,
        "reports_per_s": k / wall,
        "p50_ms": latencies[k // 2] * 1e3,
        "p99_ms": latencies[min(k - 1, int(0.99 * k))] * 1e3,
        "max_ms": latencies[-1] * 1e3,
        "master_cpu_ms_per_report": cpu / max(k, 1) * 1e3,
        "wall_s": wall,
        "master_cpu_s": cpu,
        "generator_cpu_s": gen_cpu,
        "timeline": sorted(requests, key=lambda r: r[1]),
    }


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
    p.add_argument(
        "--phase",
        choices=["spread", "same"],
        default="spread",
        help="with --sender-rate: trials' reports evenly spread in time (as independent "
        "trials are), or all at the same instants (bursts of --trials reports)",
    )
    p.add_argument(
        "--processes", type=int, default=2, help="load generator processes (trials dealt out)"
    )
    p.add_argument(
        "--compare-src",
        metavar="DIR",
        help="also measure a master run from this source tree (e.g. a checkout of main's "
        "src/), first, as the baseline of the same run",
    )
    p.add_argument(
        "--timeline",
        metavar="FILE",
        help="write every timed request's (trial, made, sent, acknowledged, reports), in "
        "seconds after the start, as JSON (one list per run, by its label), to line slow "
        "acknowledgements up with the master's log",
    )
    args = p.parse_args()
    timelines: dict[str, list] = {}
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    runs: list[tuple[str, str | None, int]] = [("this tree", None, 1)]
    if args.compare_src:
        runs.append((args.compare_src, args.compare_src, args.trials))
    runs.append(("this tree", None, args.trials))
    for label, src, trials in runs:
        with (
            tempfile.TemporaryDirectory(prefix="dauntless-ingest-") as tmp_s,
            database(args.db, Path(tmp_s)) as db_url,
            _cluster.master(
                Path(tmp_s) / "data", db_url=db_url, log=Path(tmp_s) / "master.log", src=src
            ) as master,
        ):
            specs = start_trials(master.url, trials)
            res = drive(
                master.url,
                master.pid,
                specs,
                args.metrics,
                args.seconds,
                args.sender_rate,
                min(args.processes, trials),
                args.phase,
                timeline=bool(args.timeline),
            )
        timelines[f"{label}, {trials} trial(s)"] = res["timeline"]
        mode = (
            f", {args.sender_rate:g} reports/s each ({args.phase}), batched"
            if args.sender_rate
            else ", back to back"
        )
        print(
            f"[{label}] {args.db}, {trials} trial(s) x {args.metrics} metrics{mode}: "
            f"{res['values_per_s']:,.0f} values/s ({res['reports_per_s']:.1f} reports/s), "
            f"ack p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms, "
            f"max {res['max_ms']:.1f} ms; master {res['master_cpu_s']:.2f} CPU s "
            f"({res['master_cpu_ms_per_report']:.1f} ms/report), generator "
            f"{res['generator_cpu_s']:.2f} CPU s, in {res['wall_s']:.2f} s wall; "
            f"load {open('/proc/loadavg').read().split()[0]}"
        )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")
    if args.timeline:
        Path(args.timeline).write_bytes(orjson.dumps(timelines))


if __name__ == "__main__":
    main()
