"""Handwritten digits: a small MLP on scikit-learn's bundled 8x8 digits (no download).

The data set has 1,797 images of 8x8 pixels (values 0..16) in 10 classes. A fixed,
seeded split (data config ``validation_fraction``, ``split_seed``) gives the training and
validation sets; the model is ``Linear(64, hidden) -> ReLU -> Dropout -> Linear(hidden,
10)`` trained with cross-entropy.

Hyperparameters: ``global_batch_size``, ``lr``, ``hidden_size``, ``dropout``,
``optimizer`` (``sgd`` or ``adam``; SGD uses momentum 0.9).

``train.py`` trains it with the Trainer API (``const.yaml``, ``adaptive.yaml``,
``grid.yaml``); the ``legacy-*.yaml`` configs name it as a ``module:Class`` entrypoint,
the <=0.37 style that Determined 0.38 deprecates and still runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from dauntless.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext

NUM_CLASSES = 10


def split_digits(
    validation_fraction: float, split_seed: int
) -> tuple[TensorDataset, TensorDataset]:
    """Load the digits and split them reproducibly.

    Args:
        validation_fraction: share of the 1,797 images held out, in (0, 1); the
            validation set has ``int(1797 * validation_fraction)`` images.
        split_seed: seed of the permutation that assigns images to the two sets.

    Returns:
        ``(train, validation)`` datasets of ``(image [64] float32 in [0, 1], label
        int64)`` pairs.

    Raises:
        ValueError: if ``validation_fraction`` is not in (0, 1) or leaves a set empty.
    """
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    images, labels = load_digits(return_X_y=True)
    n_val = int(len(images) * validation_fraction)
    if n_val == 0 or n_val == len(images):
        raise ValueError(f"validation_fraction {validation_fraction} leaves a set empty")
    order = np.random.RandomState(split_seed).permutation(len(images))
    x = torch.tensor(images / 16.0, dtype=torch.float32)
    y = torch.tensor(labels, dtype=torch.int64)
    val_idx = torch.from_numpy(order[:n_val])
    train_idx = torch.from_numpy(order[n_val:])
    return TensorDataset(x[train_idx], y[train_idx]), TensorDataset(x[val_idx], y[val_idx])


class DigitsTrial(PyTorchTrial):
    """An MLP classifier of 8x8 digit images."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        data = context.get_data_config()
        self.train_set, self.val_set = split_digits(
            float(data.get("validation_fraction", 0.2)), int(data.get("split_seed", 0))
        )
        hidden = int(context.get_hparam("hidden_size"))
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(64, hidden),
                nn.ReLU(),
                nn.Dropout(float(context.get_hparam("dropout"))),
                nn.Linear(hidden, NUM_CLASSES),
            )
        )
        lr = float(context.get_hparam("lr"))
        kind = context.get_hparams().get("optimizer", "adam")
        if kind == "adam":
            optimizer: torch.optim.Optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        elif kind == "sgd":
            optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        else:
            raise ValueError(f"hyperparameter optimizer must be 'adam' or 'sgd', got {kind!r}")
        self.optimizer = context.wrap_optimizer(optimizer)
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> DataLoader:
        # drop_last: every epoch has 1438 // global_batch_size full batches, the count
        # that legacy-const.yaml's records_per_epoch converts its epoch lengths to.
        return DataLoader(
            self.train_set,
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
            drop_last=True,
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        loss = self.loss_fn(logits, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        accuracy = (logits.argmax(dim=1) == labels).float().mean()
        return {"loss": loss, "train_accuracy": accuracy}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        images, labels = batch
        logits = self.model(images)
        return {
            "validation_loss": self.loss_fn(logits, labels).item(),
            "accuracy": (logits.argmax(dim=1) == labels).float().mean().item(),
        }
