"""Hugging Face Transformers example: a tiny BERT, built from a config in code, classifies
scikit-learn's 8x8 digits read as 64 "tokens" (pixel intensities 0-16), trained by
``transformers.Trainer`` with Dauntless's ``DetCallback``.

The callback reports the Trainer's logs (``loss``, ``eval_loss``, ``eval_accuracy``),
uploads each ``checkpoint-<step>`` to the experiment's checkpoint storage and resumes from
the trial's latest one (``trainer.train(resume_from_checkpoint=...)``); a pause or an
ASHA stop saves and ends training. Nothing is downloaded: the data ship with
scikit-learn and the model's weights start random.

How long it trains: ``max_steps`` batches (the ``max_steps`` hyperparameter, or the ASHA
searcher's ``max_time``, which DetCallback requires to match); it evaluates and saves
every ``eval_every`` batches (ASHA: the lowest rung's length).

Several slots run data-parallel through ``python3 -m dauntless.launch.torch_distributed``
(the torchrun environment that the Trainer reads; gloo on CPU).

On a cluster: ``det experiment create const.yaml .``; off it: ``python train.py``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import numpy as np
import torch
import transformers
from sklearn.datasets import load_digits
from torch.utils.data import Dataset

import dauntless
from dauntless import core
from dauntless.integrations.transformers import DetCallback

LOCAL_HPARAMS: dict[str, Any] = {
    "global_batch_size": 32,
    "lr": 0.001,
    "hidden_size": 32,
    "max_steps": 60,
    "eval_every": 20,
    "seed": 0,
}


class DigitTokens(Dataset):
    """Digits as token sequences: ``input_ids`` [64] int64 in 0..16, ``labels`` int."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.ids = torch.tensor(images, dtype=torch.int64)
        self.labels = torch.tensor(labels, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def datasets(seed: int) -> tuple[DigitTokens, DigitTokens]:
    """Train and validation sets (20% of the 1,797 digits held out, split by ``seed``)."""
    images, labels = load_digits(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(images))
    n_val = len(images) // 5
    val, train = order[:n_val], order[n_val:]
    return DigitTokens(images[train], labels[train]), DigitTokens(images[val], labels[val])


def model(hidden_size: int) -> transformers.PreTrainedModel:
    """A one-layer BERT classifier over the 17 pixel values (random weights)."""
    config = transformers.BertConfig(
        vocab_size=17,
        hidden_size=hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=64,
        num_labels=10,
    )
    return transformers.BertForSequenceClassification(config)


def accuracy(pred: transformers.EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def schedule(searcher: dict[str, Any], hparams: dict[str, Any]) -> tuple[int, int]:
    """``(max_steps, evaluate and save every N batches)``."""
    if searcher.get("name") in ("adaptive_asha", "async_halving") and "max_time" in searcher:
        max_time = int(searcher["max_time"])
        rungs, divisor = int(searcher.get("max_rungs", 5)), float(searcher.get("divisor", 4))
        return max_time, max(1, int(max_time / divisor ** (rungs - 1)))
    return int(hparams["max_steps"]), int(hparams["eval_every"])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    hparams = dict(LOCAL_HPARAMS)
    searcher: dict[str, Any] = {}
    if info is not None and info.trial is not None:
        hparams.update(info.trial.hparams)
        searcher = dict(info.trial.config.get("searcher", {}))
    max_steps, every = schedule(searcher, hparams)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = core.DistributedContext.from_torch_distributed() if world > 1 else None
    train, val = datasets(int(hparams["seed"]))
    # The Trainer's own saves: one directory per run (every rank of it writes there).
    run = info.allocation_id if info is not None else "local"
    out = os.path.join(tempfile.gettempdir(), f"hf-{run}")
    args = transformers.TrainingArguments(
        output_dir=out,
        max_steps=max_steps,
        per_device_train_batch_size=int(hparams["global_batch_size"]) // world,
        per_device_eval_batch_size=256,
        learning_rate=float(hparams["lr"]),
        eval_strategy="steps",
        eval_steps=every,
        save_strategy="steps",
        save_steps=every,
        logging_steps=10,
        report_to="none",
        use_cpu=True,
        seed=int(hparams["seed"]),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    with core.init(distributed=distributed) as core_context:
        det_callback = DetCallback(core_context, args)
        # The Trainer seeds only when it is built: seed the model's random weights too, so
        # that two runs of the same hyperparameters start alike.
        transformers.set_seed(int(hparams["seed"]))
        trainer = transformers.Trainer(
            model=model(int(hparams["hidden_size"])),
            args=args,
            train_dataset=train,
            eval_dataset=val,
            compute_metrics=accuracy,
            callbacks=[det_callback],
        )
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
