"""``context.experimental``: options of a PyTorchTrialContext that change the harness."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._context import PyTorchTrialContext


class PyTorchExperimentalContext:
    """Options reached as ``context.experimental``; call them in the trial's ``__init__``.

    Args:
        context: the trial context they change.
    """

    def __init__(self, context: PyTorchTrialContext) -> None:
        self._context = context

    def use_amp(self) -> None:
        """Train with automatic mixed precision over ``torch.amp``.

        Every model wrapped afterwards runs its forward under ``torch.autocast``
        (float16 on CUDA, bfloat16 on CPU) and returns float32; on CUDA the loss given to
        ``context.backward`` is scaled by a ``torch.amp.GradScaler`` that
        ``context.step_optimizer`` steps and the harness updates after every batch and
        saves in checkpoints.

        Raises:
            RuntimeError: if a model was already wrapped, or a scaler was given with
                ``wrap_scaler`` (use one or the other).
        """
        self._context._enable_amp()

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow ``build_training_data_loader`` to return a plain torch ``DataLoader``.

        The harness then cannot shuffle, repeat, shard or skip it: a resumed trial
        restarts that loader from its beginning, unless you build it reproducibly
        yourself (see :mod:`dauntless.pytorch.samplers`, and use
        ``context.get_initial_batch()`` to skip what was trained).
        """
        self._context._reproducibility_checks = False

    def disable_auto_to_device(self) -> None:
        """Stop the harness from moving batches to ``context.device``; ``train_batch`` and
        ``evaluate_batch`` get them as the loader yields them (use ``context.to_device``)."""
        self._context._auto_to_device = False
