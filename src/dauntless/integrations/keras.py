"""Keras 3 on the platform: :class:`DeterminedCallback` (Determined 0.38's
``det.keras.DeterminedCallback``, same arguments and behaviour).

::

    info = dauntless.get_cluster_info()
    with core.init() as core_context:
        det_cb = DeterminedCallback(
            core_context, checkpoint=info.latest_checkpoint, continue_id=info.trial.trial_id
        )
        model.fit(x, y, epochs=..., validation_data=..., callbacks=[det_cb])

Tested with the torch backend (``KERAS_BACKEND=torch``); the callback uses only Keras's
own API, so the TensorFlow and JAX backends work the same where they are installed.

- training metrics every ``train_metrics_report_period`` batches (an int), or at each
  epoch's end (``"epoch"``: the epoch's logs without the ``val_`` ones); validation
  metrics at the end of each evaluation (``on_test_end``, unprefixed names such as
  ``loss``, ``accuracy``); both with ``batches`` and ``epochs`` added (for ASHA's
  ``time_metric``);
- checkpoints every ``checkpoint_epochs`` epochs (0: only at preemption and the end)
  and at the end of training: the model's weights (``model_checkpoint.weights.h5``,
  :meth:`DeterminedCallback.save_model`), the optimizer's variables
  (``optimizer.npz``) and the callback's state (``det_state.json``: epoch, batches,
  ``continue_id``);
- resume at ``on_train_begin``: a checkpoint of the same ``continue_id`` restores the
  weights and the optimizer and continues after its epoch; one of another
  ``continue_id`` only warm-starts the weights (from epoch 0);
- preemption is checked at each epoch's end: training stops (``model.stop_training``)
  and the epoch is checkpointed, so no batch is trained twice. After reporting a
  validation the chief waits for the searcher's decision on it (the report is
  delivered, then the master asked at once): a trial ASHA stops at a rung ends with
  the epoch whose validation reached the rung, not an epoch later when the signal's
  watcher would have heard of it. A pause still waits for the epoch's end, as in
  Determined (a checkpoint resumes at an epoch boundary).

Data-parallel training over several slots is not available on the torch backend: Keras
3's ``keras.distribution`` is implemented for JAX and TensorFlow only. With
``resources.slots_per_trial`` above 1 on the torch backend the callback warns (naming
the field) and the script trains in its one process.

It replaces Keras's progress bar (it is a ``ProgbarLogger``) with log lines; do not
combine it with ``BackupAndRestore`` or ``ModelCheckpoint``.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import keras
import numpy as np

from dauntless import core

from ._common import Progress, check_searcher_metric, float_metrics, read_state, write_state

logger = logging.getLogger("dauntless.integrations.keras")

WEIGHTS_FILE = "model_checkpoint.weights.h5"
OPTIMIZER_FILE = "optimizer.npz"


class DeterminedCallback(keras.callbacks.ProgbarLogger):
    """Report a Keras ``fit`` to the platform.

    Args:
        core_context: the Core API context of this process.
        checkpoint: uuid of the checkpoint to start from, or None.
        continue_id: the identity of this training (``info.trial.trial_id``): a
            checkpoint written under the same id is continued, another only
            warm-starts the weights.
        train_metrics_report_period: an int >= 1 (batches) or ``"epoch"``.
        checkpoint_epochs: checkpoint every this many epochs (int >= 0; 0 = only at
            preemption and the end).

    Raises:
        TypeError: if ``core_context`` is not a :class:`dauntless.core.Context`.
        ValueError: for a bad ``train_metrics_report_period`` or ``checkpoint_epochs``.
    """

    def __init__(
        self,
        core_context: core.Context,
        checkpoint: str | None,
        continue_id: int | str,
        *,
        train_metrics_report_period: int | str = "epoch",
        checkpoint_epochs: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(core_context, core.Context):
            raise TypeError(
                f"core_context must be a dauntless.core.Context, got {type(core_context).__name__}"
            )
        period = train_metrics_report_period
        if period != "epoch" and (
            isinstance(period, bool) or not isinstance(period, int) or period < 1
        ):
            raise ValueError(
                f"train_metrics_report_period must be 'epoch' or an int >= 1, got {period!r}"
            )
        if (
            isinstance(checkpoint_epochs, bool)
            or not isinstance(checkpoint_epochs, int)
            or checkpoint_epochs < 0
        ):
            raise ValueError(f"checkpoint_epochs must be an int >= 0, got {checkpoint_epochs!r}")
        self.core_context = core_context
        self.checkpoint = checkpoint
        self.continue_id = str(continue_id)
        self.report_period = period
        self.checkpoint_epochs = checkpoint_epochs
        self.steps_completed = 0
        self._epoch = 0
        self._checkpointed_at: int | None = None
        self._preempted = False
        self._progress = Progress(core_context)
        slots = (core_context.trial.config.get("resources") or {}).get("slots_per_trial", 1)
        if isinstance(slots, int) and slots > 1 and keras.backend.backend() == "torch":
            logger.warning(
                "resources.slots_per_trial is %d, but Keras's torch backend has no "
                "data-parallel training (keras.distribution supports JAX and TensorFlow "
                "only): this process trains alone; set resources.slots_per_trial: 1",
                slots,
            )

    # ------------------------------------------------------------------ saving

    def save_model(
        self, model: keras.Model, path: Path, distributed: core.DistributedContext
    ) -> None:
        """Write the model into checkpoint directory ``path`` (chief only by default).

        Override to save differently; :meth:`load_model` must read it back.
        """
        if distributed.is_chief:
            model.save_weights(path / WEIGHTS_FILE)
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None and optimizer.built:
                np.savez(
                    path / OPTIMIZER_FILE,
                    *[np.asarray(keras.ops.convert_to_numpy(v)) for v in optimizer.variables],
                )

    def load_model(
        self, model: keras.Model, path: Path, distributed: core.DistributedContext
    ) -> None:
        """Read what :meth:`save_model` wrote: the weights, and the optimizer's state.

        Raises:
            ValueError: if the stored optimizer state does not fit the model's optimizer.
        """
        model.load_weights(path / WEIGHTS_FILE)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or not (path / OPTIMIZER_FILE).is_file():
            return
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        with np.load(path / OPTIMIZER_FILE) as stored:
            arrays = [stored[f"arr_{i}"] for i in range(len(stored.files))]
        if len(arrays) != len(optimizer.variables):
            raise ValueError(
                f"the checkpoint holds {len(arrays)} optimizer variables, the model's "
                f"optimizer has {len(optimizer.variables)}: a different optimizer or model"
            )
        for var, value in zip(optimizer.variables, arrays, strict=True):
            var.assign(value)

    def _save(self, epoch: int) -> None:
        if self._checkpointed_at == self.steps_completed:
            return
        meta = {"steps_completed": self.steps_completed, "framework": f"keras {keras.__version__}"}
        dist = self.core_context.distributed
        with self.core_context.checkpoint.store_path(meta, shard=True) as (path, _):
            self.save_model(self.model, path, dist)
            if dist.is_chief:
                write_state(
                    path,
                    {
                        "epoch": epoch,
                        "steps_completed": self.steps_completed,
                        "continue_id": self.continue_id,
                    },
                )
        self._checkpointed_at = self.steps_completed

    # ------------------------------------------------------------------ events

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Restore from ``checkpoint``: continue it, or warm-start from it."""
        if self.checkpoint is None:
            return
        with tempfile.TemporaryDirectory(prefix="dauntless-keras-") as tmp:
            self.core_context.checkpoint.download(
                self.checkpoint, tmp, download_mode=core.DownloadMode.NoSharedDownload
            )
            path = Path(tmp)
            self.load_model(self.model, path, self.core_context.distributed)
            state = read_state(path)
        if state.get("continue_id") == self.continue_id:
            self._epoch = int(state["epoch"]) + 1
            self.steps_completed = int(state["steps_completed"])
            self._checkpointed_at = self.steps_completed
            # Keras's fit loop runs `for epoch in range(self._initial_epoch, epochs)`.
            self.model._initial_epoch = self._epoch
            logger.info(
                "continuing checkpoint %s at epoch %d (%d batches trained)",
                self.checkpoint,
                self._epoch,
                self.steps_completed,
            )
        else:
            logger.info("warm start: the weights of checkpoint %s", self.checkpoint)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.steps_completed += 1
        if self.report_period == "epoch":
            return
        # Only the reporting batch's logs are reported (Keras's are running means over
        # the epoch), so only that batch converts them.
        if self.steps_completed % int(self.report_period) == 0:
            self._report_training(float_metrics(logs or {}))

    def _report_training(self, metrics: dict[str, float]) -> None:
        if not self.core_context.distributed.is_chief:
            return
        metrics = dict(metrics)
        metrics.setdefault("batches", float(self.steps_completed))
        metrics.setdefault("epochs", float(self._epoch + 1))
        self.core_context.train.report_training_metrics(self.steps_completed, metrics)
        epochs = self.params.get("epochs") if self.params else None
        if epochs:
            self._progress.report((self._epoch + 1) / epochs)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        """Report the evaluation's metrics as validation metrics."""
        if not self.core_context.distributed.is_chief or self.model is None:
            return
        metrics = float_metrics(logs or {})
        metrics.setdefault("batches", float(self.steps_completed))
        metrics.setdefault("epochs", float(self._epoch + 1))
        check_searcher_metric(self.core_context, metrics)
        self.core_context.train.report_validation_metrics(self.steps_completed, metrics)
        # The searcher judges the trial on this report (ASHA at a rung): wait for its
        # decision, so that this epoch's end sees a stop instead of the next one's.
        self.core_context.preempt.ask_master_now()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Report the epoch, checkpoint when due, and check preemption."""
        if self.report_period == "epoch":
            self._report_training(
                {k: v for k, v in float_metrics(logs or {}).items() if not k.startswith("val_")}
            )
        logger.info("total batches trained: %d, epoch %d done", self.steps_completed, epoch + 1)
        if self.checkpoint_epochs and (epoch + 1) % self.checkpoint_epochs == 0:
            self._save(epoch)
        if self.core_context.preempt.should_preempt():
            logger.info("preempted after epoch %d: checkpointing and stopping", epoch + 1)
            self._preempted = True
            self._save(epoch)
            self.model.stop_training = True

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Checkpoint work not yet checkpointed."""
        self._save(self._epoch)
        if not self._preempted:
            self._progress.report(1.0)

    # The progress bar's per-batch output is replaced by the log lines above.
    def on_predict_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        return None

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        return None

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        return None

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        return None

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        return None


__all__ = ["OPTIMIZER_FILE", "WEIGHTS_FILE", "DeterminedCallback"]
