"""What a master unit test's master costs: the real application built in-process
(``create_app``, scheduling loop off), started by FastAPI's ``TestClient``, signed in as
the admin, three reads (experiments, tasks, the caller), stopped — the shape of the
``master`` fixtures in tests/unit.

Sides, each run in a child process of its own per round (so no side warms another's
caches), rounds alternating so every side sees the same machine:

* ``empty``: this checkout, the database created empty (Alembic migrates it at start).
* ``template``: this checkout, the database a copy of one migrated once per process
  (tests/databases.py: what the unit tests do).
* ``baseline`` (with ``--baseline-src DIR``): another checkout's ``src`` (e.g. main
  before a change) on an empty database, as its unit tests ran.

Each child builds one master to warm up (imports, the first build of the shared routes),
then ``--masters`` more, and reports the mean wall and CPU seconds (its whole process,
every thread) per master. Printed: per side the mean over rounds with a 95% interval
(Student's t over rounds), and the ratios of each side to ``empty`` (or ``baseline``)
with a 95% interval from the rounds' paired log ratios; CPU seconds are the steadier
figure on a shared machine. The load average is printed at start and end.

Usage::

    python benchmarks/unit_test_master.py [--rounds 6] [--masters 8]
        [--baseline-src /path/to/other/src]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, resource, shutil, sys, tempfile, time
sys.path.insert(0, sys.argv[3])  # tests/, for databases.migrated_sqlite
from fastapi.testclient import TestClient
from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.testing import sign_in

mode, n = sys.argv[1], int(sys.argv[2])


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one():
    d = tempfile.mkdtemp(prefix="unit-master-")
    if mode == "template":
        from databases import migrated_sqlite

        migrated_sqlite(f"{d}/dauntless.db")
    app = create_app(MasterConfig(data_dir=d, port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        for path in ("/api/v1/experiments", "/api/v1/tasks", "/api/v1/me"):
            assert client.get(path).status_code == 200, path
    shutil.rmtree(d)


one()
w, c = time.perf_counter(), cpu()
for _ in range(n):
    one()
print(json.dumps({"wall": (time.perf_counter() - w) / n, "cpu": (cpu() - c) / n}))
"""

# Student's t quantiles (two-sided 95%) by degrees of freedom.
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _t95(df: int) -> float:
    return _T95.get(df, 2.23 if df <= 10 else 2.0)


def _interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% interval (Student's t) of ``values``."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, math.nan, math.nan
    h = _t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - h, m + h


def _ratio(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the paired ratios ``num/den`` and its 95% interval."""
    logs = [math.log(a / b) for a, b in zip(num, den, strict=True)]
    m, lo, hi = _interval(logs)
    return math.exp(m), math.exp(lo), math.exp(hi)


def _child(mode: str, masters: int, src: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(masters), str(REPO / "tests")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run the sides round by round and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--masters", type=int, default=8, help="masters per child")
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    sides = ["empty", "template"] + (["baseline"] if args.baseline_src else [])
    print("load average at start:", " ".join(open("/proc/loadavg").read().split()[:3]))
    started, cpu0 = time.perf_counter(), os.times()
    got: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": []} for s in sides}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            mode = "empty" if side == "baseline" else side
            res = _child(mode, args.masters, args.baseline_src if side == "baseline" else None)
            for key in ("wall", "cpu"):
                got[side][key].append(res[key])
        print(
            f"round {r + 1}: "
            + ", ".join(
                f"{s} {got[s]['wall'][-1]:.3f} s / {got[s]['cpu'][-1]:.3f} CPU-s" for s in sides
            )
        )
    print(f"\nper master, mean of {args.rounds} rounds [95% interval]:")
    for s in sides:
        for key, unit in (("wall", "s wall"), ("cpu", "CPU-s")):
            m, lo, hi = _interval(got[s][key])
            print(f"  {s:9s} {m:.3f} [{lo:.3f}, {hi:.3f}] {unit}")
    ref = "baseline" if args.baseline_src else "empty"
    for s in sides:
        if s == ref:
            continue
        for key in ("wall", "cpu"):
            m, lo, hi = _ratio(got[s][key], got[ref][key])
            print(f"  {s} / {ref} ({key}): {m:.3f} [{lo:.3f}, {hi:.3f}]")
    if args.baseline_src:
        for key in ("wall", "cpu"):
            m, lo, hi = _ratio(got["template"][key], got["empty"][key])
            print(f"  template / empty ({key}): {m:.3f} [{lo:.3f}, {hi:.3f}]")
    cpu1 = os.times()
    children = (cpu1.children_user - cpu0.children_user) + (
        cpu1.children_system - cpu0.children_system
    )
    print(f"\n{time.perf_counter() - started:.1f} s wall, {children:.1f} CPU-s in the children")
    print("load average at end:", " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
