"""Lightning example: an MLP on scikit-learn's 8x8 digits, trained by a Lightning 2.x
``Trainer`` with Dauntless's ``DeterminedCallback``.

The callback reports training and validation metrics, stores Lightning checkpoints in
the experiment's checkpoint storage, resumes from the trial's latest checkpoint
(``trainer.fit(ckpt_path=det_cb.ckpt_path)``) and stops cleanly when the trial is
paused or ASHA stops it. The data ship with scikit-learn and the model is built in code:
nothing is downloaded.

How long it trains (the script decides, Determined 0.38's style):

- ASHA (``adaptive.yaml``: ``time_metric: batches``, ``max_time``): ``max_time`` batches,
  validating every ``max_time / divisor ** (max_rungs - 1)`` batches (the lowest rung);
- otherwise (``const.yaml``): the ``max_steps`` hyperparameter, validating every
  ``val_every`` batches.

Several slots (``resources.slots_per_trial``) run ``strategy="ddp"`` over the processes
that ``python3 -m dauntless.launch.torch_distributed`` starts (gloo on CPU).

On a cluster: ``det experiment create const.yaml .``; off it: ``python train.py``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import dauntless
from dauntless import core
from dauntless.integrations.lightning import DeterminedCallback

LOCAL_HPARAMS: dict[str, Any] = {
    "global_batch_size": 32,
    "lr": 0.003,
    "hidden_size": 64,
    "max_steps": 120,
    "val_every": 40,
    "seed": 0,
}


class DigitsModule(pl.LightningModule):
    """An MLP classifier of 8x8 digit images ([batch, 64] floats in [0, 1] -> 10 logits)."""

    def __init__(self, hidden_size: int, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 10))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def digits(batch_size: int, seed: int) -> tuple[StatefulDataLoader, DataLoader]:
    """Train and validation loaders of the 1,797 digits (20% held out, split by ``seed``).

    The training loader is a ``StatefulDataLoader`` (torchdata): Lightning stores its
    position and shuffle state in the checkpoint, so a run resumed mid-epoch sees the
    batches an uninterrupted one would (a plain ``DataLoader`` restarts the epoch).
    """
    images, labels = load_digits(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(images))
    x = torch.tensor(images / 16.0, dtype=torch.float32)
    y = torch.tensor(labels, dtype=torch.int64)
    n_val = len(images) // 5
    val, train = torch.from_numpy(order[:n_val]), torch.from_numpy(order[n_val:])
    return (
        StatefulDataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=256),
    )


def schedule(searcher: dict[str, Any], hparams: dict[str, Any]) -> tuple[int, int]:
    """``(max_steps, validate every N batches)`` from the searcher and hyperparameters."""
    if searcher.get("name") in ("adaptive_asha", "async_halving") and "max_time" in searcher:
        max_time = int(searcher["max_time"])
        rungs = int(searcher.get("max_rungs", 5))
        divisor = float(searcher.get("divisor", 4))
        return max_time, max(1, int(max_time / divisor ** (rungs - 1)))
    return int(hparams["max_steps"]), int(hparams["val_every"])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    hparams = dict(LOCAL_HPARAMS)
    searcher: dict[str, Any] = {}
    latest, trial_id = None, None
    if info is not None and info.trial is not None:
        hparams.update(info.trial.hparams)
        searcher = dict(info.trial.config.get("searcher", {}))
        latest, trial_id = info.latest_checkpoint, info.trial.trial_id
    max_steps, val_every = schedule(searcher, hparams)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    os.environ.setdefault("NODE_RANK", os.environ.get("GROUP_RANK", "0"))
    distributed = core.DistributedContext.from_torch_distributed() if world > 1 else None
    pl.seed_everything(int(hparams["seed"]), verbose=False)
    train, val = digits(int(hparams["global_batch_size"]) // world, int(hparams["seed"]))
    model = DigitsModule(int(hparams["hidden_size"]), float(hparams["lr"]))
    with core.init(distributed=distributed) as core_context:
        det_cb = DeterminedCallback(core_context, checkpoint=latest, continue_id=trial_id)
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=local,
            num_nodes=max(1, world // local),
            strategy="ddp" if world > 1 else "auto",
            max_steps=max_steps,
            val_check_interval=val_every,
            check_val_every_n_epoch=None,
            callbacks=[det_cb],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            deterministic=True,
        )
        trainer.fit(model, train, val, ckpt_path=det_cb.ckpt_path)


if __name__ == "__main__":
    main()
