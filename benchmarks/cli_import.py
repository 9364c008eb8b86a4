"""CPU seconds of ``det -h`` and ``import dauntless.core`` against ``python -c pass``.

Each command runs ``--runs`` times in a fresh interpreter (the same one running this
script); the CPU time (user + system, from ``wait4``) and wall time of each child are
taken and the median printed, with the baseline ``python -c pass`` measured in the same
run and the load average. Target: ``det -h`` <= 0.1 s CPU.

Usage::

    python benchmarks/cli_import.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass (baseline)": ["-c", "pass"],
    "det -h": ["-m", "dauntless.cli", "-h"],
    "det experiment create -h": ["-m", "dauntless.cli", "experiment", "create", "-h"],
    "import dauntless.core": ["-c", "import dauntless.core"],
}


def one(args: list[str]) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of one ``python ARGS`` child."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"python {' '.join(args)} failed")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    """Run every case and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    opts = parser.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]}")
    base_cpu = None
    for name, args in CASES.items():
        one(args)  # warm the page cache and .pyc files
        runs = [one(args) for _ in range(opts.runs)]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        if base_cpu is None:
            base_cpu = cpu
        extra = cpu - base_cpu
        print(
            f"{name:28s} CPU {cpu * 1000:7.1f} ms (+{extra * 1000:6.1f} ms over baseline)"
            f"  wall {wall * 1000:7.1f} ms"
        )
    with open("/proc/loadavg") as f:
        print(f"load average at end: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
