"""Data-parallel training across two agents, with real processes: the digits example
with ``resources.slots_per_trial: 2`` (one slot on each agent, gloo) reaches the target
accuracy, and its training loss curve matches a one-slot run with the same global
batch size; when one rank dies the whole trial restarts from its latest checkpoint and
still ends on the same curve."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.integration

# Dropout 0 makes the model deterministic; 1,438 records per epoch give 22 full batches of
# 64 on one slot and 44 of 32 per epoch on two, so both runs see the same records in the
# same global batches (drop_last), epoch after epoch.
CONFIG = """
name: digits-{slots}-slots
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 64
  lr: 0.01
  hidden_size: 64
  dropout: 0.0
  optimizer: adam
data: {{validation_fraction: 0.2, split_seed: 0}}
records_per_epoch: 1438
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {{batches: 110}}
min_validation_period: {{batches: 55}}
scheduling_unit: 5
reproducibility: {{experiment_seed: 1234}}
resources: {{slots_per_trial: {slots}}}
max_restarts: {restarts}
"""

# The digits trial, except that rank 1 dies (exit 3, no checkpoint) in batch 70 of the
# trial's first run: after the checkpoint at batch 55, before the end.
CRASHING = """
import os

from model_def import DigitsTrial


class CrashingDigitsTrial(DigitsTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        if (batch_idx == 70 and self.context.distributed.rank == 1
                and os.environ.get("DET_TRIAL_RUN_ID") == "1"):
            print("rank 1 dies in batch 70", flush=True)
            os._exit(3)
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def cluster_repo() -> Path:
    """The repository root (examples/ lives there)."""
    return Path(__file__).resolve().parents[2]


def _run(cluster, tmp_path: Path, slots: int, crash: bool = False) -> tuple[dict, dict[int, float]]:
    path = tmp_path / f"digits-{slots}-{crash}.yaml"
    """Run the digits experiment to its end; the trial and its training loss by batch."""
    text = CONFIG.format(slots=slots, restarts=1 if crash else 0)
    model_dir = "examples/digits"
    if crash:
        model_dir = str(tmp_path / "crashing")
        shutil.copytree(Path(cluster_repo(), "examples/digits"), model_dir)
        Path(model_dir, "crash_def.py").write_text(CRASHING)
        text = text.replace("model_def:DigitsTrial", "crash_def:CrashingDigitsTrial")
    path.write_text(text)
    out = cluster.det("experiment", "create", str(path), model_dir).stdout
    exp_id = int(out.split("Created experiment")[1].split()[0])
    body = cluster.wait_experiment(exp_id, timeout=120)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    trial = body["trials"][0]
    assert trial["total_batches"] == 110 and trial["restarts"] == (1 if crash else 0)
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    losses = {m["total_batches"]: m["values"]["loss"] for m in training}
    return trial, losses


def test_two_slots_on_two_agents_train_like_one_slot(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent("agent-1", slots=1)
    cluster.start_agent("agent-2", slots=1)

    started = time.time()
    trial2, losses2 = _run(cluster, tmp_path, slots=2)
    two_slot_seconds = time.time() - started
    # The trial spanned both agents: log lines came from two parts, from ranks 0 and 1.
    logs = cluster.api(f"/trials/{trial2['id']}/logs", limit=10000)["logs"]
    parts = {line["allocation_id"] for line in logs}
    assert len(parts) == 2, parts
    text = "\n".join(line["log"] for line in logs)
    assert "rank 0 of 2" in text and "rank 1 of 2" in text
    validation = cluster.api(f"/trials/{trial2['id']}/metrics", group="validation")["metrics"]
    assert validation[-1]["total_batches"] == 110
    assert validation[-1]["values"]["accuracy"] >= 0.95, validation
    # Only the chief wrote checkpoints, of the unwrapped model (no DDP "module." prefix).
    ckpts = cluster.api(f"/trials/{trial2['id']}/checkpoints")["checkpoints"]
    assert [c["total_batches"] for c in ckpts] == [55, 110]
    state = torch.load(Path(ckpts[-1]["storage_path"]) / "state-dict.pth", weights_only=True)
    assert list(state["models_state_dict"][0]) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    assert len(state["trial_state"]["ranks"]) == 2

    trial1, losses1 = _run(cluster, tmp_path, slots=1)
    assert sorted(losses1) == sorted(losses2) == list(range(5, 111, 5))
    for batches in sorted(losses1):
        assert losses2[batches] == pytest.approx(losses1[batches], rel=1e-4), (
            batches,
            losses1[batches],
            losses2[batches],
        )
    worst = max(abs(losses2[b] - losses1[b]) / abs(losses1[b]) for b in losses1)
    print(
        f"2-slot run {two_slot_seconds:.1f} s, validation accuracy "
        f"{validation[-1]['values']['accuracy']:.4f}; loss curves: {len(losses1)} points, "
        f"largest relative difference {worst:.2e}; first {losses1[5]:.6f} vs "
        f"{losses2[5]:.6f}, last {losses1[110]:.6f} vs {losses2[110]:.6f}"
    )

    # Rank 1 dies: both parts stop, the trial restarts once from the checkpoint at batch
    # 55 and resumes exactly: the same curve as the uninterrupted two-slot run.
    trial3, losses3 = _run(cluster, tmp_path, slots=2, crash=True)
    logs = cluster.api(f"/trials/{trial3['id']}/logs", limit=10000)["logs"]
    assert any("rank 1 dies in batch 70" in line["log"] for line in logs)
    assert len({line["allocation_id"] for line in logs}) == 4  # 2 runs x 2 parts
    assert losses3 == losses2
