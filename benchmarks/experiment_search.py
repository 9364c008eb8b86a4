"""Search across experiments at size: ``GET /api/v1/experiments`` on SQLite and PostgreSQL.

For each database a real master (``python -m dauntless.master``) serves ``--experiments``
finished experiments (default 10,000, ``--trials`` trials each) written straight into its
database with their search index (:func:`dauntless.master.seeding.seed_experiment_table`).
Each case is asked ``--runs`` times over one kept-alive HTTP connection as the admin; the
p50 and p95 wall times of the answers are printed with the master's CPU seconds over the
runs (user + system, from psutil) and the load average.

Cases (issue 31 scope 7, issue 37 scope 5):

- *baseline*: ``GET /experiments`` unfiltered, the default page of 100 full experiments
  (what every list did before the search existed);
- *hp + metric range*: ``hp=lr>=0.001&hp=lr<=0.01&best_metric=validation_loss<=0.5``,
  projected to the columns a list shows (target p95 <= 100 ms);
- *hp + metric range, sorted by hp.lr*: the same, sorted by a hyperparameter;
- *label + state + owner*: ``label=tuned&state=COMPLETED&owner=determined``;
- *WebUI list, 1,000 rows*: the page the WebUI's experiment list asks for (1,000 rows,
  its columns only; target <= 50 ms on the server), against
- *full list, 1,000 rows*: 1,000 full experiments (configs included), the WebUI's request
  before this change.

Then ``det experiment list --limit 1000 --pages 1`` (1,000 experiments, a fresh
interpreter each run; target <= 0.3 s) against ``det -h`` in the same run, CPU seconds of
the child beside its wall time.

PostgreSQL is used when ``--pg-url`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
answers: a database of its own is created there and dropped at the end.

Usage::

    python benchmarks/experiment_search.py [--experiments 10000] [--trials 2] [--runs 40]
        [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import _cluster
import psutil

from dauntless.master.seeding import seed_experiment_table

LIST_FIELDS = "id,name,state,owner,progress,num_trials,best_searcher_metric,searcher_metric,start_time,end_time,archived,labels,hp.lr"
CASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("baseline: 100 full, unfiltered", [("limit", "100")]),
    (
        "hp + metric range",
        [
            ("hp", "lr>=0.001"),
            ("hp", "lr<=0.01"),
            ("best_metric", "validation_loss<=0.5"),
            ("fields", LIST_FIELDS),
        ],
    ),
    (
        "hp + metric range, sort hp.lr",
        [
            ("hp", "lr>=0.001"),
            ("hp", "lr<=0.01"),
            ("best_metric", "validation_loss<=0.5"),
            ("sort_by", "hp.lr"),
            ("order_by", "asc"),
            ("fields", LIST_FIELDS),
        ],
    ),
    (
        "label + state + owner",
        [
            ("label", "tuned"),
            ("state", "COMPLETED"),
            ("owner", "determined"),
            ("fields", LIST_FIELDS),
        ],
    ),
    ("WebUI list, 1,000 rows", [("limit", "1000"), ("fields", LIST_FIELDS)]),
    ("full list, 1,000 rows", [("limit", "1000")]),
]
TARGETS = {"hp + metric range": 0.100, "WebUI list, 1,000 rows": 0.050}


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _login(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"username": "admin", "password": ""})
    conn.request("POST", "/api/v1/auth/login", body, {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    conn.close()
    return str(answer["token"])


def _time_case(
    port: int, token: str, params: list[tuple[str, str]], runs: int, proc: psutil.Process
) -> tuple[list[float], float, int, int]:
    """``(wall seconds per run, master CPU seconds, matched total, rows answered)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    path = "/api/v1/experiments?" + urlencode(params)
    headers = {"Authorization": f"Bearer {token}"}
    conn.request("GET", path, headers=headers)  # warm-up
    first = json.loads(conn.getresponse().read())
    times = []
    cpu0 = _cpu(proc)
    for _ in range(runs):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        times.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise SystemExit(f"{path}: {resp.status} {data[:300]!r}")
    cpu = _cpu(proc) - cpu0
    conn.close()
    return times, cpu, int(first["total"]), len(first["experiments"])


def _p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[18] if len(xs) > 1 else xs[0]


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{' '.join(argv)} failed: {err[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall


def _cli(url: str, token: str, runs: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(DET_MASTER=url, DET_USER_TOKEN=token)
    cases = {
        "det -h (baseline)": [sys.executable, "-m", "dauntless.cli", "-h"],
        "det e list, 1,000 rows": [
            sys.executable,
            "-m",
            "dauntless.cli",
            "e",
            "list",
            "--limit",
            "1000",
            "--pages",
            "1",
        ],
    }
    base = None
    for name, argv in cases.items():
        _child(argv, env)  # warm the page cache
        got = [_child(argv, env) for _ in range(runs)]
        cpu = statistics.median(c for c, _ in got)
        wall = statistics.median(w for _, w in got)
        base = base or wall
        target = "  (target <= 0.300 s)" if "list" in name else ""
        print(
            f"  {name:<34} wall p50 {wall:6.3f} s  cpu {cpu:6.3f} s  "
            f"x{wall / base:5.2f} of det -h{target}"
        )


def _bench(name: str, db_url: str, args: argparse.Namespace, tmp: Path) -> None:
    t0 = time.perf_counter()
    seed_experiment_table(db_url, args.experiments, trials=args.trials)
    if db_url.startswith("postgresql"):
        _vacuum_analyze(db_url)
    print(
        f"\n== {name}: {args.experiments} experiments x {args.trials} trials "
        f"(seeded in {time.perf_counter() - t0:.1f} s)"
    )
    with _cluster.master(tmp / f"master-{name}", db_url=db_url) as m:
        proc = psutil.Process(m.process.pid)
        token = _login(m.port)
        base = None
        for case, params in CASES:
            times, cpu, total, rows = _time_case(m.port, token, params, args.runs, proc)
            p50, p95 = statistics.median(times), _p95(times)
            base = base or p50
            target = f"  (target p95 <= {TARGETS[case] * 1000:.0f} ms)" if case in TARGETS else ""
            print(
                f"  {case:<34} p50 {p50 * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
                f"master cpu {cpu / args.runs * 1000:6.1f} ms/req  x{p50 / base:5.2f}  "
                f"matched {total}, rows {rows}{target}"
            )
        _cli(m.url, token, max(3, args.runs // 8))


def _vacuum_analyze(url: str) -> None:
    """``VACUUM ANALYZE`` the freshly seeded PostgreSQL database: what autovacuum does
    within about a minute of a bulk write on a production server (autovacuum_naptime
    60 s). Without it the planner sees empty tables (estimates of one row) and joins
    the search's 5,000 matches by nested loops, twice as slow as with statistics."""
    from sqlalchemy import create_engine

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


def _pg_database(url: str) -> tuple[str, object] | None:
    """A fresh database on the PostgreSQL server of ``url`` and a callable dropping it;
    None when the server does not answer."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"bench_search_{os.getpid()}"
    try:
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL here
        print(f"(PostgreSQL at {url} not used: {type(exc).__name__}: {exc})")
        return None

    def drop() -> None:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(url).set(database=name).render_as_string(hide_password=False), drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory(prefix="experiment-search-") as tmp_dir:
        tmp = Path(tmp_dir)
        for name in args.databases.split(","):
            if name == "sqlite":
                _bench("SQLite", f"sqlite:///{tmp / 'search.db'}", args, tmp)
            elif name == "postgresql":
                pg = _pg_database(args.pg_url)
                if pg is None:
                    continue
                url, drop = pg
                try:
                    _bench("PostgreSQL", url, args, tmp)
                finally:
                    drop()  # type: ignore[operator]
            else:
                raise SystemExit(f"--databases: unknown {name!r} (sqlite, postgresql)")
    print(f"\nbenchmark process cpu {time.process_time() - cpu0:.1f} s (seeding included)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
