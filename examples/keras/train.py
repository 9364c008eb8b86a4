"""Keras 3 example: an MLP on scikit-learn's 8x8 digits, ``model.fit`` with Dauntless's
``DeterminedCallback`` (Determined 0.38's ``det.keras.DeterminedCallback``).

Keras runs on its torch backend (``KERAS_BACKEND=torch``, set below unless the
environment names another backend). The callback reports each epoch's training metrics
and each evaluation's validation metrics, checkpoints weights and optimizer state every
epoch, resumes the trial's latest checkpoint after the epoch it stored, and ends training
at an epoch's end when the trial is paused or ASHA stops it.

The training set is shuffled once (by the ``seed`` hyperparameter) and fed in that order
every epoch (``shuffle=False``), so that a resumed run sees the batches an uninterrupted
one would: Keras's own per-epoch shuffle draws from a global generator that a restart
does not restore.

How long it trains: the ``epochs`` hyperparameter, or ASHA's ``max_time`` (``time_metric:
epochs``). On a cluster: ``det experiment create const.yaml .``; off it: ``python train.py``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import dauntless  # noqa: E402
from dauntless import core  # noqa: E402
from dauntless.integrations.keras import DeterminedCallback  # noqa: E402

LOCAL_HPARAMS: dict[str, Any] = {
    "batch_size": 32,
    "lr": 0.003,
    "hidden_size": 64,
    "epochs": 4,
    "seed": 0,
}


def digits(seed: int) -> tuple[np.ndarray, ...]:
    """``(x, y, x_val, y_val)``: [n, 64] float32 in [0, 1] and int labels; 20% held out."""
    images, labels = load_digits(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(images))
    x, y = (images[order] / 16.0).astype("float32"), labels[order].astype("int64")
    n_val = len(images) // 5
    return x[n_val:], y[n_val:], x[:n_val], y[:n_val]


def build(hidden_size: int, lr: float) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(hidden_size, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    hparams = dict(LOCAL_HPARAMS)
    searcher: dict[str, Any] = {}
    latest, trial_id = None, "local"
    if info is not None and info.trial is not None:
        hparams.update(info.trial.hparams)
        searcher = dict(info.trial.config.get("searcher", {}))
        latest, trial_id = info.latest_checkpoint, str(info.trial.trial_id)
    epochs = int(hparams["epochs"])
    if searcher.get("time_metric") == "epochs" and "max_time" in searcher:
        epochs = int(searcher["max_time"])
    keras.utils.set_random_seed(int(hparams["seed"]))
    x, y, x_val, y_val = digits(int(hparams["seed"]))
    model = build(int(hparams["hidden_size"]), float(hparams["lr"]))
    with core.init() as core_context:
        det_cb = DeterminedCallback(core_context, checkpoint=latest, continue_id=trial_id)
        model.fit(
            x,
            y,
            batch_size=int(hparams["batch_size"]),
            epochs=epochs,
            shuffle=False,
            validation_data=(x_val, y_val),
            callbacks=[det_cb],
            verbose=0,
        )


if __name__ == "__main__":
    main()
