"""1,000 agents heartbeating every 5 s: the master's CPU and its scheduling pass
(issue 37 scope 6).

Starts a real master (a subprocess, SQLite in a temporary directory), registers
``--agents`` pretend agents of ``--slots`` CPU slots each over REST and creates one
``random`` search of ``--trials`` trials, as many at once; the agents are lightweight:
asyncio tasks spread over ``--clients`` processes (default 4), each process sharing one
keep-alive HTTP client among its agents (one process on a loaded 2-core machine was
starved and offered only 5-16 of 200 beats/s). Each agent heartbeats every
``--interval`` seconds on a fixed schedule (phases spread evenly, so ``agents /
interval`` heartbeats a second are offered), takes the task specs the master hands it
and reports them running from then on; nothing else talks to the master (no trial
process exists: a "running" trial only heartbeats through its agent). Rounds of
heartbeats, one agent at a time, hand the trials out first, and one more round lists
them as running (the steady state: see :func:`settle`); the clients then start
together, and the window measured follows their first two seconds.

Printed, side by side:

- the master's CPU (with its metric fold worker), in % of one core, over ``--seconds``
  with the trials running and the agents silent (the baseline of the same run: the
  loop's own work) and with every agent heartbeating, and per heartbeat, whole and
  above the baseline; target <= 25% with 1,000 agents every 5 s;
- heartbeats offered and answered a second in the window, beside the client processes'
  CPU (when the answered rate falls short, the clients or the master did not keep up:
  the master's CPU per heartbeat is then the figure to read);
- heartbeat latency (median, p99) as the agents saw it;
- one scheduling pass (``dauntless.master.loop.schedule_pass``: reap lost agents,
  timeouts, placement) timed in this process on a copy of the master's database taken
  at the end (median and worst of ``--passes``, after a first pass printed apart: a fresh
  process compiles its SQL statements in it, which the master did at its start); target
  <= 100 ms. The master does not
  report its own pass times, so the copy is what can be timed without changing it.

The summary gives the master's CPU per heartbeat pooled over all runs, with a 95%
bootstrap interval over sub-windows of ``--window`` seconds (default ``--interval``:
each agent beats once per sub-window; the master's CPU is read at each boundary and
the beats counted by the times their answers came: when the clients fall behind, a
beat sent in one sub-window may be served in a later one), and the share of a core that is at the offered
rate. With ``--baseline-src`` (e.g. a checkout of main's ``src/``) a master running
that package is measured too, alternating with this one over ``--rounds``, and the
ratio of their CPU per heartbeat is printed with its interval. After the window, one
agent sends ``--sequential`` quiet beats one after another: the master's CPU per beat
without the queueing that starved clients on a loaded machine add (the concurrent
window's figure then also carries the loop's fixed work over fewer beats).

Usage::

    python benchmarks/agent_heartbeats.py [--agents 1000] [--slots 8] [--trials 1000]
        [--interval 5] [--seconds 30] [--passes 7] [--clients 4] [--window S]
        [--baseline-src DIR] [--rounds N] [--sequential N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
from master_long_poll_cpu import tree_cpu_seconds  # noqa: E402

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_HEADER  # noqa: E402


async def agent_loop(
    client: httpx.AsyncClient,
    agent_id: str,
    token: str,
    interval: float,
    first: float,
    stop_at: float,
    running: list[str],
    beats: list[tuple[float, float]],
    errors: list[str],
) -> None:
    """One pretend agent, presenting its agent ``token`` as a real agent does: a
    heartbeat every ``interval`` s from ``first`` (monotonic) on,
    until ``stop_at``, reporting ``running`` (the allocations it was handed before) and
    what the master hands it from then on, so the master sees its trials alive.
    Appends ``(send time, latency)`` in seconds to ``beats`` per answered heartbeat."""
    running = list(running)
    headers = {AGENT_TOKEN_HEADER: token}
    due = first
    while due < stop_at:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        t0 = time.monotonic()
        try:
            r = await client.post(
                f"/agents/{agent_id}/heartbeat", json={"running": running}, headers=headers
            )
            r.raise_for_status()
            running += [spec["allocation_id"] for spec in r.json().get("start", [])]
            beats.append((t0, time.monotonic() - t0))
        except httpx.HTTPError as exc:
            errors.append(f"{agent_id}: {exc}")
        due += interval  # on the schedule: a late beat does not push the next ones back


async def _client_main(
    url: str,
    agents: list[tuple[str, str, float, list[str]]],
    interval: float,
    stop_at: float,
) -> tuple[list[tuple[float, float]], list[str]]:
    beats: list[tuple[float, float]] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(
        base_url=url + "/api/v1",
        timeout=60,
        limits=limits,
    ) as client:
        await asyncio.gather(
            *(
                agent_loop(client, a, token, interval, first, stop_at, running, beats, errors)
                for a, token, first, running in agents
            )
        )
    return beats, errors


def client_process(
    conn: Connection,
    url: str,
    agents: list[tuple[str, str]],
    offsets: list[float],
    running: list[list[str]],
    interval: float,
    duration: float,
) -> None:
    """One client process: its share of the pretend agents, as asyncio tasks on one
    keep-alive HTTP client (``agents``: ``(id, agent token)``). It says ``"ready"`` on ``conn``, waits for the start time
    (monotonic s), beats from ``start + offset`` of each agent until ``start +
    duration``, and sends back ``{"beats": [(send time, latency s)], "errors": [str],
    "cpu": CPU seconds of this process}``. CLOCK_MONOTONIC is one clock for every
    process of the machine, so the parent compares the send times with its window."""
    conn.send("ready")
    start = conn.recv()
    c0 = time.process_time()
    plan = [
        (a, token, start + off, run)
        for (a, token), off, run in zip(agents, offsets, running, strict=True)
    ]
    beats, errors = asyncio.run(_client_main(url, plan, interval, start + duration))
    conn.send({"beats": beats, "errors": errors, "cpu": time.process_time() - c0})
    conn.close()


def heartbeat_run(
    url: str,
    tokens: dict[str, str],
    running: dict[str, list[str]],
    interval: float,
    warmup: float,
    seconds: float,
    clients: int,
    master_pid: int,
    window: float,
) -> dict[str, Any]:
    """Every agent heartbeats for ``warmup + seconds`` from ``clients`` processes (a
    single Python process on a loaded 2-core machine offered only 5-16 of 200 beats/s:
    issue 37), each agent reporting its ``running`` allocations; the first ``warmup``
    seconds are not measured, the last ``seconds`` are the measured span, read in
    sub-windows of ``window`` seconds (the master's CPU read at each boundary). The
    processes are forked (no import to wait for) and start together once all of them
    said they are ready.

    Returns ``{"beats": [(send, latency)] answered in the span, "errors", "client_cpu": CPU
    seconds of all client processes over the whole run, "master_cpu": the master's CPU
    seconds in the span, "wall": the span's seconds, "windows": [(master CPU s, beats
    answered, wall s)] per sub-window}``.

    Raises:
        RuntimeError: a client process ended without its results.
    """
    agents = list(tokens.items())
    n = len(agents)
    # Phases spread evenly over the interval, and the agents dealt round-robin over the
    # processes, so each process offers the same rate.
    offsets = [interval * i / n for i in range(n)]
    mp = multiprocessing.get_context("fork")
    procs, conns = [], []
    for k in range(clients):
        parent_end, child_end = mp.Pipe()
        proc = mp.Process(
            target=client_process,
            args=(child_end, url, agents[k::clients], offsets[k::clients])
            + ([running.get(a, []) for a, _ in agents[k::clients]], interval, warmup + seconds),
            daemon=True,
        )
        proc.start()
        procs.append(proc)
        conns.append(parent_end)
    try:
        for conn in conns:
            conn.recv()  # "ready"
        start = time.monotonic() + 0.2
        for conn in conns:
            conn.send(start)
        window0, stop_at = start + warmup, start + warmup + seconds
        bounds = [window0]
        while bounds[-1] + window <= stop_at + 1e-9:
            bounds.append(bounds[-1] + window)
        if bounds[-1] < stop_at - 1e-9:
            bounds.append(stop_at)
        marks: list[tuple[float, float]] = []  # (monotonic s, master CPU s) at each bound
        for bound in bounds:
            time.sleep(max(0.0, bound - time.monotonic()))
            marks.append((time.monotonic(), tree_cpu_seconds(master_pid)))
        results = []
        for conn in conns:
            if not conn.poll(600):
                raise RuntimeError("a heartbeat client process did not answer in 600 s")
            results.append(conn.recv())
    except EOFError:
        raise RuntimeError("a heartbeat client process ended without its results") from None
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    # Counted when answered: the master's CPU for a beat is spent up to its answer, which
    # comes long after the send when the clients or the master fall behind.
    beats = [b for r in results for b in r["beats"] if window0 <= b[0] + b[1] < stop_at]
    windows = []
    for (w0, c0), (w1, c1), b0, b1 in zip(marks, marks[1:], bounds, bounds[1:], strict=False):
        answered = sum(1 for t, lat in beats if b0 <= t + lat < b1)
        windows.append((c1 - c0, answered, w1 - w0))
    return {
        "beats": beats,
        "errors": [e for r in results for e in r["errors"]],
        "client_cpu": sum(r["cpu"] for r in results),
        "master_cpu": marks[-1][1] - marks[0][1],
        "wall": marks[-1][0] - marks[0][0],
        "windows": windows,
    }


def hand_out(
    client: httpx.Client, tokens: dict[str, str], trials: int, timeout: float
) -> dict[str, list[str]]:
    """Heartbeat every agent in turn, in rounds, until ``trials`` allocations were handed
    out or ``timeout`` seconds passed (the master places the trials as it goes): the
    steady state that the window then measures has every trial running, without the
    cost of handing out the specs in it (``tokens``: agent id -> its agent token).
    Returns each agent's allocation ids."""
    running: dict[str, list[str]] = {a: [] for a in tokens}
    handed, deadline = 0, time.monotonic() + timeout
    while handed < trials and time.monotonic() < deadline:
        for a, token in tokens.items():
            new = [spec["allocation_id"] for spec in _beat(client, a, token, running[a])]
            running[a] += new
            handed += len(new)
    return running


def settle(client: httpx.Client, tokens: dict[str, str], running: dict[str, list[str]]) -> None:
    """One more heartbeat of every agent in turn, listing the allocations it was handed
    (as a real agent's next beat does): the first beat after a hand-over takes the
    master's full path, later ones that change nothing are answered from its memory
    (issue 37), so without this round the window would measure the end of the hand-out
    whenever the clients fall behind. In the long run one beat in ``ANSWER_MAX_AGE /
    interval`` (1 in 12 at 5 s) takes the full path again; a window shorter than that
    age sees few of them."""
    for a, token in tokens.items():
        _beat(client, a, token, running[a])


def _beat(client: httpx.Client, agent: str, token: str, running: list[str]) -> list[dict]:
    """One heartbeat of ``agent`` listing ``running`` (allocation ids); the specs of the
    allocations the master hands it to start. Raises httpx.HTTPStatusError on an error
    answer."""
    r = client.post(
        f"/agents/{agent}/heartbeat",
        json={"running": running},
        headers={AGENT_TOKEN_HEADER: token},
    )
    r.raise_for_status()
    return r.json().get("start", [])


SEQUENTIAL_BLOCK = 100
"""Sequential beats per unit of the interval (the master's CPU read around each)."""


def sequential_beats(
    client: httpx.Client,
    agent: str,
    token: str,
    running: list[str],
    n: int,
    master_pid: int,
) -> list[tuple[float, int, float]]:
    """``n`` quiet heartbeats of one ``agent`` one after another, nothing else talking
    to the master: its CPU per beat without queueing (which a loaded machine's starved
    clients add to the concurrent window). Returns (master CPU s, beats, wall s) per
    block of :data:`SEQUENTIAL_BLOCK` beats."""
    blocks = []
    for start in range(0, n, SEQUENTIAL_BLOCK):
        k = min(SEQUENTIAL_BLOCK, n - start)
        c0, w0 = tree_cpu_seconds(master_pid), time.monotonic()
        for _ in range(k):
            _beat(client, agent, token, running)
        blocks.append((tree_cpu_seconds(master_pid) - c0, k, time.monotonic() - w0))
    return blocks


def time_passes(
    db_file: Path, data_dir: Path, passes: int, agent_timeout: float
) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each ``schedule_pass`` (maintenance and placement) on a copy of the
    master's database, in this process, with the master's ``agent_timeout`` (no agent
    is lost in the copy): ``passes + 1`` of them, the first in a fresh process (cold)."""
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
    # One more pass than asked, the first: a fresh process compiles SQLAlchemy's
    # statements and fills the ORM's caches in it, which the master did at its start.
    for _ in range(passes + 1):
        t0, c0 = time.perf_counter(), time.thread_time()
        loop.schedule_pass(ctx, maintenance=True)
        out.append((time.perf_counter() - t0, time.thread_time() - c0))
    db.dispose()
    return out


def one_run(a: argparse.Namespace, src: str | None, label: str, passes: int) -> dict[str, Any]:
    """One master (``src``: the package directory it runs, None: the installed one)
    with ``a.agents`` agents and ``a.trials`` trials, measured as the module says;
    prints its figures under ``label``. ``passes``: scheduling passes to time on a copy
    of its database afterwards (0: none; they run this process's own package).

    Returns ``{"windows": [(master CPU s, beats, wall s)], "sequential": the same per
    block of :func:`sequential_beats`, "idle": master CPU s per s with the agents
    silent, "beats": beats in the span, "wall": its seconds}``."""
    timeout = max(600.0, 6 * a.interval)  # no agent is lost while this process is slow
    with (
        tempfile.TemporaryDirectory(prefix="dauntless-heartbeats-") as tmp_s,
        _cluster.master(
            Path(tmp_s) / "data",
            db_url=f"sqlite:///{tmp_s}/master.db",
            src=src,
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
        # As real agents: registered with the cluster secret (which the master made in
        # its data directory), then each presents its own agent token. A user's token
        # would make every heartbeat a user's request, written to the audit trail.
        secret = (tmp / "data" / "cluster_secret").read_text().strip()
        agent_client = httpx.Client(base_url=master.url + "/api/v1", timeout=60)
        tokens: dict[str, str] = {}
        t0 = time.monotonic()
        for agent_id in ids:
            body = {"id": agent_id, "hostname": agent_id, "slots": slots}
            r = agent_client.post("/agents", json=body, headers={CLUSTER_SECRET_HEADER: secret})
            r.raise_for_status()
            tokens[agent_id] = r.json()["token"]
        print(
            f"[{label}] registered {a.agents} agents of {a.slots} slots in "
            f"{time.monotonic() - t0:.1f} s"
        )
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
        # Rounds of heartbeats hand the trials out; the window measures the steady state.
        t0 = time.monotonic()
        running = hand_out(agent_client, tokens, a.trials, timeout=300.0)
        handed = sum(map(len, running.values()))
        print(f"[{label}] handed out {handed} trials in {time.monotonic() - t0:.1f} s")
        settle(agent_client, tokens, running)
        # Baseline: the trials running, the agents silent (the agent timeout is longer
        # than the window): what the master's loop costs with no heartbeat.
        time.sleep(2.0)
        c0, w0 = tree_cpu_seconds(master.pid), time.monotonic()
        time.sleep(min(a.seconds, 10.0))
        idle_cpu, idle_wall = tree_cpu_seconds(master.pid) - c0, time.monotonic() - w0
        idle = 100 * idle_cpu / idle_wall
        run = heartbeat_run(
            master.url,
            tokens,
            running,
            a.interval,
            2.0,
            a.seconds,
            a.clients,
            master.pid,
            a.window or a.interval,
        )
        beats, errors, busy_wall = run["beats"], run["errors"], run["wall"]
        busy = 100 * run["master_cpu"] / busy_wall
        offered = a.agents / a.interval
        print(
            f"[{label}] {a.agents} agents, a heartbeat every {a.interval:g} s "
            f"({offered:.0f}/s), {handed} trials running"
        )
        print(
            f"  heartbeats: {offered:.0f}/s offered, {len(beats) / busy_wall:.1f}/s answered "
            f"in the {busy_wall:.1f} s window ({a.clients} client processes, their CPU "
            f"{run['client_cpu']:.1f} s in all)"
        )
        print(
            f"  master CPU: trials running, agents silent {idle:.1f}% of a core (baseline); "
            f"heartbeating {busy:.1f}% (target <= 25%)"
        )
        if beats:
            # The CPU a heartbeat costs the master does not depend on whether the
            # clients kept up; 25% of a core at the offered rate is its budget.
            cpu_per_beat = run["master_cpu"] / len(beats)
            above = (run["master_cpu"] - idle_cpu / idle_wall * busy_wall) / len(beats)
            budget = 0.25 / offered
            print(
                f"  master CPU per heartbeat {cpu_per_beat * 1000:.2f} ms, of which above the "
                f"baseline {above * 1000:.2f} ms (25% of a core at the offered rate: "
                f"{budget * 1000:.2f} ms)"
            )
            lat = sorted(latency for _, latency in beats)
            print(
                f"  heartbeat latency: median {statistics.median(lat) * 1000:.1f} ms, p99 "
                f"{lat[int(0.99 * (len(lat) - 1))] * 1000:.1f} ms ({len(lat)} heartbeats, "
                f"{len(errors)} errors)"
            )
        for e in errors[:3]:
            print(f"  error: {e}")
        blocks = sequential_beats(
            agent_client, ids[0], tokens[ids[0]], running[ids[0]], a.sequential, master.pid
        )
        if blocks:
            print(
                f"  one agent's {a.sequential} sequential quiet beats: "
                f"{per_beat(blocks) * 1000:.3f} ms of master CPU each, "
                f"{1000 * sum(w for _, _, w in blocks) / a.sequential:.3f} ms apart"
            )
        client.close()
        agent_client.close()
        if passes:
            cold, *times = time_passes(tmp / "master.db", tmp, passes, timeout)
            walls, cpus = [w for w, _ in times], [c for _, c in times]
            print(
                f"  scheduling pass (copy of the database, this process): median "
                f"{statistics.median(walls) * 1000:.1f} ms (CPU "
                f"{statistics.median(cpus) * 1000:.1f} ms), worst {max(walls) * 1000:.1f} ms "
                f"of {passes} (target <= 100 ms); the first, cold, {cold[0] * 1000:.1f} ms "
                f"(CPU {cold[1] * 1000:.1f} ms) before them"
            )
    return {
        "windows": run["windows"],
        "sequential": blocks,
        "idle": idle_cpu / idle_wall,
        "beats": len(beats),
        "wall": busy_wall,
    }


BOOTSTRAP_RESAMPLES = 2000


def per_beat(windows: list[tuple[float, int, float]]) -> float:
    """Master CPU seconds per heartbeat over ``windows`` (CPU s, beats, wall s): the
    pooled ratio, total CPU over total beats."""
    beats = sum(b for _, b, _ in windows)
    return sum(c for c, _, _ in windows) / beats if beats else float("nan")


def bootstrap_interval(
    sides: list[list[tuple[float, int, float]]],
    stat: Any,
    seed: int = 0,
) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval (Efron & Tibshirani, *An Introduction to the
    Bootstrap*, 1993, ch. 13) of ``stat(*sides)``, each side's sub-windows resampled
    with replacement independently (the sub-windows are the units: consecutive
    ``--window`` spans of one or more runs)."""
    rng = random.Random(seed)
    draws = sorted(
        stat(*(rng.choices(side, k=len(side)) for side in sides))
        for _ in range(BOOTSTRAP_RESAMPLES)
    )
    return draws[int(0.025 * BOOTSTRAP_RESAMPLES)], draws[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]


def summary(label: str, runs: list[dict[str, Any]], offered: float) -> tuple[list[Any], list[Any]]:
    """Print ``label``'s CPU per heartbeat over all its ``runs`` with its 95% interval,
    and the share of a core that is at the ``offered`` rate (beats/s); returns the
    pooled sub-windows and sequential blocks."""
    windows = [w for r in runs for w in r["windows"]]
    ms = per_beat(windows) * 1000
    lo, hi = bootstrap_interval([windows], per_beat)
    share = per_beat(windows) * offered * 100
    print(
        f"  {label}: {ms:.3f} ms of master CPU per heartbeat [95% {lo * 1000:.3f}, "
        f"{hi * 1000:.3f}] over {len(windows)} sub-windows of {len(runs)} run(s) = "
        f"{share:.1f}% of a core at {offered:.0f} beats/s [{lo * offered * 100:.1f}, "
        f"{hi * offered * 100:.1f}] (target <= 25%); agents silent "
        f"{100 * statistics.mean(r['idle'] for r in runs):.1f}%"
    )
    blocks = [b for r in runs for b in r["sequential"]]
    if blocks:
        lo, hi = bootstrap_interval([blocks], per_beat)
        print(
            f"    one agent's sequential quiet beats: {per_beat(blocks) * 1000:.3f} ms of "
            f"master CPU each [95% {lo * 1000:.3f}, {hi * 1000:.3f}] over {len(blocks)} "
            f"blocks of {SEQUENTIAL_BLOCK}"
        )
    return windows, blocks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--slots", type=int, default=8, help="CPU slots per agent")
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--interval", type=float, default=5.0, help="seconds between heartbeats")
    p.add_argument("--seconds", type=float, default=30.0, help="measurement window")
    p.add_argument(
        "--window",
        type=float,
        default=0.0,
        help="sub-window seconds for the intervals (default: --interval, one beat per agent)",
    )
    p.add_argument("--passes", type=int, default=7)
    p.add_argument(
        "--clients",
        type=int,
        default=4,
        help="processes sharing the pretend agents (default 4)",
    )
    p.add_argument(
        "--baseline-src",
        default=None,
        help="a package directory (e.g. a checkout of main's src/) whose master is "
        "measured too, alternating with this one's, and compared",
    )
    p.add_argument("--rounds", type=int, default=1, help="runs of each master (alternating)")
    p.add_argument(
        "--sequential",
        type=int,
        default=1000,
        help="one agent's quiet beats one after another after the window (0: none)",
    )
    a = p.parse_args()
    if (
        min(a.agents, a.slots, a.trials, a.clients, a.rounds) < 1
        or a.interval <= 0
        or a.seconds <= 0
        or a.window < 0
        or a.sequential < 0
    ):
        p.error(
            "--agents, --slots, --trials, --clients, --rounds must be >= 1; --interval, "
            "--seconds > 0; --window, --sequential >= 0"
        )
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    c0 = time.process_time()
    mine: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for k in range(a.rounds):
        if a.baseline_src:
            theirs.append(one_run(a, a.baseline_src, f"baseline {k + 1}", 0))
        # The scheduling pass runs this process's package: timed on this master's copy.
        mine.append(one_run(a, None, f"this {k + 1}", a.passes if k == 0 else 0))
    offered = a.agents / a.interval
    print(f"\nsummary ({a.rounds} round(s), sub-windows of {a.window or a.interval:g} s):")
    here, here_seq = summary("this master", mine, offered)
    if theirs:
        base, base_seq = summary("baseline", theirs, offered)

        def ratio(x: list[Any], y: list[Any]) -> float:
            return per_beat(x) / per_beat(y)

        lo, hi = bootstrap_interval([here, base], ratio)
        print(
            f"  CPU per heartbeat, this / baseline: {ratio(here, base):.3f} "
            f"[95% {lo:.3f}, {hi:.3f}]"
        )
        if here_seq and base_seq:
            lo, hi = bootstrap_interval([here_seq, base_seq], ratio)
            print(
                f"  CPU per sequential quiet beat, this / baseline: "
                f"{ratio(here_seq, base_seq):.3f} [95% {lo:.3f}, {hi:.3f}]"
            )
    print(f"  this process's CPU: {time.process_time() - c0:.1f} s")
    print(f"load average now: {open('/proc/loadavg').read().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
