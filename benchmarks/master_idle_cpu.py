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

Then (issue 34) the cost of Prometheus: with the trials still running, windows of
``--seconds`` alternate between no traffic and a scraper that fetches both of the
master's pages (``/prom/det-state-metrics`` and ``/debug/prom/metrics``, as an admin)
every ``--scrape-interval`` seconds, ``--rounds`` of each; the scraper runs in this
process, so only the master's work is counted. Target: the scraped windows' mean within
10% of the unscraped windows' mean (printed with the 95% interval of the per-round
ratios). ``/proc`` counts CPU in ticks of 10 ms, so one window of 10 s measures to +-1
ms/s; longer ``--seconds`` resolve finer. Last, ``--burst`` scrape pairs back to back
give the master's CPU per pair (less its unscraped rate over the burst's wall time),
finer than the windows resolve, beside the budget the target leaves: 10% of the
unscraped rate times ``--scrape-interval``.

Linux only (``/proc``).

Usage::

    python benchmarks/master_idle_cpu.py [--trials 32] [--seconds 10]
        [--scrape-interval 5] [--rounds 3] [--burst 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
import httpx  # noqa: E402
from master_long_poll_cpu import cpu_ms_per_s, tree_cpu_seconds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst", type=int, default=200)
    args = parser.parse_args()
    if args.trials < 1 or args.seconds <= 0 or args.scrape_interval <= 0 or args.rounds < 0:
        parser.error("--trials must be >= 1, --rounds >= 0, --seconds and --scrape-interval > 0")
    if args.burst < 0:
        parser.error("--burst must be >= 0")
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
        if args.rounds:
            scraping(client, url, pid, args)
        print(f"load average now: {open('/proc/loadavg').read().strip()}")
    return 0


def scraping(client: httpx.Client, url: str, pid: int, args: argparse.Namespace) -> None:
    """Alternate unscraped and scraped windows; print both means and their ratio."""
    headers = {"Authorization": client.headers["Authorization"]}
    sizes: list[int] = []

    def scrape(stop: threading.Event) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            while True:
                for path in ("/prom/det-state-metrics", "/debug/prom/metrics"):
                    r = c.get(path)
                    r.raise_for_status()
                    sizes.append(len(r.content))
                if stop.wait(args.scrape_interval):
                    return

    # Warm up: a page's first scrape compiles its SQL statements and fills caches, which
    # a Prometheus that scrapes all day pays once.
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        for _ in range(3):
            for path in ("/prom/det-state-metrics", "/debug/prom/metrics"):
                c.get(path).raise_for_status()
    quiet: list[float] = []
    scraped: list[float] = []
    for _ in range(args.rounds):
        quiet.append(cpu_ms_per_s(pid, args.seconds))
        stop = threading.Event()
        thread = threading.Thread(target=scrape, args=(stop,), daemon=True)
        thread.start()
        scraped.append(cpu_ms_per_s(pid, args.seconds))
        stop.set()
        thread.join(timeout=30)
    q, s = statistics.mean(quiet), statistics.mean(scraped)
    ratios = [b / max(a, 0.01) for a, b in zip(quiet, scraped, strict=True)]
    interval = ""
    if len(ratios) >= 2:
        half = _T95[min(len(ratios) - 1, len(_T95)) - 1] * statistics.stdev(ratios)
        half /= len(ratios) ** 0.5
        interval = f", per-round ratios {statistics.mean(ratios):.3f} +- {half:.3f} (95%)"
    print(
        f"master CPU, {args.trials} running trials: not scraped {q:.2f} ms/s "
        f"({', '.join(f'{x:.2f}' for x in quiet)}); scraped every {args.scrape_interval:g} s "
        f"{s:.2f} ms/s ({', '.join(f'{x:.2f}' for x in scraped)}); ratio {s / max(q, 0.01):.3f} "
        f"(target <= 1.10){interval}; {len(sizes)} pages of "
        f"{statistics.mean(sizes) / 1024:.1f} KiB mean"
    )
    if args.burst:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            c0, t0 = tree_cpu_seconds(pid), time.monotonic()
            for _ in range(args.burst):
                for path in ("/prom/det-state-metrics", "/debug/prom/metrics"):
                    c.get(path).raise_for_status()
            wall = time.monotonic() - t0
            cpu = tree_cpu_seconds(pid) - c0
        per_pair = (1e3 * cpu - q * wall) / args.burst
        print(
            f"master CPU per scrape pair: {per_pair:.2f} ms ({args.burst} pairs back to back in "
            f"{wall:.1f} s, {1e3 * cpu:.0f} CPU-ms less {q:.2f} ms/s unscraped); budget "
            f"{0.1 * q * args.scrape_interval:.2f} ms (10% of the unscraped rate x "
            f"{args.scrape_interval:g} s)"
        )


_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t, two-sided 95%, for 1..10 degrees of freedom (any statistics table;
``scipy.stats.t.ppf(0.975, df)``); more rounds use the last."""


if __name__ == "__main__":
    raise SystemExit(main())
