"""SIGKILL of the master while trials train loses nothing and costs no restart (issue 18).

A two-trial grid of the digits example with ``max_restarts: 0`` runs while the master is
killed three times (SIGKILL) and started again. The agent keeps its tasks and the trials
keep training, holding their reports until the master answers; the experiment must
complete with no restart, every metric row exactly once, and final parameters
bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
from sqlalchemy import func, select

from dauntless.master.db import Database
from dauntless.master.db.models import MetricFoldPendingRow

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

BATCHES = 300
SCHEDULING_UNIT = 10
VALIDATION_PERIOD = 100

CONFIG = f"""
name: master-restart
entrypoint: slow_def:SlowDigitsTrial
hyperparameters:
  global_batch_size: 16
  lr: {{type: categorical, vals: [0.003, 0.01]}}
  hidden_size: 32
  dropout: 0.0
  optimizer: adam
  batch_sleep: 0.02
data: {{validation_fraction: 0.2, split_seed: 0}}
records_per_epoch: 1438
searcher:
  name: grid
  metric: accuracy
  smaller_is_better: false
  max_length: {{batches: {BATCHES}}}
min_validation_period: {{batches: {VALIDATION_PERIOD}}}
min_checkpoint_period: {{batches: {VALIDATION_PERIOD}}}
scheduling_unit: {SCHEDULING_UNIT}
reproducibility: {{experiment_seed: 77}}
max_restarts: 0
"""

SLOW_DEF = '''
"""The digits trial, slowed down so that a run spans several master restarts."""
import time

from model_def import DigitsTrial


class SlowDigitsTrial(DigitsTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(float(self.context.get_hparam("batch_sleep")))
        return super().train_batch(batch, epoch_idx, batch_idx)
'''


@pytest.fixture(scope="module")
def context_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("slow_digits")
    shutil.copy(REPO / "examples" / "digits" / "model_def.py", d / "model_def.py")
    (d / "slow_def.py").write_text(SLOW_DEF)
    (d / "config.yaml").write_text(CONFIG)
    return d


def _create(cluster, context_dir: Path) -> int:
    out = cluster.det("experiment", "create", str(context_dir / "config.yaml"), str(context_dir))
    return int(out.stdout.split("Created experiment")[1].split()[0])


def _final_params(cluster, exp_id: int) -> dict[float, dict[str, torch.Tensor]]:
    """Each trial's final model parameters, keyed by its learning rate."""
    out = {}
    for trial in cluster.api(f"/experiments/{exp_id}")["trials"]:
        ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
        assert ckpt["total_batches"] == BATCHES
        state = torch.load(
            Path(ckpt["storage_path"]) / "state-dict.pth", map_location="cpu", weights_only=False
        )
        out[trial["hparams"]["lr"]] = state["models_state_dict"][0]
    return out


@pytest.fixture(scope="module")
def baseline(module_cluster_factory, tmp_path_factory, context_dir):
    """Final parameters of the uninterrupted run (SQLite), once for the module."""
    tmp = tmp_path_factory.mktemp("baseline-db")
    cluster = module_cluster_factory(f"sqlite:///{tmp}/m.db")
    cluster.start_master()
    cluster.start_agent("base-agent", slots=2)
    exp_id = _create(cluster, context_dir)
    assert cluster.wait_experiment(exp_id)["experiment"]["state"] == "COMPLETED"
    params = _final_params(cluster, exp_id)
    cluster.shutdown()
    return params


def _max_batches(cluster, exp_id: int) -> tuple[int, str]:
    body = cluster.api(f"/experiments/{exp_id}")
    return max((t["total_batches"] for t in body["trials"]), default=0), body["experiment"]["state"]


def _fold_workers(pid: int) -> list[int]:
    """The metric fold worker processes among ``pid``'s children."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                if b"dauntless.master.fold_worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
            except FileNotFoundError:
                pass
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped yet, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pending_reports(db_url: str) -> int:
    db = Database(db_url)
    try:
        with db.read() as s:
            return s.scalar(select(func.count()).select_from(MetricFoldPendingRow)) or 0
    finally:
        db.dispose()


def test_three_master_sigkills_cost_nothing(
    cluster_factory, db_url, context_dir, baseline, deadline
):
    """Three SIGKILLs of the master cost nothing (see the module docstring). The
    master's metric fold worker, a child process, exits with it each time, never left
    behind, and the background fold folds every report with no reader asking for it."""
    cluster = cluster_factory(db_url)
    cluster.start_master()
    cluster.start_agent("a1", slots=2)
    exp_id = _create(cluster, context_dir)
    for threshold in (30, 130, 230):
        until = time.time() + deadline(120)
        while True:
            batches, state = _max_batches(cluster, exp_id)
            assert state == "ACTIVE", f"experiment {state} before the kills:\n{cluster.dump_logs()}"
            if batches >= threshold:
                break
            assert time.time() < until, f"no progress to {threshold}:\n{cluster.dump_logs()}"
            time.sleep(0.05)
        assert cluster.master is not None
        workers = _fold_workers(cluster.master.pid)
        assert len(workers) == 1, workers
        # SIGKILL to the master alone (as the kernel's OOM killer would), not its group
        os.kill(cluster.master.pid, signal.SIGKILL)
        cluster.master.wait(timeout=30)
        until = time.time() + deadline(10)
        while any(_alive(w) for w in workers):
            assert time.time() < until, f"fold worker {workers} outlived its master"
            time.sleep(0.05)
        time.sleep(1.0)  # the trials and the agent keep going, retrying the master
        cluster.start_master()
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    assert len(body["trials"]) == 2
    for trial in body["trials"]:
        assert trial["state"] == "COMPLETED"
        assert trial["restarts"] == 0, cluster.dump_logs(exp_id)
        assert trial["run_id"] == 1  # one allocation: never restarted, never preempted
        rows = cluster.api(f"/trials/{trial['id']}/metrics")["metrics"]
        keys = sorted((m["group"], m["total_batches"]) for m in rows)
        expected = sorted(
            [("training", b) for b in range(SCHEDULING_UNIT, BATCHES + 1, SCHEDULING_UNIT)]
            + [("validation", b) for b in range(VALIDATION_PERIOD, BATCHES + 1, VALIDATION_PERIOD)]
        )
        assert keys == expected, "metric rows missing or duplicated"
    until = time.time() + deadline(30)  # the background fold (every 5 s) catches up
    while (pending := _pending_reports(db_url)) > 0:
        assert time.time() < until, f"{pending} reports never folded:\n{cluster.dump_logs()}"
        time.sleep(0.2)
    final = _final_params(cluster, exp_id)
    assert final.keys() == baseline.keys()
    for lr, params in final.items():
        assert params.keys() == baseline[lr].keys()
        for name in params:
            assert torch.equal(params[name], baseline[lr][name]), f"lr={lr}: {name} differs"
