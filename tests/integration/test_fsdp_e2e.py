"""End to end: a PyTorchTrial whose model is sharded with FSDP2 (``fully_shard``, gloo on
CPU) writes sharded checkpoints (``torch.distributed.checkpoint``) on 2 slots, and they
restore on 1 slot (a plain model) and on 2 (issue 32 scope 5).

Experiment A trains 20 batches on 2 slots and validates at batch 20; the validation
reports ``weight_sum``, the sum of every full parameter. Experiments B (1 slot) and C
(2 slots) start from A's last checkpoint (``searcher.source_checkpoint_uuid``) and
validate before training (``perform_initial_validation``): their ``weight_sum`` at batch
0 must be A's at batch 20.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

MODEL_DEF = """
import torch
from torch.utils.data import TensorDataset

from dauntless.pytorch import DataLoader, PyTorchTrial


class FSDPTrial(PyTorchTrial):
    def __init__(self, context):
        self.context = context
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )
        if context.distributed.size > 1:
            from torch.distributed.fsdp import fully_shard

            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), 0.01))
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(256, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long()

    def build_training_data_loader(self):
        return DataLoader(
            TensorDataset(self.x, self.y),
            batch_size=self.context.get_per_slot_batch_size(),
            drop_last=True,
        )

    def build_validation_data_loader(self):
        return DataLoader(TensorDataset(self.x[:64], self.y[:64]), batch_size=32)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        total = 0.0
        for p in self.model.parameters():  # every rank: full_tensor() is a collective
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            total += float(full.detach().double().sum())
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        return {"validation_loss": loss, "weight_sum": total}
"""

CONFIG = """
name: fsdp-{slots}-slots
entrypoint: model_def:FSDPTrial
hyperparameters: {{global_batch_size: 16}}
records_per_epoch: 256
searcher:
  name: single
  metric: validation_loss
  max_length: {{batches: {batches}}}
  {source}
min_validation_period: {{batches: 20}}
min_checkpoint_period: {{batches: 10}}
perform_initial_validation: {initial}
resources: {{slots_per_trial: {slots}}}
max_restarts: 0
"""


def _run(cluster, tmp: Path, slots: int, batches: int, source: str | None) -> dict:
    path = tmp / f"fsdp-{slots}-{source or 'fresh'}.yaml"
    path.write_text(
        CONFIG.format(
            slots=slots,
            batches=batches,
            source=f"source_checkpoint_uuid: {source}" if source else "",
            initial="true" if source else "false",
        )
    )
    out = cluster.det("experiment", "create", str(path), str(tmp / "ctx")).stdout
    exp_id = int(out.split("Created experiment")[1].split()[0])
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    return body["trials"][0]


def _weight_sums(cluster, trial: dict) -> dict[int, float]:
    rows = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    return {m["total_batches"]: m["values"]["weight_sum"] for m in rows}


def test_sharded_checkpoint_of_two_slots_restores_on_one_and_two(cluster_factory, tmp_path):
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "model_def.py").write_text(textwrap.dedent(MODEL_DEF))
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=2)

    saved = _run(cluster, tmp_path, slots=2, batches=20, source=None)
    ckpt = cluster.api(f"/checkpoints/{saved['latest_checkpoint']}")["checkpoint"]
    assert ckpt["total_batches"] == 20
    shards = [f for f in ckpt["resources"] if f.startswith("sharded/")]
    assert "sharded/.metadata" in shards and len(shards) >= 3, ckpt["resources"]
    expected = _weight_sums(cluster, saved)[20]

    for slots in (1, 2):
        trial = _run(cluster, tmp_path, slots=slots, batches=10, source=ckpt["uuid"])
        assert _weight_sums(cluster, trial)[0] == pytest.approx(expected, rel=1e-12), slots
