"""The training loop of a DeepSpeedTrial.

It is the PyTorchTrial loop (:class:`dauntless.pytorch._controller._TrialController`:
searcher operations, reporting, validation, checkpoint policy, preemption, exact
resume) with DeepSpeed's differences, as Determined's DeepSpeed trial controller has
them (reference "DeepSpeed (det.pytorch.deepspeed)"):

- the trial gets an iterator over its data, not a batch, and ``train_batch`` runs once
  per micro batch: ``gradient_accumulation_steps`` times per batch unless the context's
  ``disable_auto_grad_accumulation()`` (the engine steps at the last); a batch's
  metrics are the mean over its micro batches;
- an epoch is ``len(loader) / ranks / micro batches per batch`` batches; resuming at
  batch ``b`` skips ``b x micro batches per batch`` micro batches of the (sharded)
  stream;
- checkpoints are sharded: every rank calls each engine's ``save_checkpoint`` into the
  one checkpoint directory (tag ``model<i>``; ZeRO stages 1-3 write their partitions),
  the chief adds ``state-dict.pth`` with the loop's state (counters, RNG states,
  pending metrics, callbacks). Restoring calls ``load_checkpoint`` with the same tags
  and loads the modules' weights and the optimizers' and LR schedulers' state, also
  from another trial's checkpoint (a warm start, as a PyTorchTrial's loads its
  optimizers) and also onto another number of slots: ZeRO partitions written by
  another number of ranks go through DeepSpeed's universal checkpoint
  (:mod:`._universal`; Adam-like optimizers only). Another trial's checkpoint loads
  only the modules' weights (``load_module_only``) where its ZeRO family (none, stages
  1-2, stage 3) differs or the conversion fails (a warning names why).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from dauntless.pytorch._controller import _TrialController
from dauntless.pytorch._data import DataLoader
from dauntless.pytorch._evaluate import reduce_outputs, validation_loader
from dauntless.pytorch._reducer import batch_row, mean_of_batches, reduce_custom, window_scalars

from ._context import DeepSpeedTrialContext
from ._trial import DeepSpeedTrial
from ._universal import (
    ConversionError,
    engine_layout,
    loading_universal,
    needs_conversion,
    saved_layout,
    universal_copies,
)

logger = logging.getLogger("dauntless.pytorch.deepspeed")

CHECKPOINT_TAG = "model{}"
"""The DeepSpeed checkpoint tag of engine ``i`` inside a platform checkpoint."""


class _CountingIterator:
    """An iterator that records how many records each item it hands out holds."""

    def __init__(self, source: Iterator[Any], trial: DeepSpeedTrial) -> None:
        self._source = source
        self._trial = trial
        self.lengths: list[int] = []

    def __iter__(self) -> _CountingIterator:
        return self

    def __next__(self) -> Any:
        item = next(self._source)
        self.lengths.append(self._trial.get_batch_length(item))
        return item


class _DeepSpeedController(_TrialController):
    """Drives one DeepSpeedTrial (see the module's docstring); arguments as
    :class:`~dauntless.pytorch._controller._TrialController`'s.

    Raises:
        TypeError: if ``trial`` is not a DeepSpeedTrial or ``context`` not a
            DeepSpeedTrialContext.
        ValueError: if the trial wrapped no model engine.
    """

    _shard_format = "deepspeed"
    _trial_type = "DeepSpeedTrial"

    def __init__(self, trial: Any, context: Any, core: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(trial, DeepSpeedTrial):
            raise TypeError(f"trial must be a DeepSpeedTrial, got {type(trial).__name__}")
        if not isinstance(context, DeepSpeedTrialContext):
            raise TypeError(
                f"context must be a DeepSpeedTrialContext, got {type(context).__name__}"
            )
        super().__init__(trial, context, core, *args, **kwargs)
        self._ddp = False  # the engines reduce gradients themselves
        self.context: DeepSpeedTrialContext = context
        self.trial: DeepSpeedTrial = trial

    @staticmethod
    def _check_wrapped(context: Any) -> None:
        if not context.models:
            raise ValueError(
                "the DeepSpeedTrial must wrap at least one engine in __init__: "
                "context.wrap_model_engine(deepspeed.initialize(...)[0])"
            )

    def _micro_batches(self) -> int:
        """Micro batches of the training stream one batch consumes."""
        return self.context.get_num_micro_batches_per_slot()

    # ------------------------------------------------------------------ data

    def _build_loaders(self) -> None:
        ctx = self.context
        train_loader = self.trial.build_training_data_loader()
        val_loader = self.trial.build_validation_data_loader()
        for what, loader in (("training", train_loader), ("validation", val_loader)):
            if loader is None or isinstance(loader, DataLoader):
                continue
            if isinstance(loader, torch.utils.data.DataLoader) and not ctx._reproducibility_checks:
                continue
            raise ValueError(
                f"build_{what}_data_loader must return a dauntless.pytorch.DataLoader or "
                f"None (got {type(loader).__name__}); for another loader call "
                "context.disable_dataset_reproducibility_checks() in __init__"
            )
        if train_loader is None and ctx._reproducibility_checks:
            raise ValueError(
                "build_training_data_loader returned None (the trial reads its own data): "
                "call context.disable_dataset_reproducibility_checks() in __init__, since "
                "the platform cannot resume such data at a batch"
            )
        train_any: Any = train_loader  # None too: the trial reads its own data
        self._train_loader = train_any
        self._val_loader = val_loader
        if train_loader is None:
            epoch_len = sys.maxsize
        else:
            try:
                micro = len(train_loader)
            except TypeError:
                micro = sys.maxsize
            size = ctx.distributed.size
            if size > 1 and isinstance(train_loader, DataLoader) and micro != sys.maxsize:
                micro = -(-micro // size)
            epoch_len = micro if micro == sys.maxsize else micro // self._micro_batches()
            if epoch_len < 1:
                raise ValueError(
                    f"the training data loader has {micro} micro batches per rank, fewer than "
                    f"the {self._micro_batches()} of one batch (gradient_accumulation_steps)"
                )
        self._epoch_len = epoch_len
        ctx._epoch_len = epoch_len
        self._periods = self.settings.resolve(epoch_len)

    def _training_stream(self) -> Iterator[Any]:
        loader = self._train_loader
        if loader is None:
            return iter(())
        if isinstance(loader, DataLoader):
            dist = self.context.distributed
            return iter(
                loader.get_data_loader(
                    repeat=True,
                    skip=self.batches_trained * self._micro_batches(),
                    num_replicas=dist.size,
                    rank=dist.rank,
                    seed=self.shuffle_seed,
                )
            )
        return super()._training_stream()

    # ------------------------------------------------------------------ training

    def _train_one_batch(self) -> None:
        ctx = self.context
        b = self.batches_trained
        epoch_len = self._epoch_len
        epoch_idx = b // epoch_len
        if self._callback_list and b % epoch_len == 0:
            self._call("on_training_epoch_start", epoch_idx)
        ctx._current_batch = b
        data = None if self._train_loader is None else self._train_iter
        calls = self._micro_batches() if ctx._auto_grad_accumulation else 1
        rows: list[dict[str, Any]] = []
        for _ in range(calls):
            out = self.trial.train_batch(data, epoch_idx, b)
            if isinstance(out, torch.Tensor):
                out = {"loss": out}
            elif not isinstance(out, dict):
                raise TypeError(
                    "train_batch must return a dict of metrics or a loss tensor, got "
                    f"{type(out).__name__}"
                )
            rows.append(batch_row(out))
        if not ctx.mpu.should_report_training_metrics:
            rows = [{}]
        self._window.append(rows[0] if calls == 1 else mean_of_batches(window_scalars(rows)))
        self.batches_trained = b + 1
        ctx._current_batch = b + 1
        if self._callback_list and (b + 1) % epoch_len == 0:
            self._call("on_training_epoch_end", epoch_idx)

    # ------------------------------------------------------------------ validation

    def _validate_inner(self, limit: int | None) -> dict[str, Any]:
        if self._full_dataset:
            return super()._validate_inner(limit)
        ctx = self.context
        if self._val_loader is None:
            raise ValueError(
                "build_validation_data_loader returned None: evaluate_batch needs a "
                "DataLoader to know the validation's length; implement "
                "evaluate_full_dataset to read the validation data yourself"
            )
        self._call("on_validation_start")
        self._reset_reducers(training=False)
        for model in ctx.models:
            model.eval()
        try:
            with torch.no_grad():
                self._call("on_validation_epoch_start")
                loader: Any = validation_loader(self._val_loader, ctx.distributed, sharded=True)
                steps = len(loader)
                if ctx.use_pipeline_parallel:
                    steps //= self._micro_batches()
                if limit is not None:
                    steps = min(steps, limit)
                data = _CountingIterator(iter(loader), self.trial)
                outputs: list[dict[str, Any]] = []
                weights: list[int] = []
                for idx in range(steps):
                    drawn = len(data.lengths)
                    out = self.trial.evaluate_batch(data, idx)
                    if not isinstance(out, dict):
                        raise TypeError(
                            f"evaluate_batch must return a dict, got {type(out).__name__}"
                        )
                    if outputs and out.keys() != outputs[0].keys():
                        raise ValueError(
                            "evaluate_batch must return the same metric names for every "
                            f"call: {sorted(outputs[0])} then {sorted(out)}"
                        )
                    outputs.append(out)
                    weights.append(sum(data.lengths[drawn:]) or 1)
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

    # ------------------------------------------------------------------ checkpoints

    def _sharded(self) -> bool:
        return True

    def _save_shards(self, path: Path) -> dict[str, int]:
        engines: list[Any] = list(self.context.models)
        for i, engine in enumerate(engines):
            engine.save_checkpoint(str(path), tag=CHECKPOINT_TAG.format(i), save_latest=False)
        return {"models": len(self.context.models), "optimizers": 0}

    def _load_shards(self, path: Path, *, same: bool, with_optimizers: bool) -> None:
        """Load each engine's DeepSpeed checkpoint (tag ``model<i>``) from ``path``: its
        weights, optimizer, LR scheduler and step counters, through a universal checkpoint
        where the ZeRO partitions were written by another number of ranks (see
        :mod:`._universal`). Another trial's checkpoint loads the modules' weights only
        where its ZeRO family (none, stages 1-2, stage 3) differs or the conversion fails
        (logged). A collective.

        Raises:
            ValueError: if the checkpoint lacks an engine's tag.
            ConversionError: if this trial's own checkpoint needed a conversion that
                failed (the message names why).
        """
        engines: list[Any] = list(self.context.models)
        plans: list[tuple[str, bool, bool]] = []  # (tag, module only, through universal)
        reasons: list[str] = []
        for i, engine in enumerate(engines):
            tag = CHECKPOINT_TAG.format(i)
            if not (path / tag).is_dir():
                raise ValueError(
                    f"the checkpoint at {path} holds no DeepSpeed checkpoint tagged {tag!r} "
                    f"for engine {i}: it was not written by a DeepSpeedTrial with as many "
                    "engines"
                )
            saved, mine = saved_layout(path / tag), engine_layout(engine)
            module_only = not same and saved.family != mine.family
            if module_only:
                logger.info(
                    "engine %d: the checkpoint was saved %s and this engine runs %s: "
                    "loading the module's weights only",
                    i,
                    saved.describe(),
                    mine.describe(),
                )
            convert = not module_only and needs_conversion(saved, mine)
            if convert:
                reasons.append(
                    f"{tag} was saved {saved.describe()}, this trial runs {mine.describe()}"
                )
            plans.append((tag, module_only, convert))
        tags = [tag for tag, _, convert in plans if convert]
        if not tags:
            self._load_engines(path, path, plans)
            return
        try:
            with universal_copies(
                path, tags, self.context.distributed, reason="; ".join(reasons)
            ) as root:
                self._load_engines(path, root, plans)
        except ConversionError as exc:
            if same:
                raise
            # A warm start still gets the weights, as before conversions existed.
            logger.warning("%s: loading the modules' weights only", exc)
            weights_only = [(tag, only or convert, False) for tag, only, convert in plans]
            self._load_engines(path, path, weights_only)

    def _load_engines(
        self, path: Path, universal_root: Path, plans: list[tuple[str, bool, bool]]
    ) -> None:
        """Load each engine as planned: ``(tag, module only, from the universal copy in
        universal_root)``."""
        engines: list[Any] = list(self.context.models)
        for i, (engine, (tag, module_only, convert)) in enumerate(zip(engines, plans, strict=True)):
            source = universal_root if convert else path
            with loading_universal(engine, convert):
                loaded, _client_state = engine.load_checkpoint(
                    str(source), tag=tag, load_module_only=module_only
                )
            if loaded is None:
                raise ValueError(
                    f"the checkpoint at {path} holds no loadable DeepSpeed checkpoint "
                    f"tagged {tag!r} for engine {i}"
                )


__all__ = ["CHECKPOINT_TAG", "_DeepSpeedController"]
