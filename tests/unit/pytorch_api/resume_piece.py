"""One piece of a training run, in a process of its own (run by test_exact_resume.py).

    python resume_piece.py STORAGE TOTAL STOP_AT LATEST OUT

Trains ResumeTrial with the Trainer in local mode to TOTAL batches, resuming from
checkpoint LATEST ("-" for none) and stopping (checkpoint, return) after batch STOP_AT
(0: never). Writes OUT.json (the checkpoint it ended with and the metrics it reported)
and OUT.pt (the final model and optimizer state).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from api_trials import Recorder, ResumeTrial, local_conf

from dauntless.pytorch import Batch, Trainer, init


class StopAt(ResumeTrial):
    stop_at = 0

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        out = super().train_batch(batch, epoch_idx, batch_idx)
        if batch_idx + 1 == self.stop_at:
            self.context.set_stop_requested(True)
        return out

    def build_callbacks(self) -> dict[str, Any]:
        return {"recorder": RECORDER}


RECORDER = Recorder()


def main(storage: str, total: int, stop_at: int, latest: str, out: str) -> None:
    """Run one piece in the current process (see the module docstring)."""
    os.chdir(storage)
    torch.set_num_threads(1)
    StopAt.stop_at = stop_at
    with init(exp_conf=local_conf(storage)) as context:
        trial = StopAt(context)
        result = Trainer(trial, context).fit(
            max_length=Batch(total),
            reporting_period=Batch(5),
            validation_period=Batch(12),
            latest_checkpoint=None if latest == "-" else latest,
        )
    calls = RECORDER.calls
    record = {
        "result": result.value,
        "last_uuid": [args[0] for hook, args in calls if hook == "on_checkpoint_upload_end"][-1],
        "training": [
            [args[0]["batches"], args[0], args[1]]
            for hook, args in calls
            if hook == "on_training_workload_end"
        ],
        "validation": [
            [args[0]["batches"], args[0]] for hook, args in calls if hook == "on_validation_end"
        ],
        "callback_count": RECORDER.count,
    }
    with open(out + ".json", "w") as f:
        json.dump(record, f)
    torch.save(
        {"model": trial.model.state_dict(), "optimizer": trial.opt.state_dict()}, out + ".pt"
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
