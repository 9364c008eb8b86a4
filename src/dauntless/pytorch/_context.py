"""``PyTorchTrialContext``: what a PyTorchTrial sees of its trial and its hardware.

Behaviour follows Determined's ``PyTorchTrialContext`` (reference §3.2): wrapping,
gradient aggregation, AMP and the getters; the facts about the trial are in
:class:`_TrialFacts` (``_facts.py``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dauntless.core import Context, DistributedContext, TrialInfo

from ._amp import autocast_forward, check_scaler
from ._device import to_device
from ._experimental import PyTorchExperimentalContext
from ._facts import _TrialFacts
from ._lr_scheduler import LRScheduler
from ._reducer import FunctionReducer, MetricReducer, WrappedReducer
from ._sharded import is_sharded

logger = logging.getLogger("dauntless.pytorch")

_TORCH_ZERO_GRAD = torch.optim.Optimizer.zero_grad
# Whether a torch profiler is recording. A private torch function (no public one
# exists); where a torch release lacks it, every call takes optimizer.zero_grad().
_profiler_enabled: Callable[[], bool] = getattr(torch.autograd, "_profiler_enabled", lambda: True)
_is_compiling: Callable[[], bool] = torch.compiler.is_compiling


def zero_grads(optimizer: torch.optim.Optimizer) -> None:
    """Drop the gradients of ``optimizer``'s parameters: ``optimizer.zero_grad()``
    (``set_to_none=True``, torch's default), without its per-call overhead when nothing
    can tell the difference.

    torch's ``Optimizer.zero_grad`` sets each parameter's ``grad`` to None inside a
    ``record_function`` profiler range and behind a ``torch._disable_dynamo`` wrapper;
    with the profiler off those only cost time. On the 2-core CI machine
    (``benchmarks/per_batch_python_cost.py``) torch's call takes 5.3 us in a tight loop
    against 0.4 us for this function, and in the digits training step the swap saves
    about 9 us per batch (of about 260 us), the rest being the calls' effect on the
    processor's caches.

    This function runs the loop alone when neither the optimizer's class nor the
    optimizer itself replaces torch's ``zero_grad``, no profiler is recording (the
    range would then be missing from its trace) and torch.compile is not tracing;
    otherwise it calls ``optimizer.zero_grad()``.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
    """
    if (
        type(optimizer).zero_grad is not _TORCH_ZERO_GRAD
        or "zero_grad" in optimizer.__dict__
        or _profiler_enabled()
        or _is_compiling()
    ):
        optimizer.zero_grad()
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None


class _DistributedModel(torch.nn.parallel.DistributedDataParallel):
    """DDP that answers for attributes of the model it wraps (``ddp.my_head``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


class PyTorchTrialContext(_TrialFacts):
    """Hyperparameters, config, device and the wrapped training objects of one trial.

    The harness (or :func:`dauntless.pytorch.init`) makes one and hands it to the
    trial's ``__init__``. Wrap every model, optimizer and LR scheduler with it: wrapped
    objects are moved to :attr:`device`, saved in checkpoints and restored on resume.

    Args:
        trial: the trial's info (ids, seed, hyperparameters, experiment config).
        core: the Core API context the trial reports through (TensorBoard paths use its
            checkpoint storage); None for a context that only loads a checkpoint.
        distributed: the process layout; ``core.distributed`` or one process when None.
        device: where to train; ``cuda:<local_rank>`` when CUDA is available and the
            trial has slots (``resources.slots_per_trial > 0``), else CPU, when None.
        aggregation_frequency: batches whose gradients are summed before each optimizer
            step (>= 1); the config's ``optimizations.aggregation_frequency`` (default 1)
            when None.
        enable_tensorboard_logging: whether the harness writes metrics to TensorBoard.

    Raises:
        TypeError: if ``trial`` is not a :class:`~dauntless.core.TrialInfo`.
        ValueError: if ``aggregation_frequency`` < 1.
        dauntless.config.ConfigError: if ``trial.config`` is not a valid experiment config.

    Attributes:
        device: the ``torch.device`` batches and models are moved to.
        distributed: the :class:`~dauntless.core.DistributedContext`.
        experimental: :class:`~dauntless.pytorch.PyTorchExperimentalContext` options.
        models, optimizers, lr_schedulers: the wrapped objects, in wrapping order.
    """

    def __init__(
        self,
        trial: TrialInfo,
        *,
        core: Context | None = None,
        distributed: DistributedContext | None = None,
        device: torch.device | str | None = None,
        aggregation_frequency: int | None = None,
        enable_tensorboard_logging: bool = True,
    ) -> None:
        if core is not None and not isinstance(core, Context):
            raise TypeError(f"core must be a dauntless.core.Context, got {type(core).__name__}")
        if distributed is None:
            distributed = core.distributed if core is not None else DistributedContext()
        super().__init__(trial, core, distributed, enable_tensorboard_logging)
        if device is None:
            use_cuda = torch.cuda.is_available() and self._config.resources.slots_per_trial > 0
            device = f"cuda:{self.distributed.local_rank}" if use_cuda else "cpu"
        self.device = torch.device(device)
        opts = self._config.optimizations
        if aggregation_frequency is None:
            aggregation_frequency = opts.get("aggregation_frequency", 1)
        if (
            not isinstance(aggregation_frequency, int)
            or isinstance(aggregation_frequency, bool)
            or aggregation_frequency < 1
        ):
            raise ValueError(
                f"aggregation_frequency must be an int >= 1 (batches per optimizer step), "
                f"got {aggregation_frequency!r}"
            )
        self._aggregation_frequency = aggregation_frequency
        self._average_aggregated = bool(opts.get("average_aggregated_gradients", True))
        self.experimental = PyTorchExperimentalContext(self)
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._optimizer_settings: dict[int, tuple[int, bool]] = {}
        # id -> optimizer, for the optimizers stepped after every batch (no
        # aggregation): step_optimizer's fast path.
        self._every_batch: dict[int, torch.optim.Optimizer] = {}
        self._reducers: list[WrappedReducer] = []
        self._scaler: Any = None
        self._use_amp = False
        self._scaler_stepped = False
        self._reproducibility_checks = True
        self._auto_to_device = True
        self._local_training = False

    # ----------------------------------------------------------------- wrapping

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Register a model: move it to :attr:`device` and include it in checkpoints.

        With ``experimental.use_amp()`` its forward runs under autocast and returns
        float32. With more than one process it is wrapped in
        ``DistributedDataParallel`` (``device_ids=[device.index]`` on CUDA), which
        averages gradients across processes in ``backward`` and answers for the model's
        own attributes; checkpoints hold the inner module's ``state_dict`` (no
        ``module.`` prefix), so they load into runs with any number of processes.

        A model already wrapped with FSDP (FSDP2's ``fully_shard`` over the trial's
        process group, or FSDP1) is kept as it is (no DDP), and the trial's checkpoints
        become sharded: ``torch.distributed.checkpoint`` writes every rank's shards, and
        they restore onto any number of slots (a plain model on one slot included).

        Args:
            model: a ``torch.nn.Module``.

        Returns:
            The model to use: the same object on the device (one process), or its DDP
            wrapper.

        Raises:
            TypeError: if ``model`` is not a Module.
            ValueError: if it was already wrapped.
            RuntimeError: with more than one process but no ``torch.distributed``
                process group.
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"wrap_model needs a torch.nn.Module, got {type(model).__name__}")
        if any(m is model or getattr(m, "module", None) is model for m in self.models):
            raise ValueError("this model was already wrapped")
        model = model.to(self.device)
        if self._use_amp:
            autocast_forward(model, self.device)
        if self.distributed.size > 1 and not is_sharded(model):
            if not torch.distributed.is_available() or not torch.distributed.is_initialized():
                raise RuntimeError(
                    f"wrapping a model for {self.distributed.size} processes needs a "
                    "torch.distributed process group: run the trial through the "
                    "distributed launcher (the harness starts the group), or call "
                    "torch.distributed.init_process_group() before dauntless.pytorch.init()"
                )
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = _DistributedModel(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        backward_passes_per_step: int = 1,
        fp16_compression: bool | None = None,
        average_aggregated_gradients: bool | None = None,
    ) -> torch.optim.Optimizer:
        """Register an optimizer so that it is saved in and restored from checkpoints.

        Create it on the parameters of a model wrapped before (so they are on the
        device).

        Args:
            optimizer: a ``torch.optim.Optimizer``.
            backward_passes_per_step: batches whose gradients are summed before each of
                this optimizer's steps (gradient aggregation); 1 means the context's
                ``aggregation_frequency``.
            fp16_compression: Horovod's gradient compression; only None/False (Dauntless
                communicates through torch.distributed).
            average_aggregated_gradients: divide aggregated gradients by the number of
                batches (default: the config's
                ``optimizations.average_aggregated_gradients``, True).

        Returns:
            The optimizer itself.

        Raises:
            TypeError: if it is not a ``torch.optim.Optimizer``.
            ValueError: if it was already wrapped, ``backward_passes_per_step`` < 1 or
                ``fp16_compression`` is True.
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"wrap_optimizer needs a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if any(o is optimizer for o in self.optimizers):
            raise ValueError("this optimizer was already wrapped")
        if (
            not isinstance(backward_passes_per_step, int)
            or isinstance(backward_passes_per_step, bool)
            or backward_passes_per_step < 1
        ):
            raise ValueError(
                f"backward_passes_per_step must be an int >= 1, got {backward_passes_per_step!r}"
            )
        if fp16_compression:
            raise ValueError(
                "fp16_compression is a Horovod option; Dauntless reduces gradients with "
                "torch.distributed: leave it None"
            )
        freq = (
            backward_passes_per_step
            if backward_passes_per_step > 1
            else self._aggregation_frequency
        )
        average = (
            self._average_aggregated
            if average_aggregated_gradients is None
            else bool(average_aggregated_gradients)
        )
        self._optimizer_settings[id(optimizer)] = (freq, average)
        if freq == 1:
            self._every_batch[id(optimizer)] = optimizer
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> Any:
        """Register an LR scheduler: checkpointed, and stepped by the harness per mode.

        Args:
            lr_scheduler: a ``torch.optim.lr_scheduler`` object whose optimizer is
                wrapped.
            step_mode: :class:`LRScheduler.StepMode`.
            frequency: step every ``frequency`` batches, optimizer steps or epochs.

        Returns:
            ``lr_scheduler`` itself.

        Raises:
            ValueError: if its optimizer was not wrapped first, ``frequency`` < 1, or a
                ``ReduceLROnPlateau`` is not in ``MANUAL_STEP`` mode (it needs a metric
                only ``train_batch`` has: step it yourself).
            TypeError: for a bad ``step_mode`` or scheduler.
        """
        opt = getattr(lr_scheduler, "optimizer", None)
        if opt is not None and not any(o is opt for o in self.optimizers):
            raise ValueError(
                "wrap the scheduler's optimizer with context.wrap_optimizer() before "
                "wrapping the scheduler"
            )
        plateau = isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        if plateau and step_mode is not LRScheduler.StepMode.MANUAL_STEP:
            raise ValueError(
                "ReduceLROnPlateau needs a metric to step: wrap it with "
                "LRScheduler.StepMode.MANUAL_STEP and call scheduler.step(metric) yourself"
            )
        freq = self._optimizer_settings.get(id(opt), (self._aggregation_frequency, True))[0]
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency, freq))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register a ``torch.amp.GradScaler`` for manual mixed precision.

        Scale the loss yourself (``context.backward(scaler.scale(loss))``) and pass the
        scaler to ``context.step_optimizer(opt, scaler=scaler)``; the harness calls
        ``scaler.update()`` after each batch in which it stepped and saves its state in
        checkpoints.

        Returns:
            ``scaler`` itself.

        Raises:
            TypeError: if it is not a GradScaler.
            RuntimeError: if ``experimental.use_amp()`` was called (it brings its own
                scaler) or a scaler was already wrapped.
        """
        check_scaler(scaler)
        if self._use_amp:
            raise RuntimeError(
                "experimental.use_amp() manages its own GradScaler: use either use_amp() "
                "or wrap_scaler(), not both"
            )
        if self._scaler is not None:
            raise RuntimeError("a GradScaler was already wrapped; one is supported per trial")
        self._scaler = scaler
        return scaler

    def _enable_amp(self) -> None:
        if self.models:
            raise RuntimeError(
                "call context.experimental.use_amp() in __init__ before context.wrap_model()"
            )
        if self._scaler is not None:
            raise RuntimeError(
                "a GradScaler was wrapped with wrap_scaler(): use either that or "
                "experimental.use_amp(), not both"
            )
        self._use_amp = True
        if self.device.type == "cuda":
            self._scaler = torch.amp.GradScaler("cuda")

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom metric reducer, reported with training and/or validation.

        Args:
            reducer: a :class:`MetricReducer`, or a function of the list of all values
                (then feed it with the returned object's ``update(value)``).
            name: the metric's name; None when the reducer returns a dict of metrics.
            for_training: report it with each training report (reset per period).
            for_validation: report it with each validation (reset per validation).

        Returns:
            The :class:`MetricReducer` to feed (a :class:`FunctionReducer` for a
            function).

        Raises:
            TypeError: if ``reducer`` is neither a MetricReducer nor callable, or
                ``name`` is not a str.
            ValueError: if it was already wrapped, the name is taken, or it is reported
                neither for training nor for validation.
        """
        if isinstance(reducer, MetricReducer):
            wrapped: MetricReducer = reducer
        elif callable(reducer):
            wrapped = FunctionReducer(reducer)
        else:
            raise TypeError(
                "wrap_reducer needs a MetricReducer or a function of a list of values, got "
                f"{type(reducer).__name__}"
            )
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        if any(w.reducer is reducer for w in self._reducers):
            raise ValueError("this reducer was already wrapped")
        if name is not None and any(w.name == name for w in self._reducers):
            raise ValueError(f"a reducer named {name!r} was already wrapped")
        if not for_training and not for_validation:
            raise ValueError("a reducer must be reported for training, validation or both")
        self._reducers.append(WrappedReducer(wrapped, name, for_training, for_validation))
        return wrapped

    def _gradient_sync(self, batch_idx: int) -> contextlib.AbstractContextManager[Any]:
        """The context the harness runs ``train_batch(batch_idx)`` in.

        With gradient aggregation no wrapped optimizer steps after most batches; their
        backward passes run under every DDP model's ``no_sync()`` (gradients add up
        locally) and only the pass before a step averages them across processes.
        """
        ddp = [m for m in self.models if isinstance(m, torch.nn.parallel.DistributedDataParallel)]
        if not ddp or not self._optimizer_settings:
            return contextlib.nullcontext()
        if any((batch_idx + 1) % freq == 0 for freq, _ in self._optimizer_settings.values()):
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        for model in ddp:
            stack.enter_context(model.no_sync())
        return stack

    # ----------------------------------------------------------------- training steps

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """Compute gradients of ``loss``; call it in ``train_batch``.

        With ``experimental.use_amp()`` on CUDA the loss is scaled first.

        Args:
            loss: a tensor (a scalar unless ``gradient`` is given).
            gradient, retain_graph, create_graph: as for ``torch.Tensor.backward``.

        Raises:
            TypeError: if ``loss`` is not a tensor.
        """
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"backward needs a torch.Tensor, got {type(loss).__name__}")
        if self._use_amp and self._scaler is not None:
            loss = self._scaler.scale(loss)
        if gradient is None and not retain_graph and not create_graph:
            loss.backward()  # the common call, without the keyword plumbing
        else:
            loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterator[torch.nn.Parameter]], None] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Apply the gradients: optional clipping, the step, then ``zero_grad()``
        (gradients set to None, see :func:`zero_grads`).

        With gradient aggregation (``aggregation_frequency`` or
        ``backward_passes_per_step`` = n > 1) it acts only on every n-th batch
        (``(batch_idx + 1) % n == 0``), first dividing the summed gradients by n unless
        averaging is off; on the other batches it does nothing, so gradients add up.
        With several processes the harness runs those other batches under DDP's
        ``no_sync()``, so gradients cross processes once per step.

        Args:
            optimizer: a wrapped optimizer.
            clip_grads: called with an iterator over the optimizer's parameters before
                the step (after unscaling), e.g.
                ``lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0)``.
            auto_zero_grads: zero the gradients after the step (must be True with
                aggregation).
            scaler: the GradScaler given to ``wrap_scaler`` (manual mixed precision);
                ``use_amp()``'s own scaler is used without being passed.

        Raises:
            ValueError: if ``optimizer`` was not wrapped, ``scaler`` was not wrapped, or
                ``auto_zero_grads`` is False while aggregating gradients.
        """
        if (
            clip_grads is None
            and scaler is None
            and not self._use_amp
            and self._every_batch.get(id(optimizer)) is optimizer
        ):
            # The common case, on the per-batch path: no aggregation, clipping or
            # scaling. Every Python step here is paid once per batch.
            optimizer.step()
            if auto_zero_grads:
                zero_grads(optimizer)
            return
        settings = self._optimizer_settings.get(id(optimizer))
        if settings is None or not any(o is optimizer for o in self.optimizers):
            raise ValueError(
                "step_optimizer needs an optimizer wrapped with context.wrap_optimizer() "
                "in the trial's __init__"
            )
        freq, average = settings
        if freq > 1 and not auto_zero_grads:
            raise ValueError(
                f"auto_zero_grads must be True when aggregating gradients over {freq} "
                "batches (the harness zeroes them after each aggregated step)"
            )
        if scaler is not None and scaler is not self._scaler:
            raise ValueError("pass the GradScaler to context.wrap_scaler() in __init__ first")
        if scaler is None and self._use_amp:
            scaler = self._scaler
        if (self._current_batch + 1) % freq != 0:
            return
        if freq > 1 and average:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.div_(freq)
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(p for group in optimizer.param_groups for p in group["params"])
        if scaler is not None:
            scaler.step(optimizer)
            self._scaler_stepped = True
        else:
            optimizer.step()
        if auto_zero_grads:
            zero_grads(optimizer)

    def to_device(self, data: Any) -> Any:
        """Move a batch to :attr:`device`.

        Tensors (and objects with a ``to`` method) are moved; numeric numpy arrays
        become tensors; mappings (returned as dicts), lists, tuples and named tuples are
        handled recursively; anything else is returned unchanged, with Determined's
        warning once per type for the trial's lifetime
        (:func:`dauntless.pytorch._compat_helpers.warn_unmovable`).
        """
        from ._compat_helpers import warn_unmovable

        warned = self.__dict__.setdefault("_to_device_warned_types", set())
        warn_unmovable(data, warned)
        return to_device(data, self.device)
