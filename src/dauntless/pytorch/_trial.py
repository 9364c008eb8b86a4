"""``PyTorchTrial``: the class a user subclasses to train a model on Dauntless."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch

from ._reducer import Reducer

if TYPE_CHECKING:
    from ._callback import PyTorchCallback
    from ._context import PyTorchTrialContext
    from ._data import DataLoader

TorchData = Union[Mapping[str, Any], Sequence[Any], torch.Tensor, np.ndarray]
"""A batch: a tensor or array, or a (nested) dict, list or tuple of them."""


class PyTorchTrial(abc.ABC):
    """A model definition: how to build data, train one batch and evaluate one batch.

    The harness builds the trial with a :class:`PyTorchTrialContext`, then calls
    :meth:`train_batch` for each training batch and :meth:`evaluate_batch` (or
    :meth:`evaluate_full_dataset`) to validate. Build the models, optimizers and LR
    schedulers in ``__init__`` and wrap them with the context
    (``context.wrap_model``, ``context.wrap_optimizer``, ``context.wrap_lr_scheduler``)
    so they are moved to the device and saved in checkpoints. Keep no other state on the
    trial object: it is not checkpointed.

    Args:
        context: the trial's context (hyperparameters, config, device, wrapping).
    """

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader:
        """Return the training data, as a :class:`dauntless.pytorch.DataLoader`.

        Its ``batch_size`` should be ``context.get_per_slot_batch_size()``. The harness
        repeats, shards and skips it (see :class:`~dauntless.pytorch.DataLoader`). A
        plain ``torch.utils.data.DataLoader`` is refused unless
        ``context.experimental.disable_dataset_reproducibility_checks()`` was called.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader:
        """Return the validation data, as a :class:`dauntless.pytorch.DataLoader`."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def train_batch(
        self, batch: TorchData, epoch_idx: int, batch_idx: int
    ) -> torch.Tensor | dict[str, Any]:
        """Train on one batch.

        Compute the loss, then call ``context.backward(loss)`` and
        ``context.step_optimizer(optimizer)``.

        With several processes each trains its own per-slot batch
        (``global_batch_size / slots_per_trial`` records) of the same step; the returned
        metrics are averaged across processes before they are reported.

        Args:
            batch: one batch of the training loader, already on ``context.device``.
            epoch_idx: the epoch this batch belongs to, from 0.
            batch_idx: the batch's index since the trial began, from 0 (it continues
                across pauses and restarts).

        Returns:
            A dict of metric name -> value (scalars, averaged over each reporting
            period), or a tensor, which means ``{"loss": tensor}``.
        """
        raise NotImplementedError  # abstract

    def evaluate_batch(self, batch: TorchData, batch_idx: int) -> dict[str, Any]:
        """Evaluate one validation batch (implement this or :meth:`evaluate_full_dataset`).

        Runs in ``eval()`` mode under ``torch.no_grad()``. Each batch must return the
        same metric names; the values are combined per :meth:`evaluation_reducer` (by
        default the mean weighted by :meth:`get_batch_length`). ``batch_idx`` may be left
        out of an override's signature. Implement exactly one of this and
        :meth:`evaluate_full_dataset`. With several processes, process r evaluates
        batches r, r + N, ... of the validation loader and the results are reduced
        across processes (``Reducer.AVG`` weighted by records), so the metrics equal
        those of one process.

        Args:
            batch: one batch of the validation loader, on ``context.device``.
            batch_idx: its index within this process's validation pass, from 0.

        Returns:
            A dict of metric name -> value.
        """
        raise NotImplementedError  # abstract

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        """Evaluate the whole validation set at once (alternative to :meth:`evaluate_batch`).

        With several processes only the chief (rank 0) calls it, on the whole
        validation set; the other processes receive its metrics. It must therefore not
        run collectives (DDP models may be called: in ``eval()`` under ``no_grad`` they
        do not synchronize).

        Args:
            data_loader: a torch loader over the validation data (batches are not moved
                to the device).

        Returns:
            A dict of metric name -> value.
        """
        raise NotImplementedError  # abstract

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Return the trial's callbacks as ``{name: PyTorchCallback}`` (default none).

        The names key each callback's state in checkpoints (``callbacks[name]``).
        """
        return {}

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        """How :meth:`evaluate_batch` values combine: one :class:`Reducer` for all
        metrics, or one per metric name. Default ``Reducer.AVG``."""
        return Reducer.AVG

    def get_batch_length(self, batch: TorchData) -> int:
        """The number of records in a batch (the AVG reducer's weight).

        The default takes the first dimension of the first tensor or array found in the
        batch, searching dicts (in order), lists and tuples.

        Raises:
            TypeError: if the batch holds no tensor or array.
        """
        found = _first_array(batch)
        if found is None:
            raise TypeError(
                f"cannot find a tensor or array in a batch of type {type(batch).__name__}; "
                "override get_batch_length()"
            )
        return int(found.shape[0]) if found.ndim > 0 else 1


def _first_array(batch: Any) -> torch.Tensor | np.ndarray | None:
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return batch
    if isinstance(batch, Mapping):
        items: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in items:
        found = _first_array(item)
        if found is not None:
            return found
    return None


def overrides(trial: PyTorchTrial, name: str) -> bool:
    """True if the trial's class overrides ``PyTorchTrial.<name>`` (a base class's own
    default marked ``_dauntless_default``, as DeepSpeedTrial's ``evaluate_batch``, does
    not count)."""
    method = getattr(type(trial), name)
    return method is not getattr(PyTorchTrial, name) and not getattr(
        method, "_dauntless_default", False
    )
