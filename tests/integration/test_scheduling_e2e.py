"""Priority scheduling with preemption, with real processes: a high-priority experiment
preempts a running low-priority one, which later resumes from its checkpoint and ends
bit-identical to a run that was never preempted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from exactness import assert_identical_params

pytestmark = pytest.mark.integration

CONFIG = """
name: {name}
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 16
  lr: 0.003
  hidden_size: 64
  dropout: 0.2
  optimizer: adam
data: {{validation_fraction: 0.2, split_seed: 0}}
records_per_epoch: 1438
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {{batches: {batches}}}
min_validation_period: {{batches: 200}}
min_checkpoint_period: {{batches: 100}}
scheduling_unit: 10
reproducibility: {{experiment_seed: 1234}}
resources: {{priority: {priority}}}
"""

MASTER_CONFIG = """
resource_pools:
  - pool_name: default
    scheduler: {type: priority, preemption: true}
"""


def _write(tmp_path: Path, name: str, priority: int, batches: int) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(CONFIG.format(name=name, priority=priority, batches=batches))
    return p


def _create(cluster, path: Path) -> int:
    out = cluster.det("experiment", "create", str(path), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _params(cluster, exp_id: int) -> dict[str, torch.Tensor]:
    trial = cluster.api(f"/experiments/{exp_id}")["trials"][0]
    ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    state = torch.load(
        Path(ckpt["storage_path"]) / "state-dict.pth", map_location="cpu", weights_only=False
    )
    return state["models_state_dict"][0]


def test_high_priority_preempts_low_priority_which_resumes_exactly(cluster_factory, tmp_path):
    master_cfg = tmp_path / "master.yaml"
    master_cfg.write_text(MASTER_CONFIG)
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.master_args = ["--config-file", str(master_cfg)]
    cluster.start_master()
    cluster.start_agent(slots=1)
    pools = cluster.api("/resource-pools")["resource_pools"]
    assert pools[0]["preemption"] is True

    # The reference: the low-priority trial, never preempted.
    low = _write(tmp_path, "low", priority=50, batches=600)
    ref_id = _create(cluster, low)
    assert cluster.wait_experiment(ref_id)["experiment"]["state"] == "COMPLETED"
    reference = _params(cluster, ref_id)

    low_id = _create(cluster, low)
    deadline = time.time() + cluster.deadline(120)
    while cluster.api(f"/experiments/{low_id}")["trials"][0]["total_batches"] < 150:
        assert time.time() < deadline, cluster.dump_logs()
        time.sleep(0.05)
    high_id = _create(cluster, _write(tmp_path, "high", priority=10, batches=100))
    # The high-priority trial gets the only slot while the low one waits, preempted.
    deadline = time.time() + cluster.deadline(120)
    preempted_seen = False
    while time.time() < deadline:
        low_body = cluster.api(f"/experiments/{low_id}")
        high_trials = cluster.api(f"/experiments/{high_id}")["trials"]
        slots = cluster.api("/agents")["agents"][0]["slots"]
        if high_trials and high_trials[0]["total_batches"] > 0:
            low_trial = low_body["trials"][0]
            assert low_trial["state"] == "ACTIVE" and low_trial["restarts"] == 0
            assert 150 <= low_trial["total_batches"] < 600
            assert slots[0]["allocation_id"] is not None
            preempted_seen = True
            break
        time.sleep(0.1)
    assert preempted_seen, f"the high-priority trial never ran:\n{cluster.dump_logs()}"
    assert cluster.wait_experiment(high_id)["experiment"]["state"] == "COMPLETED"
    body = cluster.wait_experiment(low_id)
    assert body["experiment"]["state"] == "COMPLETED"
    assert body["trials"][0]["restarts"] == 0
    assert body["trials"][0]["run_id"] >= 2  # it ran again after the preemption
    assert_identical_params(_params(cluster, low_id), reference, cluster, (ref_id, low_id))
