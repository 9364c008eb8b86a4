"""A small, fully deterministic PyTorchTrial for the harness tests (not a test module).

Linear regression with dropout on 64 synthetic records of 4 features, shuffled, with a
StepLR scheduler stepped every epoch, so that a resumed run is identical to an
uninterrupted one only if model, optimizer, scheduler, RNG and data position are all
restored. ``train_batch`` also reports ``batch_idx`` so tests can check averaging.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dauntless
from dauntless.core import TrialInfo
from dauntless.pytorch import DataLoader, LRScheduler, PyTorchTrial, PyTorchTrialContext

RECORDS = 64


def make_dataset(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(RECORDS, 4, generator=g)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(RECORDS, 1, generator=g)
    return TensorDataset(x, y)


class ToyTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Sequential(nn.Dropout(0.2), nn.Linear(4, 1)))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.9),
            LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            make_dataset(0), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(make_dataset(1), batch_size=24)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "batch_idx": batch_idx}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y).item()}


def toy_config(storage_dir: str, **overrides: Any) -> dict[str, Any]:
    """An experiment config for ToyTrial; ``overrides`` replace top-level keys."""
    config: dict[str, Any] = {
        "name": "toy",
        "entrypoint": "harness_toy_trial:ToyTrial",
        "hyperparameters": {"global_batch_size": 8, "lr": 0.01},
        "searcher": {
            "name": "single",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_length": {"batches": 20},
        },
        "checkpoint_storage": {"type": "directory", "container_path": storage_dir},
        "scheduling_unit": 5,
        "min_validation_period": {"batches": 10},
        "records_per_epoch": RECORDS,
    }
    config.update(overrides)
    return config


def toy_info(config: dict[str, Any], **kwargs: Any) -> TrialInfo:
    """TrialInfo for ToyTrial with hparams from the config's constant values."""
    defaults: dict[str, Any] = {"trial_id": 3, "experiment_id": 2, "trial_seed": 1234}
    defaults.update(kwargs)
    return TrialInfo(hparams=dict(config["hyperparameters"]), config=config, **defaults)


class RejectingTrial(ToyTrial):
    """Rejects its hyperparameters in ``__init__``."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        raise dauntless.InvalidHP("this trial accepts no hyperparameters")
