"""The training loop of a PyTorchTrial: train, report, validate, checkpoint, resume.

Protocol: docs/protocol.md ("Trial harness", "Checkpoint layout"); loop semantics follow
Determined's PyTorchTrial controller as described in reference §3.8: after every batch
the boundaries are checked in the order report -> validate -> checkpoint, then the stop
flags (preemption signal, ``set_stop_requested``), so a pause takes effect after the
batch in progress (with several ranks, between boundaries, after the next one: below).
Saving and restoring state lives in :class:`_StateMixin`
(``_resume.py``).

With several processes (``context.distributed.size`` > 1, one per slot) every rank runs
this loop in lockstep, over its own shard of each batch: the chief (rank 0) asks the
searcher and broadcasts each operation; the stop decision is one collective per batch
(any rank's ``set_stop_requested``, or the preemption signal the chief watches).
Between boundaries that collective is asynchronous: the vote started after batch k is
read after batch k + 1, so it overlaps a training step, and a stop takes effect one
batch later, on every rank at the same batch; at a reporting, validation or checkpoint
boundary and at an operation's end it is decided at once (a stop there reuses that
boundary's checkpoint). Training and validation metrics are reduced across ranks; only
the chief reports to the master and writes checkpoints (which hold every rank's RNG
state and pending metrics).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import dauntless
from dauntless.core import Context, EarlyExitReason

from ._callback import PyTorchCallback, legacy_arities
from ._code import CodeSnapshot
from ._context import PyTorchTrialContext
from ._data import DataLoader, repeat_torch_loader
from ._device import mover
from ._distributed import AnyRankVote, any_rank
from ._evaluate import evaluate_batches, reduce_outputs, validation_loader
from ._reducer import (
    average_across_ranks,
    batch_row,
    mean_of_batches,
    reduce_custom,
    scalar_or_none,
    window_scalars,
)
from ._resume import _StateMixin
from ._settings import LoopSettings
from ._state import get_rng_state, set_rng_state
from ._trial import PyTorchTrial, overrides

logger = logging.getLogger("dauntless.pytorch")

#: Seconds between progress reports (besides the last one, at 100%).
PROGRESS_INTERVAL = 10.0


class RunResult(enum.Enum):
    """How a run of the training loop ended (each is a clean exit, code 0)."""

    COMPLETED = "completed"  # the searcher closed the trial, or max_length was reached
    PREEMPTED = "preempted"  # preemption signal or stop request: resume later
    INVALID_HP = "invalid_hp"  # the trial raised dauntless.InvalidHP


class _LocalOperation:
    """The one "train to max_length" operation of local training (no searcher)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.completed = False

    def report_completed(self, searcher_metric: float) -> None:
        self.completed = True


class _TrialController(_StateMixin):
    """Drives one PyTorchTrial through its searcher operations.

    For each operation (train until ``total_batches == length``) it trains batch by
    batch; after each batch it reports averaged training metrics every
    ``reporting_period`` batches, validates every ``validation_period``, checkpoints
    every ``checkpoint_period`` and per the checkpoint policy after a validation, then
    stops (checkpoint, return) if preemption was signalled or a stop requested. At the
    end of an operation it reports, validates (unless it just did) and completes the
    operation with the searcher metric.

    Args:
        trial: the user's trial, built with ``context``.
        context: the trial's context (wrapped models, optimizers, schedulers).
        core: where reports, checkpoints and searcher operations go (master or local).
        settings: the periods and policy; read from the experiment config when None.
        latest_checkpoint: the checkpoint to resume from; the cluster's
            (``core.trial.latest_checkpoint``) when omitted.
        local: local training: one operation of ``settings.max_length`` batches instead
            of the searcher's, and no searcher metric required.
        is_trainer: whether the Trainer API runs the loop (recorded in checkpoints).
        code_dir: the model definition copied into each checkpoint's ``code/``; the
            working directory when None.

    Raises:
        TypeError: for wrong argument types, or ``build_callbacks`` returning something
            other than a dict of PyTorchCallback.
        ValueError: if the trial wrapped no model or no optimizer, implements neither
            or both of ``evaluate_batch`` and ``evaluate_full_dataset``, local training
            has no ``max_length``.
    """

    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        core: Context,
        settings: LoopSettings | None = None,
        *,
        latest_checkpoint: Any = ...,
        local: bool = False,
        is_trainer: bool = False,
        code_dir: str | Path | None = None,
    ) -> None:
        if not isinstance(trial, PyTorchTrial):
            raise TypeError(f"trial must be a PyTorchTrial, got {type(trial).__name__}")
        if not isinstance(context, PyTorchTrialContext):
            raise TypeError(f"context must be a PyTorchTrialContext, got {type(context).__name__}")
        if not isinstance(core, Context):
            raise TypeError(f"core must be a dauntless.core.Context, got {type(core).__name__}")
        self._check_wrapped(context)
        # Local training writes TensorBoard files only when the user made a writer.
        self._tensorboard_unavailable = local
        self._full_dataset = overrides(trial, "evaluate_full_dataset")
        by_batch = overrides(trial, "evaluate_batch")
        if self._full_dataset == by_batch:
            raise ValueError(
                f"{type(trial).__name__} must implement exactly one of evaluate_batch and "
                "evaluate_full_dataset"
            )
        if settings is None:
            gbs = context.get_global_batch_size()
            settings = LoopSettings.from_config(context.experiment_config, gbs)
        if local and settings.max_length is None:
            raise ValueError(
                "local training needs a max_length: fit(max_length=Batch(n)) or Epoch(n)"
            )
        callbacks = trial.build_callbacks()
        if not isinstance(callbacks, dict) or not all(
            isinstance(k, str) and isinstance(v, PyTorchCallback) for k, v in callbacks.items()
        ):
            raise TypeError(
                "build_callbacks() must return a dict of name -> PyTorchCallback, got "
                f"{callbacks!r}"
            )
        self.trial = trial
        self.context = context
        self.core = core
        self.settings = settings
        self.latest_checkpoint = (
            core.trial.latest_checkpoint if latest_checkpoint is ... else latest_checkpoint
        )
        self.local = local
        self.is_trainer = is_trainer
        self.callbacks = callbacks
        self._callback_list = list(callbacks.values())
        # Overrides with Determined's older, shorter hook signatures (a FutureWarning each).
        self._legacy_arity = {
            (i, hook): n
            for i, cb in enumerate(self._callback_list)
            for hook, n in legacy_arities(cb).items()
        }
        self._code_dir = Path(code_dir) if code_dir is not None else Path.cwd()
        self._code: CodeSnapshot | None = None
        self.batches_trained = 0
        self.best_validation: float | None = None
        self.shuffle_seed = core.trial.trial_seed
        self._epoch_len = 1
        self._periods = settings.resolve(1)
        self._window: list[dict[str, Any]] = []
        self._last_validation: tuple[int, dict[str, Any]] | None = None
        self._last_checkpoint_batches: int | None = None
        self._train_iter: Iterator[Any] | None = None
        self._val_loader: Any = None
        self._stop_seen = False
        # The asynchronous stop vote between boundaries (several ranks only).
        self._stop_vote = AnyRankVote(context.distributed)
        self._warned_cap = False
        self._best_before: float | None = None
        self._move = mover(context.device)
        # No DDP model, no gradient synchronisation to manage: the per-batch path skips
        # the context (models are wrapped in the trial's __init__, before this).
        self._ddp = any(
            isinstance(m, torch.nn.parallel.DistributedDataParallel) for m in context.models
        )
        self._progress_sent_at = -math.inf
        self._started_up = False

    @staticmethod
    def _check_wrapped(context: PyTorchTrialContext) -> None:
        """Raise ValueError unless the trial wrapped what training needs."""
        if not context.models or not context.optimizers:
            raise ValueError(
                "the trial must wrap at least one model (context.wrap_model) and one "
                "optimizer (context.wrap_optimizer) in __init__"
            )

    # ------------------------------------------------------------------ run

    def run(self) -> RunResult:
        """Train the trial until the searcher closes it, ``max_length`` is reached, or
        preemption is signalled.

        Returns:
            How the run ended.

        Raises:
            ValueError: for a bad data loader, an empty training set, a missing searcher
                metric, or a checkpoint that does not fit the trial.
            TypeError: if ``train_batch`` or ``evaluate_batch`` returns the wrong type.
        """
        started = False
        try:
            started = self._start()
            if self.settings.test_mode:
                self._run_test_mode()
                return RunResult.COMPLETED
            for op in self._operations():
                if not self._run_operation(op):
                    break
            dist = self.context.distributed
            if dist.size > 1:
                # A capped operation ends without the stop check that settles the vote.
                if self._stop_vote.finish():
                    self._stopping()
                # The chief may have stopped while waiting for the searcher.
                self._stop_seen = bool(dist.broadcast(self._stop_seen))
            self._flush_and_checkpoint()
            # A pause or preemption must not exit before the last checkpoint is stored.
            self.core.checkpoint.wait_for_uploads()
            if self._stop_seen:
                logger.info("stopping at batch %d to be resumed later", self.batches_trained)
                return RunResult.PREEMPTED
            logger.info("training ended at batch %d", self.batches_trained)
            return RunResult.COMPLETED
        except dauntless.InvalidHP as exc:
            logger.info("invalid hyperparameters at batch %d: %s", self.batches_trained, exc)
            if started:
                self._flush_and_checkpoint()
                self.core.checkpoint.wait_for_uploads()
            if self.context.distributed.is_chief:
                self.core.train.report_early_exit(EarlyExitReason.INVALID_HP)
            return RunResult.INVALID_HP
        except BaseException:
            # A crash of the trial's code: checkpoints whose files are already written
            # are still published (flushed, renamed, reported) before it propagates.
            with contextlib.suppress(Exception):
                self.core.checkpoint.wait_for_uploads()
            raise
        finally:
            if self._started_up:
                self._call("on_trial_shutdown")
            writer = self.context._tensorboard_writer
            if writer is not None:
                writer.close()
            self.context._sync_tensorboard(wait=True)

    def _operations(self) -> Iterator[Any]:
        if self.local or self.core.searcher._own_length is not False:
            # Local training, or Determined 0.38: the trial's own max_length decides.
            if self._periods.max_length is None:
                raise ValueError(
                    "the training length is not set: pass Trainer.fit(max_length=Batch(n) "
                    "or Epoch(n)), or set searcher.max_length in the experiment config"
                )
            yield _LocalOperation(self._periods.max_length)
            return
        dist = self.context.distributed
        # With several ranks only the chief waits for the searcher (the others wait in
        # the broadcast of the next operation), so it must decide alone, without the
        # per-batch collective.
        should_stop = self._should_stop if dist.size == 1 else self._chief_should_stop
        yield from self.core.searcher.operations(should_stop=should_stop)

    def _start(self) -> bool:
        state = self._read_checkpoint(self.latest_checkpoint) if self.latest_checkpoint else None
        self._call("on_trial_startup", self.batches_trained, self.latest_checkpoint)
        self._started_up = True
        self._build_loaders()
        self._code = CodeSnapshot(self._code_dir, exclude=self._storage_dirs())
        # Build the training iterator before restoring RNG states: creating it draws
        # from torch's global generator, which must not shift the restored stream.
        self._train_iter = self._training_stream()
        if state is not None:
            self._apply_state(state)
        for model in self.context.models:
            model.train()
        self._reset_reducers(training=True)
        info = self.core.trial
        # The intra-op thread count is logged because it changes float results (the
        # order of reductions): an exact resume needs the same count as the first run.
        logger.info(
            "trial %d (experiment %d) %s at batch %d: %s on %s (%d CPU threads), %d "
            "batches per epoch",
            info.trial_id,
            info.experiment_id,
            "resuming" if state is not None else "starting",
            self.batches_trained,
            type(self.trial).__name__,
            self.context.device,
            torch.get_num_threads(),
            self._epoch_len,
        )
        # Threads and connections start here, not during the first batches.
        self.core.start_background()
        self._call("on_training_start")
        if self.settings.initial_validation and self.batches_trained == 0:
            self._after_validation(self._validate())
        return True

    def _build_loaders(self) -> None:
        train_loader = self.trial.build_training_data_loader()
        plain = isinstance(train_loader, torch.utils.data.DataLoader)
        if not isinstance(train_loader, DataLoader) and not (
            plain and not self.context._reproducibility_checks
        ):
            raise ValueError(
                "build_training_data_loader must return a dauntless.pytorch.DataLoader "
                f"(got {type(train_loader).__name__}): only it can resume at a batch. To "
                "use a torch DataLoader and make it reproducible yourself, call "
                "context.experimental.disable_dataset_reproducibility_checks() in __init__"
            )
        self._train_loader = train_loader
        self._val_loader = self.trial.build_validation_data_loader()
        if not isinstance(self._val_loader, (DataLoader, torch.utils.data.DataLoader)):
            raise ValueError(
                "build_validation_data_loader must return a dauntless.pytorch.DataLoader "
                f"or a torch DataLoader, got {type(self._val_loader).__name__}"
            )
        try:
            epoch_len = len(train_loader)
        except TypeError:  # an unsized torch loader: epochs never end
            epoch_len = sys.maxsize
        size = self.context.distributed.size
        if size > 1 and isinstance(train_loader, DataLoader):
            # Each step trains one per-slot batch on every rank: an epoch of the
            # unsharded loader lasts ceil(batches / ranks) steps.
            epoch_len = -(-epoch_len // size)
        if epoch_len < 1:
            raise ValueError("the training data loader is empty (0 batches per epoch)")
        self._epoch_len = epoch_len
        self.context._epoch_len = epoch_len
        self._periods = self.settings.resolve(epoch_len)

    def _training_stream(self) -> Iterator[Any]:
        loader = self._train_loader
        dist = self.context.distributed
        if isinstance(loader, DataLoader):
            return iter(
                loader.get_data_loader(
                    repeat=True,
                    skip=self.batches_trained,
                    num_replicas=dist.size,
                    rank=dist.rank,
                    seed=self.shuffle_seed,
                )
            )
        if self.batches_trained:
            logger.warning(
                "resuming at batch %d with a plain torch DataLoader: it restarts from its "
                "beginning (use dauntless.pytorch.DataLoader to resume exactly)",
                self.batches_trained,
            )
        return repeat_torch_loader(loader)

    def _run_operation(self, op: Any) -> bool:
        """Train to the operation's length, validate, complete; False to stop here."""
        target = op.length
        cap = self._periods.max_length
        capped = not self.local and cap is not None and target > cap
        if capped:
            target = cap
            if not self._warned_cap:
                logger.warning(
                    "the searcher asks for %d batches but max_length is %d: training "
                    "stops at %d without completing the searcher operation",
                    op.length,
                    cap,
                    cap,
                )
                self._warned_cap = True
        logger.info("training to batch %d", target)
        while self.batches_trained < target:
            self._train_one_batch()
            if not self._on_batch_end(target):
                return False
        if self._window:
            self._report_training(target)
        last = self._last_validation
        if last is None or last[0] != self.batches_trained:
            last = (self.batches_trained, self._validate())
            self._after_validation(last[1])
        if capped:
            return False
        value = self._searcher_value(last[1])
        if self.local or self.context.distributed.is_chief:
            op.report_completed(value)
        logger.info("completed the operation at batch %d", op.length)
        return not self._should_stop()

    def _run_test_mode(self) -> None:
        logger.info("test mode: one training batch, one validation batch, one checkpoint")
        self._train_one_batch()
        self._report_training(self.batches_trained)
        self._validate(limit=1)
        self._checkpoint_if_stale()

    # ------------------------------------------------------------------ training

    def _call(self, hook: str, *args: Any) -> None:
        legacy = self._legacy_arity
        for i, callback in enumerate(self._callback_list):
            n = legacy.get((i, hook)) if legacy else None
            getattr(callback, hook)(*(args if n is None else args[:n]))

    def _train_one_batch(self) -> None:
        ctx = self.context
        b = self.batches_trained
        epoch_len = self._epoch_len
        epoch_idx = b // epoch_len
        callbacks = self._callback_list
        if callbacks and b % epoch_len == 0:
            self._call("on_training_epoch_start", epoch_idx)
        if self._train_iter is None:
            raise RuntimeError("internal error: training started before the data was built")
        profiler = self.core.profiler
        timed = profiler.times_batch(b)
        if timed:
            started = time.perf_counter()
        batch = next(self._train_iter)
        if timed:
            fetched = time.perf_counter()
            profiler.timings.add("dataloader_next", fetched - started)
        if ctx._auto_to_device:
            batch = self._move(batch)
        ctx._current_batch = b
        if self._ddp:
            with ctx._gradient_sync(b):
                out = self.trial.train_batch(batch, epoch_idx, b)
        else:
            out = self.trial.train_batch(batch, epoch_idx, b)
        if timed:
            if profiler.sync_timings and ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)  # the step's kernels, not their launch
            profiler.timings.add("train_batch", time.perf_counter() - fetched)
        if isinstance(out, torch.Tensor):
            out = {"loss": out}
        elif not isinstance(out, dict):
            raise TypeError(
                "train_batch must return a dict of metrics or a loss tensor, got "
                f"{type(out).__name__}"
            )
        self._window.append(batch_row(out))
        if ctx._scaler_stepped:
            ctx._scaler.update()
            ctx._scaler_stepped = False
        for scheduler in ctx.lr_schedulers:
            scheduler.after_batch(b, epoch_len)
        self.batches_trained = b + 1
        ctx._current_batch = b + 1
        if callbacks and (b + 1) % epoch_len == 0:
            self._call("on_training_epoch_end", epoch_idx)

    def _on_batch_end(self, target: int) -> bool:
        b = self.batches_trained
        p = self._periods
        at_end = b >= target
        at_validation = at_end or bool(p.validation_period and b % p.validation_period == 0)
        at_checkpoint = bool(p.checkpoint_period and b % p.checkpoint_period == 0)
        # As Determined's PyTorchTrial: the batches since the last boundary are reported
        # (and on_training_workload_end fires) at every boundary: the reporting period,
        # a validation, a checkpoint, the operation's end.
        at_boundary = at_validation or at_checkpoint or b % p.reporting_period == 0
        if at_boundary:
            self._report_training(target)
        if at_validation:
            last = self._last_validation
            if last is None or last[0] != b:
                self._after_validation(self._validate())
        if at_checkpoint:
            self._checkpoint_if_stale()
        # At the operation's end the stop check waits until the operation is completed.
        if at_end:
            return True
        if at_boundary or self.context.distributed.size == 1:
            return not self._should_stop()
        return not self._should_stop_next_batch()

    def _report_training(self, target: int) -> None:
        reducers = [w for w in self.context._reducers if w.for_training]
        if not self._window and not reducers:
            return
        per_batch = window_scalars(self._window)
        dist = self.context.distributed
        if dist.size > 1:
            per_batch = average_across_ranks(dist.allgather(per_batch))
        metrics: dict[str, Any] = mean_of_batches(per_batch)
        metrics.update(reduce_custom(reducers, self.context.distributed))
        self._reset_reducers(training=True)
        metrics.setdefault("batches", self.batches_trained)
        metrics.setdefault("epochs", self._epochs())
        self._window = []
        if self.context.distributed.is_chief:
            self.core.train._report_float_training_metrics(self.batches_trained, metrics, per_batch)
            total = self._periods.max_length or target
            self._report_progress(min(1.0, self.batches_trained / total))
        self._call("on_training_workload_end", metrics, per_batch)
        self._tensorboard("training", metrics)

    def _report_progress(self, progress: float) -> None:
        """Report progress at most every PROGRESS_INTERVAL seconds (and when done): the
        master only shows it, and each report is a request."""
        now = time.monotonic()
        if progress < 1.0 and now - self._progress_sent_at < PROGRESS_INTERVAL:
            return
        self._progress_sent_at = now
        self.core.train.report_progress(progress)

    def _reset_reducers(self, *, training: bool) -> None:
        for w in self.context._reducers:
            if w.for_training if training else w.for_validation:
                w.reducer.reset()

    def _epochs(self) -> int:
        """Epochs completed so far (a whole number, as Determined's ``epochs`` metric:
        its trial state's ``epochs_trained``)."""
        return self.batches_trained // self._epoch_len

    def _should_stop(self) -> bool:
        """Whether to checkpoint and stop now; a collective with several ranks (every
        rank gets True if any rank requested a stop or the chief saw the signal, in
        the vote still in flight or now)."""
        dist = self.context.distributed
        if dist.size == 1:
            stop = self.context._stop_requested or self.core.preempt.should_preempt()
        else:
            # Every rank gets the same answer from the vote, so all skip the second
            # collective or none does.
            stop = self._stop_vote.finish() or any_rank(self._my_stop_flag(), dist)
        if stop:
            self._stopping()
        return stop

    def _should_stop_next_batch(self) -> bool:
        """The per-batch stop check between boundaries (several ranks): read the vote
        started after the previous batch, then start this batch's. True, on every rank
        alike, means stop now: a stop asked for during batch k stops after batch k + 1
        at the latest (at once if k ends at a boundary).

        Determined checks preemption and stop requests at boundaries only
        (``scheduling_unit``, 100 batches by default); the one-batch delay keeps a check
        after every batch without a wait for the other ranks in each step."""
        vote = self._stop_vote
        if vote.finish():
            self._stopping()
            return True
        vote.start(self._my_stop_flag())
        return False

    def _my_stop_flag(self) -> bool:
        """This rank's own stop reasons, no collective: its ``set_stop_requested``, or
        on the chief the preemption signal."""
        return self.context._stop_requested or (
            self.context.distributed.is_chief and self.core.preempt.signal_seen_here()
        )

    def _stopping(self) -> None:
        """Record a stop the ranks agreed on (the preemption signal is acknowledged)."""
        if self.context.distributed.size > 1:
            self.core.preempt.acknowledge_preemption_signal()
        self._stop_seen = True

    def _chief_should_stop(self) -> bool:
        """The chief's own stop decision, without a collective (searcher waits)."""
        stop = self.context._stop_requested or self.core.preempt.signal_seen_here()
        if stop:
            self._stop_seen = True
        return stop

    def _tensorboard(self, group: str, metrics: dict[str, Any]) -> None:
        """Write reported metrics as TensorBoard scalars (``training/<name>``,
        ``validation/<name>``), as Determined's harness does by default; the chief
        writes, under ``get_tensorboard_path()``. Without the ``tensorboard`` package
        it says so once and writes nothing."""
        if not self.context._tensorboard_logging or not self.context.distributed.is_chief:
            return
        writer = self.context._tensorboard_writer
        if writer is None:
            if self._tensorboard_unavailable:
                return  # no tensorboard package, or local training
            try:
                writer = self.context.get_tensorboard_writer()
            except ImportError as exc:
                logger.info("metrics are not written for TensorBoard: %s", exc)
                self._tensorboard_unavailable = True
                return
        for name, value in metrics.items():
            if isinstance(value, float) and math.isfinite(value):
                writer.add_scalar(f"{group}/{name}", value, self.batches_trained)
        writer.flush()

    # ------------------------------------------------------------------ validation

    def _validate(self, limit: int | None = None) -> dict[str, Any]:
        # Validation must not move the training's random streams (creating a loader
        # iterator draws from torch's generator): the training then does not depend on
        # when, or how often, it was validated.
        rng = get_rng_state()
        try:
            return self._validate_inner(limit)
        finally:
            set_rng_state(rng)

    def _validate_inner(self, limit: int | None) -> dict[str, Any]:
        ctx = self.context
        self._call("on_validation_start")
        self._reset_reducers(training=False)
        for model in ctx.models:
            model.eval()
        try:
            with torch.no_grad():
                self._call("on_validation_epoch_start")
                if self._full_dataset:
                    # As in Determined: the chief evaluates the whole validation set and
                    # the other ranks receive its metrics.
                    full: Any = None
                    if ctx.distributed.is_chief:
                        # A torch DataLoader, or the user's own loader as they built it.
                        whole: Any = validation_loader(
                            self._val_loader, ctx.distributed, sharded=False
                        )
                        full = self.trial.evaluate_full_dataset(whole)
                    if ctx.distributed.size > 1:
                        full = ctx.distributed.broadcast(full)
                    metrics = full
                    if not isinstance(metrics, dict):
                        raise TypeError(
                            "evaluate_full_dataset must return a dict of metrics, got "
                            f"{type(metrics).__name__}"
                        )
                    self._call("on_validation_epoch_end", [metrics])
                    metrics = dict(metrics)
                else:
                    loader = validation_loader(self._val_loader, ctx.distributed, sharded=True)
                    device = ctx.device if ctx._auto_to_device else None
                    outputs, weights = evaluate_batches(self.trial, loader, device, limit=limit)
                    self._call("on_validation_epoch_end", outputs)
                    metrics = reduce_outputs(
                        outputs, weights, self.trial.evaluation_reducer(), ctx.distributed
                    )
                reducers = [w for w in ctx._reducers if w.for_validation]
                metrics.update(reduce_custom(reducers, ctx.distributed))
        finally:
            for model in ctx.models:
                model.train()
        return self._finish_validation(metrics)

    def _finish_validation(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Check, report and log a validation's reduced ``metrics``; returns them."""
        ctx = self.context
        if not metrics:
            raise TypeError("validation must return a non-empty dict of metrics")
        metrics.setdefault("batches", self.batches_trained)
        metrics.setdefault("epochs", self._epochs())
        name = self.settings.searcher_metric
        if name is not None and not self.local:
            if scalar_or_none(metrics.get(name)) is None:
                raise ValueError(
                    f"searcher.metric {name!r} is not among the validation metrics, or not a "
                    f"number; the validation reported {sorted(metrics)}"
                )
            metrics[name] = scalar_or_none(metrics[name])
        self._best_before = self._experiment_best()
        if ctx.distributed.is_chief:
            self.core.train.report_validation_metrics(self.batches_trained, metrics)
        self._last_validation = (self.batches_trained, metrics)
        self._call("on_validation_end", metrics)
        self._tensorboard("validation", metrics)
        shown = ", ".join(
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
        )
        logger.info("validation at batch %d: %s", self.batches_trained, shown)
        return metrics

    def _searcher_value(self, metrics: dict[str, Any]) -> float:
        name = self.settings.searcher_metric
        value = scalar_or_none(metrics.get(name)) if name is not None else None
        if value is None:
            if self.local:
                return math.nan
            raise ValueError(f"searcher.metric {name!r} is missing from {sorted(metrics)}")
        return value

    def _experiment_best(self) -> float | None:
        if self.settings.checkpoint_policy != "best" or self.local:
            return self.best_validation
        dist = self.context.distributed
        best = None
        if dist.is_chief:
            try:
                best = self.core.train.get_experiment_best_validation()
            except Exception as exc:  # the policy falls back to the trial's own best
                logger.warning("could not read the experiment's best validation: %s", exc)
        if dist.size > 1:
            # Every rank must take the same checkpoint decision (it is a collective).
            best = dist.broadcast(best)
        return best if best is not None else self.best_validation

    def _after_validation(self, metrics: dict[str, Any]) -> None:
        name = self.settings.searcher_metric
        value = scalar_or_none(metrics.get(name)) if name is not None else None
        policy = self.settings.checkpoint_policy
        if self.local and policy == "best":
            policy = "all"
        improved = False
        if value is not None and not math.isnan(value):
            smaller = self.settings.smaller_is_better
            own = self.best_validation
            if own is None or (value < own if smaller else value > own):
                self.best_validation = value
            best = self._best_before
            improved = best is None or (value < best if smaller else value > best)
        if policy == "all" or (policy == "best" and improved):
            self._checkpoint_if_stale()
