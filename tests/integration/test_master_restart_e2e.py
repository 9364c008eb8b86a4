"""SIGKILL of the master while trials train loses nothing and costs no restart (issue 18).

A two-trial grid of the digits example with ``max_restarts: 0`` runs while the master is
killed three times (SIGKILL) and started again. The agent keeps its tasks and the trials
keep training, holding their reports until the master answers; the experiment must
complete with no restart, every metric row exactly once, and final parameters
bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest
import torch

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


def test_three_master_sigkills_cost_nothing(
    cluster_factory, db_url, context_dir, baseline, deadline
):
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
        cluster.stop(cluster.master, sig=signal.SIGKILL)
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
    final = _final_params(cluster, exp_id)
    assert final.keys() == baseline.keys()
    for lr, params in final.items():
        assert params.keys() == baseline[lr].keys()
        for name in params:
            assert torch.equal(params[name], baseline[lr][name]), f"lr={lr}: {name} differs"
