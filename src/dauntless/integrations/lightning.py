"""Lightning 2.x on the platform: :class:`DeterminedCallback`.

A ``lightning.pytorch.Callback`` that maps the ``Trainer``'s events to the Core API::

    info = dauntless.get_cluster_info()
    with core.init(distributed=...) as core_context:
        det_cb = DeterminedCallback(
            core_context, checkpoint=info.latest_checkpoint, continue_id=info.trial.trial_id
        )
        trainer = lightning.pytorch.Trainer(max_steps=..., callbacks=[det_cb], ...)
        trainer.fit(model, datamodule, ckpt_path=det_cb.ckpt_path)

- training metrics every ``train_metrics_report_period`` batches: the mean of the
  ``loss`` the ``training_step`` returned over those batches (averaged over the ranks)
  and the latest values the module logged (``self.log``) that are not validation ones;
- validation metrics at the end of each validation run: the logged values whose names
  start with ``validation_prefix`` (``val_`` by default; log them with
  ``sync_dist=True`` under DDP), plus ``batches`` and ``epochs`` for the searcher's
  ``time_metric``;
- checkpoints in Lightning's own format (``Trainer.save_checkpoint`` into the
  platform's checkpoint storage as ``lightning.ckpt``, with the callback's state in
  ``det_state.json``): after each validation, every ``checkpoint_every_n_batches``
  batches if set, at preemption and at the end;
- resume: :attr:`DeterminedCallback.ckpt_path` is the local copy of ``checkpoint`` to
  pass to ``Trainer.fit(ckpt_path=...)``, so model, optimizers, schedulers, loops and
  callbacks continue where they stopped; a checkpoint of another trial (a different
  ``continue_id``) only warm-starts the model's weights;
- exact resume mid-epoch needs a resumable training loader (torchdata's
  ``StatefulDataLoader``, or any loader with ``state_dict``/``load_state_dict``):
  Lightning stores its position and shuffle state in the checkpoint; a plain
  ``DataLoader`` restarts the interrupted epoch (Lightning warns);
- preemption (pause, an ASHA stop, a kill of the experiment) is checked every
  ``preemption_check_period`` batches and after each validation: the callback
  checkpoints and sets ``trainer.should_stop``; ``fit`` returns and the script exits 0.
  After reporting a validation the chief waits for the searcher's decision on it (the
  report is delivered, then the master asked at once), so a trial ASHA stops at a rung
  ends at that validation, not some batches later when the signal's watcher hears of
  it. (In Determined 0.38's mode, ``searcher.max_time``, the rungs are judged at the
  validations the script makes: validate at the rung lengths to stop exactly there.)

A batch here is an optimizer step (``trainer.global_step``). Data-parallel runs use
``strategy="ddp"`` with the processes the platform's launcher started
(``python3 -m dauntless.launch.torch_distributed``): every rank builds the callback with
``DistributedContext.from_torch_distributed()`` in ``core.init``.

Determined 0.38 had only ``determined.lightning.DetLogger`` (training metrics, no
checkpoints or preemption); this callback is the complete integration, and
``determined.lightning`` answers with it too.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from dauntless import core

from ._common import Progress, check_searcher_metric, float_metrics, read_state, write_state

logger = logging.getLogger("dauntless.integrations.lightning")

CHECKPOINT_FILE = "lightning.ckpt"
"""The name of Lightning's checkpoint file inside a platform checkpoint."""

SKIPPED_HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)
"""Per-batch hooks :class:`DeterminedCallback` does not use. Lightning 2.x calls every
callback's every hook through a profiler context (about 5 us a hook on these machines:
1.7% of ``benchmarks/framework_overhead.py``'s 1.5 ms batch for the five training ones,
measured on Lightning 2.6); it skips a hook whose
attribute is not callable (``lightning.pytorch.trainer.call._call_callback_hooks``), so
the callback sets these to None on its instance (a subclass that overrides one keeps it).
"""


class DeterminedCallback(pl.Callback):
    """Report a Lightning ``Trainer``'s metrics and checkpoints to the platform.

    Every rank must build it (with the same arguments) and pass it to its ``Trainer``.
    The per-batch hooks it does not use (:data:`SKIPPED_HOOKS`) are None on the instance,
    so Lightning does not dispatch them; a subclass that overrides one keeps it.

    Args:
        core_context: the Core API context of this process (``core.init()``).
        checkpoint: uuid of the checkpoint to start from (``info.latest_checkpoint``),
            or None to start fresh.
        continue_id: the identity of this training (``info.trial.trial_id``): a
            checkpoint written under the same id is resumed exactly, one written under
            another only gives the model its weights.
        train_metrics_report_period: report training metrics every this many batches
            (optimizer steps), an int >= 1.
        checkpoint_every_n_batches: also checkpoint every this many batches; None:
            only after validations, at preemption and at the end.
        preemption_check_period: ask for the preemption signal every this many batches
            (each ask is a collective over the ranks), an int >= 1.
        validation_prefix: logged metrics whose names start with it are validation
            metrics.

    Raises:
        TypeError: if ``core_context`` is not a :class:`dauntless.core.Context`.
        ValueError: for a period that is not an int >= 1.
    """

    def __init__(
        self,
        core_context: core.Context,
        checkpoint: str | None = None,
        continue_id: int | str | None = None,
        *,
        train_metrics_report_period: int = 10,
        checkpoint_every_n_batches: int | None = None,
        preemption_check_period: int = 1,
        validation_prefix: str = "val_",
    ) -> None:
        super().__init__()
        if not isinstance(core_context, core.Context):
            raise TypeError(
                f"core_context must be a dauntless.core.Context, got {type(core_context).__name__}"
            )
        for name, value in (
            ("train_metrics_report_period", train_metrics_report_period),
            ("preemption_check_period", preemption_check_period),
            ("checkpoint_every_n_batches", checkpoint_every_n_batches or 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1 (batches), got {value!r}")
        self.core = core_context
        self.checkpoint = checkpoint
        self.continue_id = None if continue_id is None else str(continue_id)
        self.report_period = train_metrics_report_period
        self.checkpoint_period = checkpoint_every_n_batches
        self.preemption_period = preemption_check_period
        self.validation_prefix = validation_prefix
        self._progress = Progress(core_context)
        # Detached loss tensors since the last report, read at report time (_mean), not
        # converted to a float every batch (each conversion waits for an accelerator).
        self._losses: list[torch.Tensor] = []
        self._last_checkpoint_step: int | None = None
        self._preempted = False
        self._download: tempfile.TemporaryDirectory[str] | None = None
        self._resume_file: Path | None = None
        self._warm_start_file: Path | None = None
        for hook in SKIPPED_HOOKS:
            if getattr(type(self), hook) is getattr(pl.Callback, hook):
                setattr(self, hook, None)
        if checkpoint is not None:
            self._fetch(checkpoint)

    # ------------------------------------------------------------------ restore

    def _fetch(self, storage_id: str) -> None:
        """Copy the checkpoint to a local directory (every rank its own copy)."""
        self._download = tempfile.TemporaryDirectory(prefix="dauntless-lightning-")
        path = Path(self._download.name)
        self.core.checkpoint.download(
            storage_id, path, download_mode=core.DownloadMode.NoSharedDownload
        )
        ckpt = path / CHECKPOINT_FILE
        if not ckpt.is_file():
            raise FileNotFoundError(
                f"checkpoint {storage_id} holds no {CHECKPOINT_FILE}: it was not written by "
                "the Lightning integration"
            )
        state = read_state(path)
        if self.continue_id is not None and state.get("continue_id") == self.continue_id:
            self._resume_file = ckpt
            logger.info("resuming from checkpoint %s (batch %s)", storage_id, state.get("batches"))
        else:
            self._warm_start_file = ckpt
            logger.info("warm start: the model's weights from checkpoint %s", storage_id)

    @property
    def ckpt_path(self) -> str | None:
        """The local Lightning checkpoint to pass to ``Trainer.fit(ckpt_path=...)``, or
        None (a fresh start, or a warm start that loads only the weights)."""
        return None if self._resume_file is None else str(self._resume_file)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Warm start: load the weights of another trial's checkpoint into the module."""
        if stage == "fit" and self._warm_start_file is not None:
            state = torch.load(self._warm_start_file, map_location="cpu", weights_only=False)
            pl_module.load_state_dict(state["state_dict"])
            self._warm_start_file = None

    # ------------------------------------------------------------------ training

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Collect the loss; report, checkpoint and check preemption when due."""
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._losses.append(loss.detach())
        step = trainer.global_step
        if step % self.report_period == 0:
            self._report_training(trainer)
        if self.checkpoint_period and step % self.checkpoint_period == 0:
            self._save(trainer)
        if step % self.preemption_period == 0:
            self._check_preemption(trainer)

    def _report_training(self, trainer: pl.Trainer) -> None:
        dist = self.core.distributed
        mean = _mean(self._losses) if self._losses else None
        self._losses = []
        if dist.size > 1:
            means = [m for m in dist.allgather(mean) if m is not None]
            mean = sum(means) / len(means) if means else None
        if not dist.is_chief:
            return
        metrics = {
            k: v
            for k, v in float_metrics(trainer.callback_metrics).items()
            if not k.startswith(self.validation_prefix)
        }
        if mean is not None:
            metrics["loss"] = mean
        metrics.setdefault("batches", float(trainer.global_step))
        metrics.setdefault("epochs", float(trainer.current_epoch))
        self.core.train.report_training_metrics(trainer.global_step, metrics)
        self._progress.report(_fraction(trainer))

    def _check_preemption(self, trainer: pl.Trainer) -> None:
        if self._preempted or not self.core.preempt.should_preempt():
            return
        logger.info("preempted at batch %d: checkpointing and stopping", trainer.global_step)
        self._save(trainer)
        self._preempted = True
        trainer.should_stop = True

    # ------------------------------------------------------------------ validation

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Report validation metrics, checkpoint, then check preemption (an ASHA stop
        comes as a preemption right after the validation that decided it)."""
        if trainer.sanity_checking or self._preempted or trainer.state.fn != "fit":
            return
        metrics = {
            k: v
            for k, v in float_metrics(trainer.callback_metrics).items()
            if k.startswith(self.validation_prefix)
        }
        metrics.setdefault("batches", float(trainer.global_step))
        metrics.setdefault("epochs", float(trainer.current_epoch + 1))
        if self.core.distributed.is_chief:
            check_searcher_metric(self.core, metrics)
            self.core.train.report_validation_metrics(trainer.global_step, metrics)
            # The searcher judges the trial on this report (ASHA at a rung): wait for
            # its decision instead of training on until the watcher hears of a stop.
            self.core.preempt.ask_master_now()
        self._save(trainer)
        self._check_preemption(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Checkpoint work not yet checkpointed; report training done."""
        if self._losses and not self._preempted:
            self._report_training(trainer)
        self._save(trainer)
        if not self._preempted:
            self._progress.report(1.0 if _fraction(trainer) >= 1.0 else _fraction(trainer))

    # ------------------------------------------------------------------ checkpoints

    def _save(self, trainer: pl.Trainer) -> None:
        """Store Lightning's checkpoint at this step unless one is stored already (every
        rank calls: ``save_checkpoint`` and a sharded ``store_path`` are collectives)."""
        step = trainer.global_step
        if self._last_checkpoint_step == step:
            return
        meta = {"steps_completed": step, "framework": f"lightning {pl.__version__}"}
        with self.core.checkpoint.store_path(meta, shard=True) as (path, storage_id):
            trainer.save_checkpoint(path / CHECKPOINT_FILE)
            if self.core.distributed.is_chief:
                write_state(
                    path,
                    {
                        "continue_id": self.continue_id,
                        "batches": step,
                        "epoch": trainer.current_epoch,
                    },
                )
        self._last_checkpoint_step = step
        logger.debug("checkpoint %s at batch %d", storage_id, step)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Remove the downloaded checkpoint."""
        if stage == "fit" and self._download is not None:
            self._download.cleanup()
            self._download = None


class DetLogger(pl.loggers.Logger):
    """Determined 0.38's experimental ``determined.lightning.DetLogger``: a Lightning
    ``Logger`` that reports what the module logs as training metrics (rank 0 only).

    It reports only metrics: no checkpoints, validation or preemption; use
    :class:`DeterminedCallback` for those. Determined's unmanaged-mode arguments
    (``defaults``, ``unmanaged``, ``config``, ``client``) are refused with a message.

    Args:
        core_context: the Core API context to report through; None opens one with
            ``core.init()`` at the first report and closes it in ``finalize``.

    Raises:
        TypeError: for a ``core_context`` that is not a Context, or Determined's
            unmanaged-mode arguments.
    """

    def __init__(self, core_context: core.Context | None = None, **unmanaged: Any) -> None:
        super().__init__()
        if unmanaged:
            raise TypeError(
                f"DetLogger: {sorted(unmanaged)} configure Determined's unmanaged (detached) "
                "mode, which Dauntless does not have: run the script as an experiment, "
                "where DetLogger reports to the trial"
            )
        if core_context is not None and not isinstance(core_context, core.Context):
            raise TypeError(
                f"core_context must be a dauntless.core.Context, got {type(core_context).__name__}"
            )
        self._core = core_context
        self._owned = False

    @property
    def name(self) -> str:
        return "dauntless"

    @property
    def version(self) -> int:
        return 0 if self._core is None else self._core.trial.trial_id

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Hyperparameters come from the experiment config; nothing is sent."""

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Report ``metrics`` as training metrics at ``step`` batches (rank 0)."""
        if int(os.environ.get("RANK", "0")) != 0:
            return
        if self._core is None:
            self._core = core.init()
            self._owned = True
        values = float_metrics(metrics)
        if values:
            self._core.train.report_training_metrics(int(step or 0), values)

    def finalize(self, status: str) -> None:
        """Close the context this logger opened."""
        if self._owned and self._core is not None:
            self._core.close()
            self._core, self._owned = None, False


def _mean(losses: list[torch.Tensor]) -> float:
    """The mean of one-element loss tensors (all on one device), as a float.

    On an accelerator the tensors are summed there and copied once (one device sync per
    report, where a ``float()`` per batch would wait for the device every batch); on the
    CPU, where reading a value costs no sync, each is read directly (cheaper than a
    ``stack`` for a few values).
    """
    if losses[0].device.type == "cpu":
        total = sum(t.item() for t in losses)
    else:
        total = torch.stack([t.reshape(()).float() for t in losses]).sum().item()
    return float(total) / len(losses)


def _fraction(trainer: pl.Trainer) -> float:
    """How far ``fit`` has come: by ``max_steps`` when set, else by ``max_epochs``."""
    if trainer.max_steps and trainer.max_steps > 0:
        return trainer.global_step / trainer.max_steps
    if trainer.max_epochs:
        return trainer.current_epoch / trainer.max_epochs
    return 0.0


__all__ = ["CHECKPOINT_FILE", "SKIPPED_HOOKS", "DetLogger", "DeterminedCallback"]
