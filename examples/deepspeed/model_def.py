"""DeepSpeed example: an MLP on scikit-learn's 8x8 digits as a ``DeepSpeedTrial``.

The engine comes from ``deepspeed.initialize`` with ``ds_config.json`` merged with the
trial's hyperparameters (``overwrite_deepspeed_config``): the ZeRO stage
(``zero_stage``, 0 to 3), the micro batch size and the gradient accumulation steps. The
optimizer is torch's SGD with momentum (DeepSpeed's own fused Adam needs compiled ops
that a CPU-only machine may lack). The data ship with scikit-learn and the model is
built in code: nothing is downloaded.

Run as a trial class (``const.yaml``, ``adaptive.yaml``: ``model_def:DigitsDeepSpeedTrial``
under ``python3 -m dauntless.launch.deepspeed --trial``), or with the Trainer API from a
script (``train.py``). On a CPU-only machine set ``DS_ACCELERATOR=cpu``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deepspeed
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from dauntless.pytorch import DataLoader
from dauntless.pytorch.deepspeed import (
    DeepSpeedTrial,
    DeepSpeedTrialContext,
    overwrite_deepspeed_config,
)

DS_CONFIG = Path(__file__).with_name("ds_config.json")


def digits(split_seed: int = 0, validation: int = 359) -> tuple[TensorDataset, TensorDataset]:
    """The 1,797 digits as ``(image [64] float32 in [0, 1], label int64)``, split with a
    seeded permutation into ``(training, validation)`` (``validation`` images held out)."""
    images, labels = load_digits(return_X_y=True)
    order = torch.from_numpy(np.random.RandomState(split_seed).permutation(len(images)))
    x = torch.tensor(images / 16.0, dtype=torch.float32)[order]
    y = torch.tensor(labels, dtype=torch.int64)[order]
    return TensorDataset(x[validation:], y[validation:]), TensorDataset(
        x[:validation], y[:validation]
    )


class DigitsDeepSpeedTrial(DeepSpeedTrial):
    """``Linear(64, hidden) -> ReLU -> Linear(hidden, 10)`` trained by a DeepSpeed engine."""

    def __init__(self, context: DeepSpeedTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        self.train_set, self.val_set = digits()
        hidden = int(hp.get("hidden_size", 64))
        model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=float(hp["lr"]), momentum=0.9)
        config = overwrite_deepspeed_config(
            DS_CONFIG,
            {
                "train_micro_batch_size_per_gpu": int(hp["micro_batch_size"]),
                "gradient_accumulation_steps": int(hp.get("gradient_accumulation_steps", 1)),
                "zero_optimization": {"stage": int(hp.get("zero_stage", 0))},
            },
        )
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.engine = context.wrap_model_engine(engine)

    def build_training_data_loader(self) -> DataLoader:
        # Micro batches on every rank: the platform's loader shards each batch of
        # `micro x ranks` records across the ranks.
        size = self.context.get_train_micro_batch_size_per_gpu() * self.context.distributed.size
        return DataLoader(self.train_set, batch_size=size, shuffle=True, drop_last=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=64)

    def train_batch(
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        x, y = self.context.to_device(next(dataloader_iter))
        loss = nn.functional.cross_entropy(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        return {"loss": loss}

    def evaluate_batch(
        self, dataloader_iter: Iterator[Any] | None, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        x, y = self.context.to_device(next(dataloader_iter))
        logits = self.engine(x)
        return {
            "validation_loss": nn.functional.cross_entropy(logits, y),
            "accuracy": (logits.argmax(1) == y).float().mean(),
        }
