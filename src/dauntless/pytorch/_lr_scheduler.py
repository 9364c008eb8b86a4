"""``LRScheduler``: a learning-rate scheduler the harness steps and checkpoints.

When each step mode steps follows Determined's ``LRScheduler.StepMode`` (reference §3.3).
"""

from __future__ import annotations

import enum
from typing import Any


class LRScheduler:
    """A wrapped torch LR scheduler: saved in checkpoints, stepped per ``step_mode``.

    Made by :meth:`PyTorchTrialContext.wrap_lr_scheduler`; user code keeps using the
    torch scheduler it passed in.

    The harness considers stepping it only after batches on which the optimizer steps,
    i.e. when ``(batch_idx + 1) % aggregation_frequency == 0`` (every batch without
    gradient aggregation).

    Args:
        scheduler: a ``torch.optim.lr_scheduler`` object (anything with ``step``,
            ``state_dict`` and ``load_state_dict``).
        step_mode: when the harness calls ``scheduler.step()``.
        frequency: step every ``frequency`` batches, optimizer steps or epochs (>= 1).
        aggregation_frequency: batches per optimizer step of the scheduler's optimizer.

    Raises:
        TypeError: if ``step_mode`` is not a :class:`LRScheduler.StepMode` or the
            scheduler lacks the needed methods.
        ValueError: if ``frequency`` or ``aggregation_frequency`` < 1.
    """

    class StepMode(enum.Enum):
        """When the harness steps a wrapped scheduler.

        ``STEP_EVERY_EPOCH``: once per ``frequency`` epochs, on the optimizer-step batch
        after which the next optimizer step falls in a new epoch.
        ``STEP_EVERY_BATCH``: on each optimizer-step batch, once for every batch ``i``
        it covers with ``(i + 1) % frequency == 0``.
        ``MANUAL_STEP``: never; ``train_batch`` calls ``scheduler.step()`` itself.
        ``STEP_EVERY_OPTIMIZER_STEP``: on optimizer-step batches with
        ``(batch_idx + 1) % frequency == 0``.
        """

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(
        self,
        scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
        aggregation_frequency: int = 1,
    ) -> None:
        for method in ("step", "state_dict", "load_state_dict"):
            if not callable(getattr(scheduler, method, None)):
                raise TypeError(
                    f"scheduler must have a {method}() method (a torch LR scheduler), got "
                    f"{type(scheduler).__name__}"
                )
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be an LRScheduler.StepMode, got {step_mode!r}")
        for name, value in (
            ("frequency", frequency),
            ("aggregation_frequency", aggregation_frequency),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.scheduler = scheduler
        self.step_mode = step_mode
        self.frequency = frequency
        self.aggregation_frequency = aggregation_frequency

    def after_batch(self, batch_idx: int, epoch_len: int) -> None:
        """Step as due after training batch ``batch_idx`` (0-based, since trial start).

        Args:
            batch_idx: the batch just trained.
            epoch_len: batches per epoch (>= 1).
        """
        agg = self.aggregation_frequency
        if (batch_idx + 1) % agg != 0:
            return
        mode = self.step_mode
        if mode is LRScheduler.StepMode.STEP_EVERY_BATCH:
            for i in range(batch_idx - agg + 1, batch_idx + 1):
                if (i + 1) % self.frequency == 0:
                    self.scheduler.step()
        elif mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
            if (batch_idx + 1) % self.frequency == 0:
                self.scheduler.step()
        elif mode is LRScheduler.StepMode.STEP_EVERY_EPOCH:
            # Step for each epoch that ends before the next optimizer step.
            for epoch in range(batch_idx // epoch_len, (batch_idx + agg) // epoch_len):
                if (epoch + 1) % self.frequency == 0:
                    self.scheduler.step()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the wrapped scheduler (for ``MANUAL_STEP`` code holding this wrapper)."""
        self.scheduler.step(*args, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped scheduler's state."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the wrapped scheduler's state."""
        self.scheduler.load_state_dict(state)
