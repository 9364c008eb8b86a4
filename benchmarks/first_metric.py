"""``det experiment create`` to the first training metric stored, median of 5.

Starts a real master (SQLite) and one agent with 2 slots (warm worker ready; ``--cold``
starts the agent with ``--no-warm-start``, the baseline), then ``--runs`` times runs the
real CLI, ``det experiment create const.yaml DIR``, for a one-trial Core API experiment
(``python3 train.py``: ``core.init()``, one training metric), and polls ``GET
/trials/{id}/metrics`` every 10 ms until the metric is there. Printed: the median and
each run's seconds from starting the CLI to the metric, the CLI's own wall and CPU
seconds (from ``wait4``), and the rest (the CLI's exit to the metric: the master's
placement, the agent learning of the trial, the fork and the trial's ``core.init()`` and
first report). Target (issue 37): median <= 0.5 s on an idle machine.

Usage::

    python benchmarks/first_metric.py [--runs 5] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trial_throughput import TRAIN_PY, Cluster  # noqa: E402


def one_run(cluster: Cluster, tmp: Path, i: int) -> tuple[float, float, float]:
    """``(seconds to the first metric, CLI wall seconds, CLI CPU seconds)``."""
    model = tmp / f"model-{i}"
    model.mkdir()
    (model / "train.py").write_text(TRAIN_PY.format(seconds=0))
    config = tmp / f"const-{i}.yaml"
    config.write_text(
        json.dumps(
            {
                "name": f"first-metric-{i}",
                "entrypoint": "python3 train.py",
                "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
                "max_restarts": 0,
            }
        )
    )
    env = dict(os.environ, DET_MASTER=cluster.url, XDG_CONFIG_HOME=str(tmp / "config"))
    t0 = time.monotonic()
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dauntless.cli.main",
            "experiment",
            "create",
            str(config),
            str(model),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _pid, status, usage = os.wait4(cli.pid, 0)
    cli.returncode = os.waitstatus_to_exitcode(status)
    cli_wall = time.monotonic() - t0
    out = cli.stdout.read().decode() if cli.stdout else ""
    if cli.returncode != 0:
        err = cli.stderr.read().decode() if cli.stderr else ""
        raise RuntimeError(f"det experiment create failed: {out}{err}")
    exp_id = int(out.split("Created experiment")[1].split()[0])
    trial_id = None
    while True:
        if trial_id is None:
            trials = cluster.get(f"/experiments/{exp_id}/trials")["trials"]
            trial_id = trials[0]["id"] if trials else None
        if trial_id is not None:
            metrics = cluster.get(f"/trials/{trial_id}/metrics", group="training")["metrics"]
            if metrics:
                break
        if time.monotonic() - t0 > 120:
            raise RuntimeError(f"no metric from experiment {exp_id} in 120 s")
        time.sleep(0.01)
    return time.monotonic() - t0, cli_wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="start the agent with --no-warm-start")
    args = p.parse_args()
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory(prefix="dauntless-first-metric-") as tmp_s:
        tmp = Path(tmp_s)
        cluster = Cluster(tmp, warm=not args.cold)
        try:
            subprocess.run(
                [sys.executable, "-m", "dauntless.cli.main", "user", "login", "admin"],
                env=dict(os.environ, DET_MASTER=cluster.url, XDG_CONFIG_HOME=str(tmp / "config")),
                input=b"\n",
                capture_output=True,
                check=False,
            )
            rows = [one_run(cluster, tmp, i) for i in range(args.runs)]
        finally:
            cluster.stop()
    firsts = [r[0] for r in rows]
    print(
        f"{'cold' if args.cold else 'warm'} start: det experiment create -> first metric: "
        f"median {statistics.median(firsts):.2f} s ({', '.join(f'{x:.2f}' for x in firsts)})"
    )
    print(
        f"  the CLI itself: wall median {statistics.median(r[1] for r in rows):.2f} s, "
        f"CPU median {statistics.median(r[2] for r in rows):.2f} s"
    )
    after = [r[0] - r[1] for r in rows]
    print(
        f"  CLI exit -> first metric: median {statistics.median(after):.3f} s "
        f"({', '.join(f'{x:.3f}' for x in after)})"
    )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
