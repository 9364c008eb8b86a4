"""Trainer API example: an MLP on scikit-learn's 8x8 digits, trained from a script.

On a cluster: ``det experiment create const.yaml .`` (the entrypoint is
``python3 train.py``); the hyperparameters and training length come from the experiment,
and a paused or restarted trial resumes from ``get_cluster_info().latest_checkpoint``.
Off the cluster: ``python train.py`` trains locally (no master) for 3 epochs, with
checkpoints under ``./checkpoints``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import dauntless
from dauntless import pytorch as det_torch

LOCAL_CONFIG = {
    "hyperparameters": {"global_batch_size": 32, "lr": 0.003, "hidden_size": 64, "dropout": 0.1},
    "searcher": {
        "name": "single",
        "metric": "accuracy",
        "smaller_is_better": False,
        "max_length": {"epochs": 3},
    },
    "records_per_epoch": 1438,
    "checkpoint_storage": {"type": "directory", "container_path": "checkpoints"},
    "reproducibility": {"experiment_seed": 0},
}


class DigitsTrial(det_torch.PyTorchTrial):
    """``Linear(64, hidden) -> ReLU -> Dropout -> Linear(hidden, 10)`` with Adam."""

    def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
        self.context = context
        images, labels = load_digits(return_X_y=True)
        order = np.random.RandomState(0).permutation(len(images))
        x = torch.tensor(images / 16.0, dtype=torch.float32)[order]
        y = torch.tensor(labels, dtype=torch.int64)[order]
        n_val = len(images) // 5  # 359 held out, 1438 to train
        self.val_set = TensorDataset(x[:n_val], y[:n_val])
        self.train_set = TensorDataset(x[n_val:], y[n_val:])
        hidden = int(context.get_hparam("hidden_size"))
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(64, hidden),
                nn.ReLU(),
                nn.Dropout(float(context.get_hparam("dropout"))),
                nn.Linear(hidden, 10),
            )
        )
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=float(context.get_hparam("lr")))
        )
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(
            self.train_set,
            shuffle=True,
            drop_last=True,
            batch_size=self.context.get_per_slot_batch_size(),
        )

    def build_validation_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(self.val_set, batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        loss = self.loss_fn(logits, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        return {
            "validation_loss": self.loss_fn(logits, labels).item(),
            "accuracy": (logits.argmax(dim=1) == labels).float().mean().item(),
        }


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    local = info is None
    with det_torch.init(exp_conf=LOCAL_CONFIG if local else None) as context:
        trial = DigitsTrial(context)
        det_torch.Trainer(trial, context).fit(
            # On a cluster the experiment's searcher.max_length (3 epochs) applies.
            max_length=det_torch.Epoch(3) if local else None,
            validation_period=det_torch.Epoch(1),
            reporting_period=det_torch.Batch(20),
            latest_checkpoint=None if local else info.latest_checkpoint,
        )


if __name__ == "__main__":
    main()
