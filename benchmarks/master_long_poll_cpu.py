"""The master's CPU while running trials wait on the preemption long poll.

Every running trial keeps one ``GET /allocations/{id}/signals/preemption?timeout_seconds=N``
open on the master. This benchmark starts a real master (a subprocess, SQLite in a
temporary directory), plays an agent over REST to get one running trial, and keeps
``--pollers`` clients long-polling its allocation (each re-polls when an answer comes,
as the trial's watcher does). It reads the master process's CPU time (user + system,
``/proc/<pid>/stat``) over ``--seconds`` with no poller (the idle master's own loops,
the baseline of the same run) and then with the pollers, and prints the CPU each
waiting poller adds, in milliseconds of CPU per second.

Then it pauses the experiment while one poller waits, and prints how long after the
pause the poller got ``{"preempt": true}`` (the signal's latency), over ``--pauses``
pause / activate cycles.

Linux only (``/proc``).

Usage::

    python benchmarks/master_long_poll_cpu.py [--pollers 50] [--seconds 10] [--pauses 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
from harness_overhead import FakeAgent, digits_config  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of process ``pid`` and of its live descendants (the master's
    metric fold worker, say), read from ``/proc/<pid>/task/*/children``."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            total += cpu_seconds(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited meanwhile
    return total


def cpu_ms_per_s(pid: int, seconds: float) -> float:
    """The process's CPU, with its live descendants' (the master's metric fold worker),
    over the next ``seconds``, in ms of CPU per second."""
    c0, t0 = tree_cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 1e3 * (tree_cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pollers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pauses", type=int, default=5)
    args = parser.parse_args()
    if args.pollers < 1 or args.seconds <= 0 or args.pauses < 1:
        parser.error("--pollers and --pauses must be >= 1 and --seconds > 0")
    with (
        tempfile.TemporaryDirectory(prefix="dauntless-bench-") as tmp,
        _cluster.master(Path(tmp), start_new_session=True) as master,
    ):
        url, pid = master.url, master.pid
        agent = FakeAgent(url)
        spec = agent.start_trial(digits_config(100))

        def signal_path(spec: dict) -> str:
            return f"/allocations/{spec['allocation_id']}/signals/preemption"

        def client(spec: dict) -> httpx.Client:
            token = spec["env"]["DET_SESSION_TOKEN"]
            return httpx.Client(
                base_url=url + "/api/v1", timeout=70, headers={"Authorization": f"Bearer {token}"}
            )

        time.sleep(1.0)
        idle = cpu_ms_per_s(pid, args.seconds)
        stop = threading.Event()

        def poll() -> None:
            with client(spec) as c:
                while not stop.is_set():
                    c.get(signal_path(spec), params={"timeout_seconds": 5}).raise_for_status()

        threads = [threading.Thread(target=poll, daemon=True) for _ in range(args.pollers)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        busy = cpu_ms_per_s(pid, args.seconds)
        stop.set()
        for t in threads:
            t.join(10)
        per_poller = (busy - idle) / args.pollers
        print(
            f"master CPU: idle {idle:.1f} ms/s; with {args.pollers} waiting pollers "
            f"{busy:.1f} ms/s: {per_poller:.2f} ms/s per waiting trial"
        )

        latencies: list[float] = []
        for i in range(args.pauses):
            if i:  # a new experiment; the paused one's trial has exited
                spec = agent.start_trial(digits_config(100))
            answer: dict = {}

            def wait(spec: dict = spec, answer: dict = answer) -> None:
                with client(spec) as c:
                    answer.update(c.get(signal_path(spec), params={"timeout_seconds": 30}).json())
                answer["at"] = time.monotonic()

            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(0.5 + 0.25 * i / args.pauses)  # pauses at varied phases of a check
            paused = time.monotonic()
            exp_id = spec["env"]["DET_EXPERIMENT_ID"]
            agent.client.post(f"/experiments/{exp_id}/pause").raise_for_status()
            waiter.join(40)
            if not answer.get("preempt"):
                raise RuntimeError(f"the long poll answered {answer} after a pause")
            latencies.append(answer["at"] - paused)
            agent.exited(spec["allocation_id"])
        print(
            f"signal latency after a pause: median {1e3 * statistics.median(latencies):.0f} "
            f"ms, max {1e3 * max(latencies):.0f} ms ({args.pauses} pauses)"
        )
        print(
            json.dumps(
                {
                    "idle_master_ms_per_s": round(idle, 1),
                    "pollers": args.pollers,
                    "with_pollers_ms_per_s": round(busy, 1),
                    "ms_per_s_per_waiting_trial": round(per_poller, 2),
                    "signal_latency_ms_median": round(1e3 * statistics.median(latencies)),
                    "signal_latency_ms_max": round(1e3 * max(latencies)),
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
