"""The master's CPU with many running trials and no traffic (issue 19, scope 3).

Starts a real master (a subprocess, SQLite in a temporary directory, agent timeout one
hour so that no heartbeat is needed), registers a pretend agent with ``--trials`` CPU
slots over REST, creates one ``random`` search of that many trials and takes every
trial's task spec in a heartbeat, so that they all count as RUNNING. Nothing else
talks to the master then: no metrics, no long polls, no heartbeats. It reads the
master process's CPU time (``/proc/<pid>/stat``) over ``--seconds``: first before the
experiment exists (the baseline of the same run: the idle master's own loops with
nothing to do), then with the trials running. Target: <= 10 ms of CPU per second with
32 running trials.

Linux only (``/proc``).

Usage::

    python benchmarks/master_idle_cpu.py [--trials 32] [--seconds 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
import httpx  # noqa: E402
from master_long_poll_cpu import cpu_ms_per_s  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.trials < 1 or args.seconds <= 0:
        parser.error("--trials must be >= 1 and --seconds > 0")
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    with (
        tempfile.TemporaryDirectory(prefix="dauntless-bench-") as tmp,
        _cluster.master(Path(tmp), start_new_session=True) as master,
    ):
        url = master.url
        client = httpx.Client(base_url=url + "/api/v1", timeout=30)
        r = client.post("/auth/login", json={"username": "admin", "password": ""})
        r.raise_for_status()
        client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        slots = [{"id": str(i), "type": "cpu"} for i in range(args.trials)]
        client.post(
            "/agents", json={"id": "bench-agent", "hostname": "localhost", "slots": slots}
        ).raise_for_status()
        pid = master.pid
        time.sleep(1.0)
        idle = cpu_ms_per_s(pid, args.seconds)
        config = {
            "name": "idle-bench",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": {
                "name": "random",
                "metric": "loss",
                "max_trials": args.trials,
                "max_concurrent_trials": args.trials,
                "max_length": {"batches": 100},
            },
        }
        client.post("/experiments", data={"config": yaml.safe_dump(config)}).raise_for_status()
        started: set[str] = set()
        deadline = time.time() + 60
        while len(started) < args.trials:
            if time.time() > deadline:
                raise RuntimeError(f"only {len(started)} trials started in 60 s")
            r = client.post("/agents/bench-agent/heartbeat", json={"running": sorted(started)})
            r.raise_for_status()
            started |= {spec["allocation_id"] for spec in r.json()["start"]}
            time.sleep(0.1)
        time.sleep(1.0)
        busy = cpu_ms_per_s(pid, args.seconds)
        print(
            f"master CPU, no traffic: nothing running {idle:.1f} ms/s; {args.trials} running "
            f"trials {busy:.1f} ms/s (ratio {busy / max(idle, 0.1):.1f}x)"
        )
        print(f"load average now: {open('/proc/loadavg').read().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
