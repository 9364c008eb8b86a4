"""``PyTorchCallback``: user code run at points of a PyTorchTrial's life.

The hooks and their arguments follow Determined's ``PyTorchCallback`` (reference §3.7).
Order within one run::

    on_trial_startup -> [on_checkpoint_load_start] -> on_training_start ->
      ( on_training_epoch_start -> ...batches... -> on_training_epoch_end
        | on_training_workload_end                       (after each training report)
        | on_validation_start -> on_validation_epoch_start ->
            on_validation_epoch_end -> on_validation_end
        | on_checkpoint_save_start -> on_checkpoint_write_end -> on_checkpoint_upload_end
      )* -> on_trial_shutdown
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any


class PyTorchCallback:
    """Override the hooks you need; each default does nothing.

    Return the callbacks from :meth:`PyTorchTrial.build_callbacks` as ``{name:
    callback}``. A callback's :meth:`state_dict` is saved in every checkpoint under
    ``callbacks[name]`` and given back to :meth:`load_state_dict` on resume, so a
    stateful callback continues where it stopped. Keep that state to tensors and plain
    Python data (dicts, lists, numbers, strings) so checkpoints load safely.
    """

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Once per process, before the data loaders are built and any checkpoint loaded.

        Args:
            first_batch_idx: batches already trained by the checkpoint being resumed
                (0 for a fresh start).
            checkpoint_uuid: the checkpoint being resumed, or None.
        """

    def on_trial_shutdown(self) -> None:
        """Once per process, when the training loop ends (done, preempted or failed)."""

    def on_training_start(self) -> None:
        """After the state is restored, before the first batch of this process."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of an epoch.

        Args:
            epoch_idx: the epoch starting, from 0.
        """

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of an epoch.

        Args:
            epoch_idx: the epoch that ended, from 0.
        """

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        """After each training metrics report.

        Args:
            avg_metrics: the reported metrics (averaged over the reporting period, with
                ``batches`` and ``epochs``).
            batch_metrics: the per-batch metrics of the period.
        """

    def on_validation_start(self) -> None:
        """Before a validation, while the models are still in training mode."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch (models in ``eval()`` mode)."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """After the last validation batch.

        Args:
            outputs: what ``evaluate_batch`` returned for each batch, in order (one
                dict, the full-dataset result, with ``evaluate_full_dataset``).
        """

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After a validation was reduced and reported.

        Args:
            metrics: the reported validation metrics.
        """

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint's state is applied to the trial.

        Args:
            checkpoint: the loaded ``state-dict.pth`` dict (may be changed in place).
        """

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint's state is written.

        Args:
            checkpoint: the dict about to be saved as ``state-dict.pth`` (may be
                changed in place, e.g. to add keys).
        """

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint's files are written, before it is published (chief only).

        Args:
            checkpoint_dir: the directory holding them; files written here are part of
                the checkpoint.
        """

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated alias of :meth:`on_checkpoint_write_end`, called right after it."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint was published and reported.

        Args:
            uuid: the checkpoint's uuid.
        """

    def state_dict(self) -> dict[str, Any]:
        """The callback's state, saved in each checkpoint (default: empty)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state returned by :meth:`state_dict` (default: ignore it)."""


def legacy_arities(callback: PyTorchCallback) -> dict[str, int]:
    """Hooks a callback overrides with an older, shorter signature, and how many
    arguments each takes.

    Determined's earlier releases called some hooks with fewer arguments (for example
    ``on_training_epoch_start(self)`` before ``epoch_idx`` was added). Such overrides
    still run, given the leading arguments they accept, with a ``FutureWarning`` (once
    per class and hook) asking for the current signature.

    Args:
        callback: the callback.

    Returns:
        ``{hook: number_of_positional_arguments}`` for each hook overridden with fewer
        parameters than :class:`PyTorchCallback` declares; hooks that take ``*args`` or
        the full signature are not listed.
    """
    out: dict[str, int] = {}
    for name, base in vars(PyTorchCallback).items():
        if not name.startswith("on_") or not callable(base):
            continue
        impl = getattr(type(callback), name, None)
        if impl is None or impl is base:
            continue
        try:
            params = list(inspect.signature(impl).parameters.values())[1:]
            expected = len(inspect.signature(base).parameters) - 1
        except (TypeError, ValueError):
            continue
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            continue
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) < expected:
            out[name] = len(positional)
            key = (type(callback), name)
            if key not in _WARNED:
                _WARNED.add(key)
                base_params = ", ".join(list(inspect.signature(base).parameters)[1:])
                warnings.warn(
                    f"{type(callback).__name__}.{name} takes {len(positional)} argument(s); "
                    f"the signature {name}(self, {base_params}) is current and the old one "
                    "is deprecated",
                    FutureWarning,
                    stacklevel=2,
                )
    return out


_WARNED: set[tuple[type, str]] = set()
