"""1,000 agents heartbeating every 5 s: the master's CPU and its scheduling pass
(issue 37 scope 6).

Starts a real master (a subprocess, SQLite in a temporary directory), registers
``--agents`` pretend agents of ``--slots`` CPU slots each over REST and creates one
``random`` search of ``--trials`` trials, as many at once; the agents are lightweight and
in-process (asyncio tasks of this process sharing one HTTP client): each heartbeats every
``--interval`` seconds (phases spread evenly, so ``agents / interval`` heartbeats a
second), takes the task specs the master hands it and reports them running from then
on; nothing else talks to the master (no trial process exists: a "running" trial only
heartbeats through its agent).

Printed, side by side:

- the master's CPU (with its metric fold worker), in % of one core, over ``--seconds``
  with the agents registered but silent (the baseline of the same run) and with every
  agent heartbeating; target <= 25% with 1,000 agents every 5 s;
- heartbeat latency (median, p99) as the agents saw it;
- one scheduling pass (``dauntless.master.loop.schedule_pass``: reap lost agents,
  timeouts, placement) timed in this process on a copy of the master's database taken
  at the end (median and worst of ``--passes``); target <= 100 ms. The master does not
  report its own pass times, so the copy is what can be timed without changing it.

Usage::

    python benchmarks/agent_heartbeats.py [--agents 1000] [--slots 8] [--trials 1000]
        [--interval 5] [--seconds 30] [--passes 7]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
from master_long_poll_cpu import tree_cpu_seconds  # noqa: E402


async def agent_loop(
    client: httpx.AsyncClient,
    agent_id: str,
    interval: float,
    phase: float,
    stop_at: float,
    latencies: list[float],
    errors: list[str],
) -> None:
    """One pretend agent: a heartbeat every ``interval`` s from ``phase`` on, until
    ``stop_at`` (monotonic); what the master hands it runs from then on."""
    running: list[str] = []
    await asyncio.sleep(phase)
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        try:
            r = await client.post(f"/agents/{agent_id}/heartbeat", json={"running": running})
            r.raise_for_status()
            running += [spec["allocation_id"] for spec in r.json().get("start", [])]
            latencies.append(time.monotonic() - t0)
        except httpx.HTTPError as exc:
            errors.append(f"{agent_id}: {exc}")
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))


async def heartbeat_phase(
    url: str, token: str, agent_ids: list[str], interval: float, seconds: float
) -> tuple[list[float], list[str]]:
    """Every agent heartbeats for ``seconds``; returns latencies (s) and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=url + "/api/v1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        limits=limits,
    ) as client:
        stop_at = time.monotonic() + seconds
        n = len(agent_ids)
        await asyncio.gather(
            *(
                agent_loop(client, a, interval, interval * i / n, stop_at, latencies, errors)
                for i, a in enumerate(agent_ids)
            )
        )
    return latencies, errors


def time_passes(
    db_file: Path, data_dir: Path, passes: int, agent_timeout: float
) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each ``schedule_pass`` (maintenance and placement) on a copy of the
    master's database, in this process, with the master's ``agent_timeout`` (no agent
    is lost in the copy)."""
    from dauntless.config import MasterConfig
    from dauntless.master import loop
    from dauntless.master.context import MasterContext
    from dauntless.master.db import Database

    copy = db_file.with_name("copy.db")
    src, dst = sqlite3.connect(db_file), sqlite3.connect(copy)
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    db = Database(f"sqlite:///{copy}")
    config = MasterConfig(data_dir=str(data_dir / "copy"), port=18080, agent_timeout=agent_timeout)
    ctx = MasterContext(db, config)
    # Agents are not lost: the copy's heartbeats are as fresh as the master saw them.
    ctx.clock = lambda: time.time()
    out = []
    for _ in range(passes):
        t0, c0 = time.perf_counter(), time.thread_time()
        loop.schedule_pass(ctx, maintenance=True)
        out.append((time.perf_counter() - t0, time.thread_time() - c0))
    db.dispose()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--slots", type=int, default=8, help="CPU slots per agent")
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--interval", type=float, default=5.0, help="seconds between heartbeats")
    p.add_argument("--seconds", type=float, default=30.0, help="measurement window")
    p.add_argument("--passes", type=int, default=7)
    a = p.parse_args()
    if a.agents < 1 or a.slots < 1 or a.trials < 1 or a.interval <= 0 or a.seconds <= 0:
        p.error("--agents, --slots, --trials must be >= 1; --interval, --seconds > 0")
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    timeout = max(600.0, 6 * a.interval)  # no agent is lost while this process is slow
    with (
        tempfile.TemporaryDirectory(prefix="dauntless-heartbeats-") as tmp_s,
        _cluster.master(
            Path(tmp_s) / "data",
            db_url=f"sqlite:///{tmp_s}/master.db",
            args=["--allow-artificial-slots"],
            agent_timeout=timeout,
            start_new_session=True,
        ) as master,
    ):
        tmp = Path(tmp_s)
        client = httpx.Client(base_url=master.url + "/api/v1", timeout=60)
        r = client.post("/auth/login", json={"username": "admin", "password": ""})
        r.raise_for_status()
        token = r.json()["token"]
        client.headers["Authorization"] = f"Bearer {token}"
        ids = [f"hb-{i:05d}" for i in range(a.agents)]
        slots = [{"id": f"s{j}", "type": "cpu"} for j in range(a.slots)]
        t0 = time.monotonic()
        for agent_id in ids:
            body = {"id": agent_id, "hostname": agent_id, "slots": slots}
            client.post("/agents", json=body).raise_for_status()
        print(f"registered {a.agents} agents of {a.slots} slots in {time.monotonic() - t0:.1f} s")
        config = {
            "name": "heartbeat-bench",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": {
                "name": "random",
                "metric": "loss",
                "max_trials": a.trials,
                "max_concurrent_trials": a.trials,
                "max_length": {"batches": 100},
            },
        }
        client.post("/experiments", data={"config": yaml.safe_dump(config)}).raise_for_status()
        # Baseline: registered, silent (the agent timeout is longer than the window).
        time.sleep(2.0)
        c0, w0 = tree_cpu_seconds(master.pid), time.monotonic()
        time.sleep(min(a.seconds, 10.0))
        idle = 100 * (tree_cpu_seconds(master.pid) - c0) / (time.monotonic() - w0)
        # A first round hands the trials out; the window measures the steady state.
        asyncio.run(heartbeat_phase(master.url, token, ids, a.interval, a.interval))
        c0, w0 = tree_cpu_seconds(master.pid), time.monotonic()
        latencies, errors = asyncio.run(
            heartbeat_phase(master.url, token, ids, a.interval, a.seconds)
        )
        busy_cpu, busy_wall = tree_cpu_seconds(master.pid) - c0, time.monotonic() - w0
        busy = 100 * busy_cpu / busy_wall
        running = client.get("/experiments/1/trials").json()["trials"]
        print(
            f"\n{a.agents} agents, a heartbeat every {a.interval:g} s "
            f"({a.agents / a.interval:.0f}/s), {len(running)} trials handed out"
        )
        print(
            f"  master CPU: silent agents {idle:.1f}% of a core (baseline); heartbeating "
            f"{busy:.1f}% (target <= 25%)"
        )
        if latencies:
            # On a loaded machine the agents may fall behind their interval: the CPU a
            # heartbeat costs the master is the figure that does not depend on it.
            per_beat = busy_cpu / len(latencies)
            budget = 0.25 * a.interval / a.agents
            print(
                f"  heartbeats answered: {len(latencies) / busy_wall:.0f}/s of "
                f"{a.agents / a.interval:.0f}/s offered; master CPU per heartbeat "
                f"{per_beat * 1000:.2f} ms (25% of a core at the offered rate: "
                f"{budget * 1000:.2f} ms)"
            )
            lat = sorted(latencies)
            print(
                f"  heartbeat latency: median {statistics.median(lat) * 1000:.1f} ms, p99 "
                f"{lat[int(0.99 * (len(lat) - 1))] * 1000:.1f} ms ({len(lat)} heartbeats, "
                f"{len(errors)} errors)"
            )
        for e in errors[:3]:
            print(f"  error: {e}")
        client.close()
        passes = time_passes(tmp / "master.db", tmp, a.passes, timeout)
        walls, cpus = [w for w, _ in passes], [c for _, c in passes]
        print(
            f"  scheduling pass (copy of the database, this process): median "
            f"{statistics.median(walls) * 1000:.1f} ms (CPU {statistics.median(cpus) * 1000:.1f}"
            f" ms), worst {max(walls) * 1000:.1f} ms (target <= 100 ms)"
        )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
