"""Pause/activate, agent and master crashes, and checkpoint GC with real processes.

Every scenario trains the digits example with the same experiment seed and must end with
parameters bit-identical (torch.equal) to an uninterrupted run: the trial resumes from its
checkpoint exactly where it stopped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from exactness import assert_identical_params

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

CONFIG = """
name: lifecycle
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 16
  lr: 0.003
  hidden_size: 64
  dropout: 0.2
  optimizer: adam
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: 600}
min_validation_period: {batches: 200}
min_checkpoint_period: {batches: 100}
scheduling_unit: 10
reproducibility: {experiment_seed: 1234}
max_restarts: 3
"""


@pytest.fixture()
def config_file(tmp_path) -> Path:
    p = tmp_path / "lifecycle.yaml"
    p.write_text(CONFIG)
    return p


def _create(cluster, config_file) -> int:
    out = cluster.det("experiment", "create", str(config_file), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _final_params(cluster, exp_id: int) -> dict[str, torch.Tensor]:
    trial = cluster.api(f"/experiments/{exp_id}")["trials"][0]
    ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    assert ckpt["total_batches"] == 600
    state = torch.load(
        Path(ckpt["storage_path"]) / "state-dict.pth", map_location="cpu", weights_only=False
    )
    return state["models_state_dict"][0]


def _wait_batches(cluster, exp_id: int, at_least: int, timeout: float = 120) -> dict:
    deadline = time.time() + cluster.deadline(timeout)
    while time.time() < deadline:
        trials = cluster.api(f"/experiments/{exp_id}")["trials"]
        if trials and trials[0]["total_batches"] >= at_least:
            return trials[0]
        time.sleep(0.05)
    raise AssertionError(f"trial did not reach {at_least} batches:\n{cluster.dump_logs()}")


@pytest.fixture()
def baseline(cluster_factory, config_file, tmp_path_factory):
    """Parameters of the uninterrupted run (computed once per test that asks)."""
    cluster = cluster_factory(f"sqlite:///{tmp_path_factory.mktemp('base')}/m.db")
    cluster.start_master()
    cluster.start_agent("base-agent")
    exp_id = _create(cluster, config_file)
    assert cluster.wait_experiment(exp_id)["experiment"]["state"] == "COMPLETED"
    params = _final_params(cluster, exp_id)
    cluster.shutdown()
    return params


def test_pause_and_activate_resume_exactly(cluster_factory, config_file, tmp_path, baseline):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent()
    exp_id = _create(cluster, config_file)
    _wait_batches(cluster, exp_id, 150)
    cluster.det("experiment", "pause", str(exp_id))
    deadline = time.time() + cluster.deadline(60)
    while time.time() < deadline:
        slots = cluster.api("/agents")["agents"][0]["slots"]
        if all(sl["allocation_id"] is None for sl in slots):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the paused trial did not free its slot")
    body = cluster.api(f"/experiments/{exp_id}")
    assert body["experiment"]["state"] == "PAUSED"
    trial = body["trials"][0]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 0
    paused_at = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    assert 150 <= paused_at["total_batches"] < 600
    time.sleep(1.0)
    assert (
        cluster.api(f"/trials/{trial['id']}")["trial"]["total_batches"]
        == paused_at["total_batches"]
    )
    cluster.det("experiment", "activate", str(exp_id))
    assert cluster.wait_experiment(exp_id)["experiment"]["state"] == "COMPLETED"
    assert_identical_params(_final_params(cluster, exp_id), baseline, cluster, (exp_id,))


def test_agent_sigkill_restarts_trial_on_another_agent(
    cluster_factory, config_file, tmp_path, baseline
):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master(agent_timeout=3.0)
    cluster.start_agent("doomed")
    exp_id = _create(cluster, config_file)
    _wait_batches(cluster, exp_id, 250)
    cluster.stop(cluster.agents["doomed"], sig=signal.SIGKILL)
    cluster.start_agent("rescuer")
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED"
    assert body["trials"][0]["restarts"] == 1
    assert_identical_params(_final_params(cluster, exp_id), baseline, cluster, (exp_id,))


def test_master_sigkill_loses_and_duplicates_nothing(cluster_factory, config_file, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent()
    exp_id = _create(cluster, config_file)
    trial = _wait_batches(cluster, exp_id, 200)
    before = cluster.api(f"/trials/{trial['id']}/metrics")["metrics"]
    cluster.stop(cluster.master, sig=signal.SIGKILL)
    time.sleep(2.0)  # the trial and agent keep going, retrying the master
    cluster.start_master()
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED"
    after = cluster.api(f"/trials/{trial['id']}/metrics")["metrics"]
    keys = [(m["group"], m["total_batches"]) for m in after]
    assert len(keys) == len(set(keys)), "a metric report is duplicated"
    by_key = {(m["group"], m["total_batches"]): m["values"] for m in after}
    for m in before:
        assert by_key[(m["group"], m["total_batches"])] == m["values"]
    assert max(m["total_batches"] for m in after) == 600


def test_gc_policy_zero_deletes_every_checkpoint(cluster_factory, config_file, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent()
    exp_id = _create(cluster, config_file)
    assert cluster.wait_experiment(exp_id)["experiment"]["state"] == "COMPLETED"
    ckpts = cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]
    live = [c for c in ckpts if c["state"] == "COMPLETED"]
    assert live and all(Path(c["storage_path"]).is_dir() for c in live)
    out = cluster.det(
        "experiment",
        "set",
        "gc-policy",
        str(exp_id),
        "--save-experiment-best",
        "0",
        "--save-trial-best",
        "0",
        "--save-trial-latest",
        "0",
        "--yes",
    )
    assert "collected" in out.stdout
    ckpts = cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]
    assert {c["state"] for c in ckpts} == {"DELETED"}
    assert not any(Path(c["storage_path"]).exists() for c in ckpts)
    # Deleting the experiment still works, and the download of a deleted one is refused.
    r = cluster.det(
        "checkpoint", "download", ckpts[0]["uuid"], "-o", str(tmp_path / "dl"), check=False
    )
    assert r.returncode != 0 and "deleted" in r.stderr
    cluster.det("experiment", "delete", str(exp_id), "--yes")
    assert (
        subprocess.run(
            [sys.executable, "-m", "dauntless.cli.main", "experiment", "describe", str(exp_id)],
            env=cluster.env(),
            capture_output=True,
            text=True,
        ).returncode
        != 0
    )
