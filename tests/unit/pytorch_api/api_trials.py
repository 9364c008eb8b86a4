"""Trials and callbacks shared by the PyTorch API tests (not a test module)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from dauntless.pytorch import (
    DataLoader,
    LRScheduler,
    PyTorchCallback,
    PyTorchTrial,
    PyTorchTrialContext,
)

RECORDS = 96


def regression_data(seed: int, n: int = RECORDS) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0], [0.0], [-1.0]])
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


class ResumeTrial(PyTorchTrial):
    """An MLP with dropout on shuffled data, an LR schedule, and draws from every RNG.

    A resumed run equals an uninterrupted one only if the model, optimizer, schedulers,
    Python/numpy/torch RNGs and the data position are all restored.
    """

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(
            nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
        )
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )
        self.epoch_sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.8),
            LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            regression_data(0), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(regression_data(1, 40), batch_size=16)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        # Augmentation drawing from numpy's and Python's global generators.
        noise = torch.from_numpy(np.random.normal(0, 0.01, size=tuple(x.shape))).float()
        x = x + noise * random.random()
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss, "lr": self.opt.param_groups[0]["lr"]}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y).item()}


class Recorder(PyTorchCallback):
    """Records every hook call as ``(hook, args)`` in ``calls``; counts them in its state."""

    def __init__(self, calls: list[tuple[str, Any]] | None = None) -> None:
        self.calls = [] if calls is None else calls
        self.count = 0

    def _note(self, hook: str, *args: Any) -> None:
        self.calls.append((hook, args))
        self.count += 1

    def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
        self._note("on_trial_startup", first_batch_idx, checkpoint_uuid)

    def on_trial_shutdown(self):
        self._note("on_trial_shutdown")

    def on_training_start(self):
        self._note("on_training_start")

    def on_training_epoch_start(self, epoch_idx):
        self._note("on_training_epoch_start", epoch_idx)

    def on_training_epoch_end(self, epoch_idx):
        self._note("on_training_epoch_end", epoch_idx)

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        self._note("on_training_workload_end", dict(avg_metrics), list(batch_metrics))

    def on_validation_start(self):
        self._note("on_validation_start")

    def on_validation_epoch_start(self):
        self._note("on_validation_epoch_start")

    def on_validation_epoch_end(self, outputs):
        self._note("on_validation_epoch_end", len(outputs))

    def on_validation_end(self, metrics):
        self._note("on_validation_end", dict(metrics))

    def on_checkpoint_load_start(self, checkpoint):
        self._note("on_checkpoint_load_start", sorted(checkpoint))

    def on_checkpoint_save_start(self, checkpoint):
        self._note("on_checkpoint_save_start", sorted(checkpoint))

    def on_checkpoint_write_end(self, checkpoint_dir):
        self._note("on_checkpoint_write_end", checkpoint_dir)

    def on_checkpoint_upload_end(self, uuid):
        self._note("on_checkpoint_upload_end", uuid)

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.calls.append(("load_state_dict", (dict(state_dict),)))
        self.count = state_dict["count"]


def local_conf(storage: str, **extra: Any) -> dict[str, Any]:
    """An experiment config for local training of ResumeTrial."""
    conf: dict[str, Any] = {
        "name": "api-test",
        "hyperparameters": {"global_batch_size": 8, "lr": 0.05},
        "searcher": {
            "name": "single",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_length": {"batches": 40},
        },
        "checkpoint_storage": {"type": "directory", "container_path": storage},
        "reproducibility": {"experiment_seed": 7},
    }
    conf.update(extra)
    return conf


def fit_local(
    trial_cls: type,
    storage: str,
    conf: dict[str, Any] | None = None,
    init_kwargs: dict[str, Any] | None = None,
    **fit_kwargs: Any,
):
    """Train ``trial_cls`` with the Trainer in local mode.

    Returns:
        ``(result, backend, trial)``: the RunResult, the LocalBackend holding every
        report, and the trial.
    """
    from dauntless.pytorch import Trainer, init

    with init(exp_conf=conf or local_conf(storage), **(init_kwargs or {})) as context:
        trial = trial_cls(context)
        result = Trainer(trial, context).fit(**fit_kwargs)
        backend = context._core.backend
    return result, backend, trial
