"""Digits, trained by a script with the Trainer API (Determined 0.38's style).

The model is ``DigitsTrial`` of ``model_def.py`` (an MLP on scikit-learn's bundled 8x8
digits, no download). This script decides how long it trains, how often it validates and
reports, and where it resumes from; the experiment config only names the script
(``entrypoint: python3 train.py``), the hyperparameters and the searcher.

How long it trains:

- an ASHA search (``adaptive_asha`` / ``async_halving`` with ``time_metric`` and
  ``max_time``, as in ``adaptive.yaml``): ``max_time`` batches or epochs, validating at
  every rung of the lowest rung's length, so the searcher can stop a trial at any rung
  (the trial reports ``batches`` and ``epochs`` with every validation);
- otherwise (``const.yaml``, ``grid.yaml``): the ``epochs`` hyperparameter, validating
  once an epoch.

On a cluster: ``det experiment create const.yaml .``. Off the cluster: ``python
train.py`` trains locally (no master) with :data:`LOCAL_CONFIG` and checkpoints under
``./checkpoints``.
"""

from __future__ import annotations

import logging
from typing import Any

from model_def import DigitsTrial

import dauntless
from dauntless import pytorch as det_torch

#: Off the cluster: the hyperparameters and settings of const.yaml, 3 epochs.
LOCAL_CONFIG: dict[str, Any] = {
    "hyperparameters": {
        "global_batch_size": 32,
        "lr": 0.003,
        "hidden_size": 128,
        "dropout": 0.1,
        "optimizer": "adam",
        "epochs": 3,
    },
    "data": {"validation_fraction": 0.2, "split_seed": 0},
    "searcher": {"name": "single", "metric": "accuracy", "smaller_is_better": False},
    "checkpoint_storage": {"type": "directory", "container_path": "checkpoints"},
    "reproducibility": {"experiment_seed": 0},
}

#: Training metrics are averaged and reported every this many batches.
REPORTING_PERIOD = det_torch.Batch(20)


def schedule(
    searcher: dict[str, Any], hparams: dict[str, Any]
) -> tuple[det_torch.TrainUnit, det_torch.TrainUnit]:
    """How long to train and how often to validate.

    Args:
        searcher: the experiment config's ``searcher`` section.
        hparams: the trial's hyperparameters.

    Returns:
        ``(max_length, validation_period)``, both ``Batch`` or ``Epoch``.

    Raises:
        ValueError: an ASHA search whose ``time_metric`` is not ``batches`` or ``epochs``
            (this script reports only those), or no ``epochs`` hyperparameter otherwise.
    """
    max_time = searcher.get("max_time")
    if max_time is not None:
        metric = searcher.get("time_metric")
        if metric not in ("batches", "epochs"):
            raise ValueError(f"searcher.time_metric must be batches or epochs, got {metric!r}")
        unit = det_torch.Batch if metric == "batches" else det_torch.Epoch
        # The lowest rung of ASHA's brackets (Li et al., "A System for Massively Parallel
        # Hyperparameter Tuning", 2020): max_time / divisor^(rungs - 1).
        divisor = int(searcher.get("divisor") or 4)
        rungs = int(searcher.get("max_rungs") or searcher.get("num_rungs") or 5)
        lowest = max(1, int(max_time) // divisor ** (rungs - 1))
        return unit(int(max_time)), unit(lowest)
    if "epochs" not in hparams:
        raise ValueError("the hyperparameter 'epochs' (how long to train) is missing")
    return det_torch.Epoch(int(hparams["epochs"])), det_torch.Epoch(1)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    local = info is None or info.trial is None
    with det_torch.init(exp_conf=LOCAL_CONFIG if local else None) as context:
        config = LOCAL_CONFIG if local else info.trial.config  # type: ignore[union-attr]
        max_length, validation_period = schedule(config["searcher"], context.get_hparams())
        trial = DigitsTrial(context)
        det_torch.Trainer(trial, context).fit(
            max_length=max_length,
            validation_period=validation_period,
            reporting_period=REPORTING_PERIOD,
            latest_checkpoint=None if local else info.latest_checkpoint,  # type: ignore[union-attr]
        )


if __name__ == "__main__":
    main()
