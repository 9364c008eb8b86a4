"""``DeepSpeedTrial``: the class a user subclasses to train DeepSpeed engines."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from dauntless.pytorch._data import DataLoader
from dauntless.pytorch._trial import PyTorchTrial

if TYPE_CHECKING:
    from ._context import DeepSpeedTrialContext


class DeepSpeedTrial(PyTorchTrial):
    """A trial trained with DeepSpeed (Determined's ``DeepSpeedTrial``).

    ``__init__(context)`` builds the engines with ``deepspeed.initialize`` and wraps each
    with ``context.wrap_model_engine``. The loop hands the trial an iterator over its
    training data instead of a batch, so that a pipeline engine can draw its own micro
    batches (``engine.train_batch(data_iter)``); a plain engine draws one::

        def train_batch(self, dataloader_iter, epoch_idx, batch_idx):
            x, y = self.context.to_device(next(dataloader_iter))
            loss = F.cross_entropy(self.engine(x), y)
            self.engine.backward(loss)
            self.engine.step()
            return {"loss": loss}

    Unless the context's ``disable_auto_grad_accumulation()`` was called, ``train_batch``
    runs ``gradient_accumulation_steps`` times per batch (the engine steps its optimizer
    at the last); the batch's metrics are the mean over those calls.

    The data loaders return :class:`dauntless.pytorch.DataLoader` (of micro batches:
    ``batch_size`` = ``train_micro_batch_size_per_gpu`` x ranks, the loop shards it), or
    None when the trial reads its data itself (then it gets None as the iterator, and
    ``disable_dataset_reproducibility_checks()`` is needed).
    """

    @abc.abstractmethod
    def __init__(self, context: DeepSpeedTrialContext) -> None:  # type: ignore[override]
        """Build the engines and wrap them (``context.wrap_model_engine``)."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader | None:  # type: ignore[override]
        """The training data: a DataLoader of micro batches, or None."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader | None:  # type: ignore[override]
        """The validation data: a DataLoader of micro batches, or None."""

    @abc.abstractmethod
    def train_batch(  # type: ignore[override]
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> torch.Tensor | dict[str, Any]:
        """Train one micro batch (or, without auto accumulation, one whole batch).

        Args:
            dataloader_iter: the training data, positioned at the next micro batch
                (None when the trial reads its own data).
            epoch_idx: the epoch the batch belongs to (0-based).
            batch_idx: the batch's index in the whole training (0-based).

        Returns:
            The loss, or a dict of metrics (tensors or numbers).
        """

    def evaluate_batch(  # type: ignore[override]
        self, dataloader_iter: Iterator[Any] | None, batch_idx: int
    ) -> dict[str, Any]:
        """Evaluate one validation micro batch drawn from ``dataloader_iter``.

        Args:
            dataloader_iter: the validation data (None when the trial reads its own).
            batch_idx: the index of this call in the validation (0-based).

        Returns:
            A dict of metrics, reduced over the validation (mean by default).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement evaluate_batch or evaluate_full_dataset"
        )

    # Not an override the loop counts: the trial still implements one of the two.
    evaluate_batch._dauntless_default = True  # type: ignore[attr-defined]


__all__ = ["DeepSpeedTrial"]
