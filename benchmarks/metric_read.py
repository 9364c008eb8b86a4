"""``GET /trials/{id}/metrics`` on a long trial: downsampled, one page, and everything.

Builds an in-process master (the real FastAPI app on SQLite in a temporary directory,
its scheduling loop off) and stores one trial's ``--steps`` training reports of
``--metrics`` metrics each through ``POST /trials/{id}/metrics/batch`` (1,000 reports per
call: this also folds the M4 summaries the downsampled read uses). Then it times,
``--reads`` times each, through the ASGI test client (no network):

- ``downsample=500``: every metric's series, M4-downsampled to at most 500 points;
- ``after_batches=B&limit=1000``: one page of reports from a random position;
- the baseline of the same run: the whole answer without parameters (every report), as
  the route answered before it paged, read ``--full-reads`` times.

Printed: p50/p95 milliseconds of each and the ratio of the full read's p95 to the
downsampled one's. Target: downsampled p95 <= 100 ms at 100k steps x 20 metrics.

Usage::

    python benchmarks/metric_read.py [--steps 100000] [--metrics 20] [--reads 40]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

CONFIG = """
name: metric-read
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: m0, max_length: {batches: 10}}
"""


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--metrics", type=int, default=20)
    p.add_argument("--reads", type=int, default=40)
    p.add_argument("--full-reads", type=int, default=3)
    args = p.parse_args()
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="dauntless-metric-read-") as tmp:
        app = create_app(MasterConfig(data_dir=tmp, port=18080), run_loop=False)
        with TestClient(app) as client:
            sign_in(client)
            files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
            exp = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
            exp.raise_for_status()
            exp_id = exp.json()["experiment"]["id"]
            tid = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]
            path = f"/api/v1/trials/{tid}/metrics"
            t0 = time.perf_counter()
            for start in range(1, args.steps + 1, 1000):
                reports = [
                    {
                        "group": "training",
                        "steps_completed": b,
                        "trial_run_id": 1,
                        "metrics": {f"m{i}": rng.random() for i in range(args.metrics)},
                    }
                    for b in range(start, min(start + 1000, args.steps + 1))
                ]
                client.post(path + "/batch", json={"reports": reports}).raise_for_status()
            load_s = time.perf_counter() - t0
            print(
                f"stored {args.steps} reports x {args.metrics} metrics in {load_s:.1f} s "
                f"({args.steps * args.metrics / load_s:,.0f} values/s through the API)"
            )

            def timed(params: dict) -> tuple[float, dict]:
                t = time.perf_counter()
                r = client.get(path, params=params)
                r.raise_for_status()
                return (time.perf_counter() - t) * 1e3, r.json()

            down = []
            for _ in range(args.reads):
                ms, body = timed({"downsample": 500})
                down.append(ms)
            assert len(body["series"]) == args.metrics
            points = sum(len(s["batches"]) for s in body["series"])
            page = []
            for _ in range(args.reads):
                after = rng.randrange(-1, args.steps)
                ms, body = timed({"after_batches": after, "limit": 1000})
                page.append(ms)
            full = [timed({})[0] for _ in range(args.full_reads)]
    print(
        f"downsample=500 ({points} points in {args.metrics} series): "
        f"p50 {_p(down, 0.5):.1f} ms, p95 {_p(down, 0.95):.1f} ms"
    )
    print(f"one page of 1,000 reports: p50 {_p(page, 0.5):.1f} ms, p95 {_p(page, 0.95):.1f} ms")
    print(
        f"baseline, every report ({args.steps}): p50 {statistics.median(full):.0f} ms, "
        f"max {max(full):.0f} ms; full / downsampled p95 {max(full) / _p(down, 0.95):.0f}x"
    )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
