"""Train the DeepSpeed digits trial with the Trainer API (``det.pytorch.deepspeed``'s
style): ``python train.py`` trains locally (DS_ACCELERATOR=cpu on a CPU-only machine);
as an experiment's entrypoint (``python3 -m dauntless.launch.deepspeed python3
train.py``) it trains the cluster's trial and resumes from its latest checkpoint."""

from __future__ import annotations

import logging

from model_def import DigitsDeepSpeedTrial

import dauntless
from dauntless.pytorch import Batch
from dauntless.pytorch.deepspeed import Trainer, init

HPARAMS = {
    "global_batch_size": 16,
    "micro_batch_size": 16,
    "zero_stage": 1,
    "lr": 0.05,
    "hidden_size": 64,
}

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=dauntless.LOG_FORMAT)
    info = dauntless.get_cluster_info()
    with init(hparams=HPARAMS) as context:
        trial = DigitsDeepSpeedTrial(context)
        Trainer(trial, context).fit(
            max_length=Batch(200),
            validation_period=Batch(50),
            checkpoint_period=Batch(100),
            latest_checkpoint=info.latest_checkpoint if info is not None else None,
        )
