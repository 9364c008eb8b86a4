"""``DeepSpeedTrialContext`` and the helpers of ``determined.pytorch.deepspeed``.

Facts on Determined's API: reference "DeepSpeed (det.pytorch.deepspeed)". The context
holds the DeepSpeed engines a :class:`~.DeepSpeedTrial` wraps; the training loop
(:mod:`._controller`) calls the trial once per micro batch and saves each engine with
DeepSpeed's own ``save_checkpoint`` into the platform's checkpoint directory.
``deepspeed`` is not imported here: an engine is recognised by what it offers.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dauntless.core import Context, DistributedContext, TrialInfo
from dauntless.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("dauntless.pytorch.deepspeed")

_ENGINE_METHODS = (
    "save_checkpoint",
    "load_checkpoint",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
)


def overwrite_deepspeed_config(
    base_ds_config: str | Path | Mapping[str, Any], source_ds_dict: Mapping[str, Any]
) -> dict[str, Any]:
    """A DeepSpeed config with ``source_ds_dict`` merged over ``base_ds_config``.

    Nested dicts merge key by key (recursively); any other value in ``source_ds_dict``
    replaces the base's. Neither argument is modified.

    Args:
        base_ds_config: a DeepSpeed config dict, or the path of its JSON file.
        source_ds_dict: the overrides (e.g. from the trial's hyperparameters).

    Returns:
        The merged config.

    Raises:
        TypeError: if an argument is not a dict (or the file holds no JSON object).
        FileNotFoundError: if the base config file does not exist.
    """
    if isinstance(base_ds_config, (str, Path)):
        base: Any = json.loads(Path(base_ds_config).read_text())
    else:
        base = base_ds_config
    if not isinstance(base, Mapping):
        raise TypeError(
            f"base_ds_config must be a dict or a JSON file of one, got {type(base).__name__}"
        )
    if not isinstance(source_ds_dict, Mapping):
        raise TypeError(f"source_ds_dict must be a dict, got {type(source_ds_dict).__name__}")
    return _merge(dict(copy.deepcopy(base)), source_ds_dict)


def _merge(base: dict[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            base[key] = _merge(dict(base[key]), value)
        else:
            base[key] = copy.deepcopy(value)
    return base


@dataclasses.dataclass
class ModelParallelUnit:
    """Which ranks hold distinct data and which report (Determined's MPU description).

    Attributes:
        data_parallel_rank: this process's index among the data-parallel replicas.
        data_parallel_world_size: the number of data-parallel replicas.
        should_report_training_metrics: whether this rank's training outputs count
            (with pipeline parallelism only the last stage has the loss).
        should_build_data_loader: whether this rank reads data.
    """

    data_parallel_rank: int
    data_parallel_world_size: int
    should_report_training_metrics: bool
    should_build_data_loader: bool


def make_data_parallel_mpu(distributed: DistributedContext) -> ModelParallelUnit:
    """The MPU of plain data parallelism: every rank is a replica, reports and reads."""
    return ModelParallelUnit(
        data_parallel_rank=distributed.rank,
        data_parallel_world_size=distributed.size,
        should_report_training_metrics=True,
        should_build_data_loader=True,
    )


def make_deepspeed_mpu(mpu: Any) -> ModelParallelUnit:
    """The MPU of a DeepSpeed model-parallel unit (``engine.mpu``, e.g. a pipeline's
    ``PipelineParallelGrid``): the data-parallel rank and size come from it; the last
    pipeline stage reports, the first and last stages read data.

    Raises:
        TypeError: if ``mpu`` lacks DeepSpeed's MPU methods.
    """
    for name in ("get_data_parallel_rank", "get_data_parallel_world_size"):
        if not callable(getattr(mpu, name, None)):
            raise TypeError(f"make_deepspeed_mpu needs a DeepSpeed MPU with {name}()")
    num_stages = (
        mpu.get_pipe_parallel_world_size() if hasattr(mpu, "get_pipe_parallel_world_size") else 1
    )
    stage = mpu.get_stage_id() if hasattr(mpu, "get_stage_id") else 0
    return ModelParallelUnit(
        data_parallel_rank=mpu.get_data_parallel_rank(),
        data_parallel_world_size=mpu.get_data_parallel_world_size(),
        should_report_training_metrics=stage == num_stages - 1,
        should_build_data_loader=stage in (0, num_stages - 1),
    )


def is_engine(obj: Any) -> bool:
    """Whether ``obj`` looks like a ``deepspeed.DeepSpeedEngine`` (duck-typed, so that
    deepspeed need not be imported to tell)."""
    return isinstance(obj, torch.nn.Module) and all(
        callable(getattr(obj, name, None)) for name in _ENGINE_METHODS
    )


class DeepSpeedTrialContext(PyTorchTrialContext):
    """What a :class:`~.DeepSpeedTrial` sees: hyperparameters, config, device, and the
    DeepSpeed engines it wrapped (Determined's ``DeepSpeedTrialContext``).

    Build engines with ``deepspeed.initialize(...)`` in the trial's ``__init__`` and
    register each with :meth:`wrap_model_engine`. The first engine's
    ``train_micro_batch_size_per_gpu`` and ``gradient_accumulation_steps`` define a
    batch: the loop calls ``train_batch`` ``gradient_accumulation_steps`` times per
    batch (unless :meth:`disable_auto_grad_accumulation`), so a batch is
    micro batch x accumulation steps x data-parallel ranks records.

    ``wrap_model``, ``wrap_optimizer`` and ``wrap_lr_scheduler`` are refused: the engine
    owns its model, optimizer and scheduler, and its checkpoints hold them.

    Args:
        trial: the trial's info.
        core: the Core API context (None only to build a context that loads nothing).
        distributed: the process layout; ``core.distributed`` when None.
        device: where batches go; ``cuda:<local_rank>`` with CUDA and slots, else CPU.
        enable_tensorboard_logging: whether metrics are written for TensorBoard.
    """

    def __init__(
        self,
        trial: TrialInfo,
        *,
        core: Context | None = None,
        distributed: DistributedContext | None = None,
        device: torch.device | str | None = None,
        enable_tensorboard_logging: bool = True,
    ) -> None:
        super().__init__(
            trial,
            core=core,
            distributed=distributed,
            device=device,
            enable_tensorboard_logging=enable_tensorboard_logging,
        )
        self._mpu = make_data_parallel_mpu(self.distributed)
        self._train_micro_batch_size_per_gpu: int | None = None
        self._num_micro_batches_per_slot: int | None = None
        self._auto_grad_accumulation = True
        self._use_pipeline_parallel = False

    # ----------------------------------------------------------------- wrapping

    def wrap_model_engine(self, model: torch.nn.Module) -> torch.nn.Module:
        """Register a DeepSpeed engine: it is saved in and restored from checkpoints
        (``engine.save_checkpoint`` / ``load_checkpoint``, tag ``model<i>``).

        The first engine sets the micro batch size and the micro batches per batch;
        a later engine with other values gets a warning (the first one's count).

        Args:
            model: the engine ``deepspeed.initialize`` returned.

        Returns:
            The engine.

        Raises:
            TypeError: if ``model`` is not a DeepSpeed engine.
            ValueError: if it was wrapped already.
        """
        if not is_engine(model):
            raise TypeError(
                "wrap_model_engine needs the engine deepspeed.initialize() returned, got "
                f"{type(model).__name__}"
            )
        if any(m is model for m in self.models):
            raise ValueError("this model engine was already wrapped")
        engine: Any = model  # a DeepSpeedEngine (deepspeed is not imported here)
        micro = int(engine.train_micro_batch_size_per_gpu())
        accumulation = int(engine.gradient_accumulation_steps())
        if self._train_micro_batch_size_per_gpu is None:
            self._train_micro_batch_size_per_gpu = micro
            self._num_micro_batches_per_slot = accumulation
            self._use_pipeline_parallel = (
                hasattr(model, "train_batch")
                and hasattr(model, "is_pipe_parallel")
                and bool(getattr(model, "is_pipe_parallel", False))
            )
        elif (micro, accumulation) != (
            self._train_micro_batch_size_per_gpu,
            self._num_micro_batches_per_slot,
        ):
            logger.warning(
                "engine %d has micro batch size %d and %d accumulation steps, the first "
                "engine %d and %d: a batch follows the first engine",
                len(self.models),
                micro,
                accumulation,
                self._train_micro_batch_size_per_gpu,
                self._num_micro_batches_per_slot,
            )
        self.models.append(model)
        return model

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Refused: use :meth:`wrap_model_engine` with the engine of ``deepspeed.initialize``.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            "DeepSpeedTrialContext.wrap_model is not available: build the engine with "
            "deepspeed.initialize(model=...) and call context.wrap_model_engine(engine)"
        )

    def wrap_optimizer(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Refused: the DeepSpeed engine owns its optimizer.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            "DeepSpeedTrialContext.wrap_optimizer is not available: pass the optimizer to "
            "deepspeed.initialize(); the engine's checkpoints hold its state"
        )

    def wrap_lr_scheduler(self, lr_scheduler: Any, *args: Any, **kwargs: Any) -> Any:
        """Refused: the DeepSpeed engine owns its LR scheduler.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            "DeepSpeedTrialContext.wrap_lr_scheduler is not available: pass the scheduler "
            "to deepspeed.initialize(lr_scheduler=...); the engine steps and saves it"
        )

    def set_mpu(self, mpu: ModelParallelUnit) -> None:
        """Use ``mpu`` for model parallelism (which ranks report and read data).

        Raises:
            TypeError: if ``mpu`` is not a :class:`ModelParallelUnit`.
        """
        if not isinstance(mpu, ModelParallelUnit):
            raise TypeError(
                "set_mpu needs a ModelParallelUnit (make_deepspeed_mpu(engine.mpu) or "
                f"make_data_parallel_mpu(...)), got {type(mpu).__name__}"
            )
        self._mpu = mpu

    @property
    def mpu(self) -> ModelParallelUnit:
        """The model-parallel unit in use (data parallelism unless :meth:`set_mpu`)."""
        return self._mpu

    def disable_auto_grad_accumulation(self) -> None:
        """Call ``train_batch`` once per batch: the trial runs the engine's micro
        batches itself (e.g. ``engine.train_batch`` of a pipeline)."""
        self._auto_grad_accumulation = False

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow data loaders other than :class:`dauntless.pytorch.DataLoader` (the trial
        makes them reproducible itself)."""
        self._reproducibility_checks = False

    def get_train_micro_batch_size_per_gpu(self) -> int:
        """The first engine's micro batch size (records per rank per micro batch).

        Raises:
            RuntimeError: before an engine was wrapped.
        """
        if self._train_micro_batch_size_per_gpu is None:
            raise RuntimeError("no model engine was wrapped yet (context.wrap_model_engine)")
        return self._train_micro_batch_size_per_gpu

    def get_num_micro_batches_per_slot(self) -> int:
        """The first engine's gradient accumulation steps (micro batches per batch).

        Raises:
            RuntimeError: before an engine was wrapped.
        """
        if self._num_micro_batches_per_slot is None:
            raise RuntimeError("no model engine was wrapped yet (context.wrap_model_engine)")
        return self._num_micro_batches_per_slot

    @property
    def use_pipeline_parallel(self) -> bool:
        """Whether the first engine is a pipeline engine."""
        return self._use_pipeline_parallel


__all__ = [
    "DeepSpeedTrialContext",
    "ModelParallelUnit",
    "make_data_parallel_mpu",
    "make_deepspeed_mpu",
    "overwrite_deepspeed_config",
]
