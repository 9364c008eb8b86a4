"""The Trainer API: ``dauntless.pytorch.init()`` and ``Trainer(trial, context).fit()``.

Behaviour follows Determined's Trainer (reference §3.9): on a cluster the context comes
from the task's ``DET_*`` environment and reports to the master; off the cluster it
trains locally (no master, checkpoints to a local directory, ``max_length`` required,
``test_mode`` allowed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dauntless
from dauntless.config import const_values, parse_experiment_config
from dauntless.core import (
    TASK_TYPE_TRIAL,
    ClusterInfo,
    Context,
    DistributedContext,
    EarlyExitReason,
    LocalBackend,
    PreemptMode,
    TrialInfo,
    storage_from,
)

from ._context import PyTorchTrialContext
from ._controller import RunResult, _TrialController
from ._distributed import destroy_process_group, init_process_group_from_env
from ._settings import NEVER, Batch, Epoch, LoopSettings, Period, TrainUnit
from ._state import seed_all
from ._trial import PyTorchTrial

logger = logging.getLogger("dauntless.pytorch")

_LOCAL_SEARCHER = {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}}


def _local_config(hparams: Mapping[str, Any] | None, exp_conf: Mapping[str, Any] | None) -> dict:
    """A valid experiment config for local training from what the user gave."""
    if exp_conf is not None and not isinstance(exp_conf, Mapping):
        raise TypeError(
            f"exp_conf must be a dict (an experiment config), got {type(exp_conf).__name__}"
        )
    if hparams is not None and not isinstance(hparams, Mapping):
        raise TypeError(f"hparams must be a dict, got {type(hparams).__name__}")
    raw = dict(exp_conf or {})
    raw.setdefault("searcher", dict(_LOCAL_SEARCHER))
    if hparams is not None:
        raw["hyperparameters"] = dict(hparams)
    return parse_experiment_config(raw).to_json()


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """Open a :class:`PyTorchTrialContext` for the Trainer API.

    Use as::

        with dauntless.pytorch.init() as context:
            trial = MyTrial(context)
            Trainer(trial, context).fit(max_length=Epoch(2),
                latest_checkpoint=dauntless.get_cluster_info().latest_checkpoint)

    On a cluster (a trial task's ``DET_*`` environment) the hyperparameters, config and
    trial seed come from the master, and reports go to it. Off the cluster it trains
    locally: ``hparams`` (or the constant hyperparameters of ``exp_conf``) are the
    hyperparameters, ``exp_conf`` (optional) the experiment config (its
    ``checkpoint_storage`` is where checkpoints go, a local directory by default), and
    ``reproducibility.experiment_seed`` the seed (a random one when absent).
    ``random``, ``numpy`` and ``torch`` are seeded before the block runs. A
    :class:`dauntless.InvalidHP` raised in the block is reported as an early exit and the
    process exits with status 0.

    Args:
        hparams: local training's hyperparameters (ignored on a cluster, with a warning).
        exp_conf: local training's experiment config (ignored on a cluster).
        distributed: the process layout. When None: on a cluster trial with
            ``resources.slots_per_trial`` > 1 the process group is started from the
            launcher's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (NCCL on
            CUDA, gloo otherwise) and ended when the block exits; otherwise one process.
            Off the cluster, pass ``DistributedContext.from_torch_distributed()`` after
            ``torch.distributed.init_process_group()`` (e.g. under ``torchrun``).
        aggregation_frequency: batches whose gradients are summed before each optimizer
            step (>= 1).
        enable_tensorboard_logging: write reported metrics to TensorBoard when a writer
            was made with ``context.get_tensorboard_writer()``.

    Yields:
        The trial context.

    Raises:
        ValueError: on a cluster trial with more than one slot per trial that was not
            started as one of that many ranks, for an invalid config, or a bad
            ``aggregation_frequency``.
        TypeError: if ``hparams`` or ``exp_conf`` is not a dict.
    """
    with _open_context(
        lambda trial_info, core: PyTorchTrialContext(
            trial_info,
            core=core,
            aggregation_frequency=aggregation_frequency,
            enable_tensorboard_logging=enable_tensorboard_logging,
        ),
        hparams=hparams,
        exp_conf=exp_conf,
        distributed=distributed,
    ) as context:
        yield context


@contextlib.contextmanager
def _open_context(
    make_context: Callable[[TrialInfo, Context], PyTorchTrialContext],
    *,
    hparams: Mapping[str, Any] | None,
    exp_conf: Mapping[str, Any] | None,
    distributed: DistributedContext | None,
    after_process_group: Callable[[], None] | None = None,
) -> Iterator[Any]:
    """What :func:`init` does, with the trial context made by ``make_context(trial_info,
    core)`` (a PyTorchTrialContext or a subclass); ``after_process_group`` runs once the
    process layout is known, before the Core API context opens (DeepSpeed's
    communication setup). Arguments and errors as :func:`init`'s."""
    info = ClusterInfo.from_env()
    cluster_trial = info.trial if info is not None and info.task_type == TASK_TYPE_TRIAL else None
    on_cluster = info is not None and cluster_trial is not None
    started = False  # whether this call started a torch.distributed process group
    if info is not None and cluster_trial is not None:
        if hparams is not None or exp_conf is not None:
            logger.warning(
                "on a cluster the trial's hparams and config come from the master; "
                "the hparams/exp_conf arguments are ignored"
            )
        trial_info = cluster_trial
        slots = parse_experiment_config(trial_info.config).resources.slots_per_trial
        if distributed is None:
            distributed, started = init_process_group_from_env(slots)
        if after_process_group is not None:
            after_process_group()
        seed_all(trial_info.trial_seed)
        core = Context.from_cluster_info(
            info, distributed=distributed, preempt_mode=PreemptMode.WorkersAskChief
        )
    else:
        config = _local_config(hparams, exp_conf)
        parsed = parse_experiment_config(config)
        values = (
            dict(hparams) if hparams is not None else (const_values(parsed.hyperparameters) or {})
        )
        seed = parsed.reproducibility.experiment_seed
        if seed is None:
            seed = secrets.randbelow(2**31)
            logger.info(
                "local training with seed %d (set reproducibility.experiment_seed "
                "in exp_conf to choose one)",
                seed,
            )
        trial_info = TrialInfo(
            trial_id=0, experiment_id=0, trial_seed=seed, hparams=values, config=config
        )
        if after_process_group is not None:
            after_process_group()
        seed_all(seed)
        storage_config = config.get("checkpoint_storage")
        storage = storage_from(storage_config)
        core = Context(
            trial_info,
            backend=LocalBackend(
                [1],
                searcher_metric=parsed.searcher.metric,
                smaller_is_better=parsed.searcher.smaller_is_better,
                log_reports=True,
            ),
            storage=storage,
            distributed=distributed,
        )
    context: PyTorchTrialContext | None = None
    try:
        context = make_context(trial_info, core)
        context._local_training = not on_cluster
        yield context
    except dauntless.InvalidHP as exc:
        logger.info("the trial raised InvalidHP (%s): ending it early", exc)
        if core.distributed.is_chief:
            core.train.report_early_exit(EarlyExitReason.INVALID_HP)
        core.close()
        raise SystemExit(0) from exc
    finally:
        core.close()
        if started and distributed is not None:
            destroy_process_group(
                distributed, started, context.models if context is not None else ()
            )


def _check_unit(name: str, value: Any, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, TrainUnit):
        raise TypeError(f"{name} must be dauntless.pytorch.Batch(n) or Epoch(n), got {value!r}")


class Trainer:
    """Train a :class:`PyTorchTrial` from a script (the Trainer API).

    Args:
        trial: the trial, built with ``context``.
        context: from :func:`init`.

    Raises:
        TypeError: if ``trial`` or ``context`` has the wrong type, or ``context`` was not
            made by :func:`init`.
    """

    _trial_class: type = PyTorchTrial
    _context_class: type = PyTorchTrialContext
    _controller_class: type[_TrialController] = _TrialController
    _init_name = "dauntless.pytorch.init()"

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        if not isinstance(trial, self._trial_class):
            raise TypeError(
                f"trial must be a {self._trial_class.__name__}, got {type(trial).__name__}"
            )
        if not isinstance(context, self._context_class) or context._core is None:
            raise TypeError(
                f"context must be the {self._context_class.__name__} of {self._init_name}"
            )
        self.trial = trial
        self.context = context

    def fit(
        self,
        checkpoint_period: TrainUnit | None = None,
        validation_period: TrainUnit | None = None,
        max_length: TrainUnit | None = None,
        reporting_period: TrainUnit | None = None,
        checkpoint_policy: str = "best",
        latest_checkpoint: str | None = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        profiling_enabled: bool = False,
    ) -> RunResult:
        """Train until ``max_length`` (or the searcher closes the trial, or preemption).

        Args:
            checkpoint_period: checkpoint every so many batches or epochs (default never,
                besides the checkpoints at the end, on preemption and per policy).
            validation_period: validate every so many batches or epochs (default only at
                the end).
            max_length: how long to train: ``Batch(n)`` or ``Epoch(n)``. Required off the
                cluster; on a cluster the experiment's ``searcher.max_length`` when None
                (training also stops where the searcher's operations end).
            reporting_period: report averaged training metrics every so many batches
                (default ``Batch(100)``).
            checkpoint_policy: ``best``, ``all`` or ``none`` (checkpoints after
                validations); ``best`` acts as ``all`` in local training.
            latest_checkpoint: the checkpoint to resume from, e.g.
                ``dauntless.get_cluster_info().latest_checkpoint``; None starts fresh.
            step_zero_validation: validate before the first batch.
            test_mode: train one batch, validate one batch, checkpoint, return (local
                training only).
            profiling_enabled: sample system metrics (CPU, memory, disk, network, GPUs)
                and time the data loader and the training step while ``fit`` runs,
                reported as the ``profiling`` metric groups (``core.profiler``; on a
                cluster only: off it, a warning and no profiling, as in Determined).

        Returns:
            How training ended (a :class:`RunResult`; the process should then exit 0).

        Raises:
            TypeError: if a period or ``max_length`` is not a Batch/Epoch.
            ValueError: if ``max_length`` is missing off the cluster (or on it without a
                ``searcher.max_length``), ``test_mode`` is asked where unsupported, or
                ``checkpoint_policy`` is unknown.
        """
        for name, value in (
            ("checkpoint_period", checkpoint_period),
            ("validation_period", validation_period),
            ("max_length", max_length),
            ("reporting_period", reporting_period),
        ):
            _check_unit(name, value)
        ctx = self.context
        core = ctx._core
        if core is None:
            raise TypeError("the context must come from dauntless.pytorch.init()")
        local = ctx._local_training
        config = ctx.experiment_config
        if max_length is None and not local:
            cfg_len = getattr(config.searcher, "max_length", None)
            if cfg_len is not None:
                gbs = ctx.get_global_batch_size() if cfg_len.unit.value != "batches" else None
                max_length = Batch(cfg_len.to_batches(gbs, config.records_per_epoch))
        if max_length is None:
            raise ValueError(
                "fit() needs max_length=dauntless.pytorch.Batch(n) or Epoch(n)"
                + ("" if local else " (or a searcher.max_length in the experiment config)")
            )
        _warn_if_not_max_time(config, max_length, local)
        if test_mode and not local:
            raise ValueError("test_mode is for local training; it cannot run on a cluster")
        if not local and latest_checkpoint is None and core.trial.latest_checkpoint:
            logger.warning(
                "the cluster has checkpoint %s to resume from, but fit() got no "
                "latest_checkpoint: pass latest_checkpoint=dauntless.get_cluster_info()."
                "latest_checkpoint to resume",
                core.trial.latest_checkpoint,
            )
        settings = LoopSettings(
            reporting_period=reporting_period or Batch(100),
            validation_period=validation_period or NEVER,
            checkpoint_period=checkpoint_period or NEVER,
            checkpoint_policy=checkpoint_policy,  # type: ignore[arg-type]
            searcher_metric=config.searcher.metric,
            smaller_is_better=config.searcher.smaller_is_better,
            initial_validation=step_zero_validation,
            max_length=max_length,
            test_mode=test_mode,
        )
        controller = self._controller_class(
            self.trial,
            ctx,
            core,
            settings,
            latest_checkpoint=latest_checkpoint,
            local=local,
            is_trainer=True,
            code_dir=Path(os.getcwd()),
        )
        profiling = profiling_enabled and not core.profiler.enabled
        if profiling and local:
            logger.warning("profiling_enabled=True has no effect in local training")
        elif profiling:
            core.profiler.on()
        try:
            result = controller.run()
        finally:
            if profiling and not local:
                core.profiler.off()
        logger.info("fit() ends: %s at batch %d", result.value, controller.batches_trained)
        return result


def _warn_if_not_max_time(config: Any, max_length: Any, local: bool) -> None:
    """Warn (as Determined 0.38 does) when an ASHA search measures time in batches or
    epochs and ``fit(max_length=...)`` trains for a different length than its
    ``max_time``: the top rung is then never reached, or reached early."""
    searcher = config.searcher
    time_metric = getattr(searcher, "time_metric", None)
    max_time = getattr(searcher, "max_time", None)
    if local or max_time is None or time_metric not in ("batches", "epochs"):
        return
    expected = Batch(max_time) if time_metric == "batches" else Epoch(max_time)
    if max_length != expected:
        logger.warning(
            "fit(max_length=%r) differs from the searcher's max_time (%r): ASHA's top rung "
            "is at %d %s",
            max_length,
            expected,
            max_time,
            time_metric,
        )


__all__ = ["Batch", "Epoch", "Period", "Trainer", "init"]
