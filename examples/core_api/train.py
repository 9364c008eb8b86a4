"""Core API example: linear regression with numpy, reported through ``dauntless.core``.

Runs on a cluster (``det experiment create const.yaml .``; the entrypoint is
``python3 train.py``) and off it (``python train.py``: local mode, checkpoints under the
system's temporary directory). It shows the Core API's parts:

- ``dauntless.get_cluster_info()``: hyperparameters and the checkpoint to resume from;
- ``core_context.searcher.operations()``: how long to train (absolute batch counts);
- ``core_context.train``: training and validation metrics;
- ``core_context.checkpoint``: ``store_path`` / ``restore_path``;
- ``core_context.preempt.should_preempt()``: checkpoint and exit 0 when paused.

The data order is a pure function of the batch index, so a resumed run sees the same
batches an uninterrupted one would.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

import dauntless
from dauntless import core

FEATURES = 8
RECORDS = 1024
LOCAL_HPARAMS = {"lr": 0.05, "batch_size": 32, "seed": 0}
LOCAL_LENGTH = 200  # batches, off the cluster
REPORT_EVERY = 20  # batches

logger = logging.getLogger("core_api_example")


def make_data(seed: int) -> tuple[np.ndarray, ...]:
    """Training and validation sets of one noisy linear function.

    Returns:
        ``(x, y, x_val, y_val, true_w)``: features [RECORDS, FEATURES], targets
        [RECORDS], the same for validation, and the true weights [FEATURES].
    """
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=FEATURES)
    x, x_val = rng.normal(size=(2, RECORDS, FEATURES))
    y = x @ true_w + 0.1 * rng.normal(size=RECORDS)
    y_val = x_val @ true_w + 0.1 * rng.normal(size=RECORDS)
    return x, y, x_val, y_val, true_w


def save(ctx: core.Context, w: np.ndarray, batches: int) -> str:
    """Checkpoint the weights and the batch count; returns the checkpoint's uuid."""
    with ctx.checkpoint.store_path({"steps_completed": batches}) as (path, uuid):
        np.save(path / "weights.npy", w)
        (path / "state.json").write_text(json.dumps({"batches": batches}))
    return uuid


def restore(ctx: core.Context, uuid: str) -> tuple[np.ndarray, int]:
    """The weights and batch count of a checkpoint."""
    with ctx.checkpoint.restore_path(uuid) as path:
        w = np.load(Path(path) / "weights.npy")
        batches = json.loads((Path(path) / "state.json").read_text())["batches"]
    return w, batches


class _LocalOperation:
    """Off the cluster: one operation of LOCAL_LENGTH batches."""

    length = LOCAL_LENGTH

    def report_progress(self, length: float) -> None:
        logger.info("progress: %d of %d batches", length, self.length)

    def report_completed(self, metric: float) -> None:
        logger.info("done: validation_loss %.6f", metric)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    hparams = dict(LOCAL_HPARAMS)
    latest = None
    if info is not None and info.trial is not None:
        hparams.update(info.trial.hparams)
        latest = info.latest_checkpoint
    lr, batch_size = float(hparams["lr"]), int(hparams["batch_size"])
    seed = int(hparams["seed"])
    x, y, x_val, y_val, true_w = make_data(seed)

    with core.init() as ctx:
        w, batches = (np.zeros(FEATURES), 0) if latest is None else restore(ctx, latest)
        logger.info("starting at batch %d", batches)
        ops = ctx.searcher.operations() if info is not None else [_LocalOperation()]
        for op in ops:
            window: list[float] = []
            while batches < op.length:
                # The batch is chosen by its index alone: resumable without RNG state.
                idx = np.random.default_rng([seed, batches]).choice(RECORDS, batch_size)
                err = x[idx] @ w - y[idx]
                w = w - lr * 2 * x[idx].T @ err / batch_size
                window.append(float(np.mean(err**2)))
                batches += 1
                if batches % REPORT_EVERY == 0 or batches == op.length:
                    ctx.train.report_training_metrics(batches, {"loss": float(np.mean(window))})
                    op.report_progress(batches)
                    window = []
                if ctx.preempt.should_preempt():
                    uuid = save(ctx, w, batches)
                    logger.info("preempted at batch %d: saved %s, exiting", batches, uuid)
                    return 0
            val_loss = float(np.mean((x_val @ w - y_val) ** 2))
            ctx.train.report_validation_metrics(
                batches,
                {"validation_loss": val_loss, "weight_error": float(np.abs(w - true_w).max())},
            )
            save(ctx, w, batches)
            op.report_completed(val_loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
