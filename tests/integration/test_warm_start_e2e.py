"""End to end: trials forked from the agent's warm worker (docs/warm-start.md).

A real master and agent; Core API scripts (``python3 train.py``) that record what they
see at their first line: their parent (their supervisor, forked by the fork server) and
its parent (the fork server), working directory, a variable an earlier trial set, and
draws from ``random``, ``numpy`` and ``torch``. One trial calls ``os._exit(3)``: it fails
alone and the worker serves the next experiment. A killed agent takes its warm worker
with it at once; the trial it runs, supervised, outlives it for the orphan grace period
(10 s in these clusters, for an agent started again to adopt it) and then ends with its
supervisor: nothing is left running.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import deadline_seconds

pytestmark = pytest.mark.integration

TRAIN = """\
import json, os, random, sys
import numpy as np
import torch
import dauntless
from dauntless import core

info = dauntless.get_cluster_info()
hp = info.trial.hparams
record = {
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "parent": open(f"/proc/{os.getppid()}/cmdline").read().replace("\\0", " "),
    "server": int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1]),
    "cwd": os.getcwd(),
    "leak": os.environ.get("WARM_TEST_LEAK"),
    "marker": os.path.exists("marker"),
    "draws": [random.random(), float(np.random.rand()), float(torch.rand(1))],
}
os.environ["WARM_TEST_LEAK"] = "set"
open("marker", "w").close()
with open(os.path.join(hp["out"], f"{info.trial.trial_id}.json"), "w") as f:
    json.dump(record, f)
sys.stdout.flush()
if hp["mode"] == "crash":
    os._exit(3)
if hp["mode"] == "hang":
    import time
    time.sleep(600)
with core.init() as ctx:
    for op in ctx.searcher.operations():
        ctx.train.report_training_metrics(op.length, {"loss": 1.0})
        op.report_completed(1.0)
"""


def _experiment(tmp: Path, name: str, modes: list[str], out: Path) -> tuple[Path, Path]:
    model = tmp / f"model-{name}"
    model.mkdir()
    (model / "train.py").write_text(TRAIN)
    config = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {
            "mode": {"type": "categorical", "vals": modes},
            "out": str(out),
        },
        "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(json.dumps(config))
    return path, model


def _create(cluster, config: Path, model: Path) -> int:
    out = cluster.det("experiment", "create", str(config), str(model)).stdout
    return int(out.split("Created experiment")[1].split()[0])


def _wait_ready(cluster, log: Path) -> None:
    deadline = time.time() + deadline_seconds(60)
    while "warm worker (fork server) ready" not in log.read_text():
        assert time.time() < deadline, f"the warm worker did not start:\n{log.read_text()}"
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie no one reaped yet


def test_warm_trials_are_separate_processes(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=2)
    agent_log = cluster.logs[-1]
    _wait_ready(cluster, agent_log)
    out = tmp_path / "records"
    out.mkdir()

    exp1 = _create(cluster, *_experiment(tmp_path, "crash", ["crash", "ok"], out))
    body = cluster.wait_experiment(exp1, timeout=60)
    states = {t["hparams"]["mode"]: t for t in body["trials"]}
    assert states["crash"]["state"] == "ERROR", cluster.dump_logs(exp1)
    assert states["ok"]["state"] == "COMPLETED", cluster.dump_logs(exp1)
    assert "exit code 3" in json.dumps(states["crash"]["failure"]), states["crash"]

    # The worker survived the crash and forks the next experiment's trials.
    exp2 = _create(cluster, *_experiment(tmp_path, "after", ["ok", "ok2"], out))
    body = cluster.wait_experiment(exp2, timeout=60)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp2)

    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len(records) == 4
    # One fork server; each trial under a supervisor of its own that the server forked.
    assert len({r["server"] for r in records}) == 1, records
    assert len({r["ppid"] for r in records}) == 4, records
    assert all("dauntless.exec._forkserver" in r["parent"] for r in records)
    assert len({r["pid"] for r in records}) == 4
    assert all(r["leak"] is None and not r["marker"] for r in records)
    assert len({r["cwd"] for r in records}) == 4
    draws = [tuple(r["draws"]) for r in records]
    assert len(set(draws)) == 4 and len({d[0] for d in draws}) == 4
    assert agent_log.read_text().count("process runtime, warm)") == 4


def test_a_killed_agent_leaves_no_worker_and_its_trial_ends_after_the_grace(
    cluster_factory, tmp_path
):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=1)
    _wait_ready(cluster, cluster.logs[-1])
    out = tmp_path / "records"
    out.mkdir()
    _create(cluster, *_experiment(tmp_path, "hang", ["hang"], out))
    deadline = time.time() + deadline_seconds(60)
    while not list(out.glob("*.json")):
        assert time.time() < deadline, cluster.dump_logs()
        time.sleep(0.1)
    (record,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert not any(_gone(record[k]) for k in ("pid", "ppid", "server"))
    os.kill(cluster.agents["agent-1"].pid, signal.SIGKILL)
    cluster.agents["agent-1"].wait(timeout=30)
    deadline = time.time() + deadline_seconds(20)
    while not _gone(record["server"]):
        assert time.time() < deadline, "the warm worker outlived the agent"
        time.sleep(0.1)
    # The worker died with the agent; its supervised trial did not (the grace is 10 s).
    assert not _gone(record["pid"]) and not _gone(record["ppid"])
    deadline = time.time() + deadline_seconds(40)
    while not (_gone(record["pid"]) and _gone(record["ppid"])):
        assert time.time() < deadline, "the trial outlived its agent's grace period"
        time.sleep(0.1)
