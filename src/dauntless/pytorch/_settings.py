"""The periods and policies that drive a trial's training loop.

Periods are :class:`Batch` or :class:`Epoch` counts (Determined's ``TrainUnit``); plain
ints are batches. Epoch counts become batches once the training loader's length is
known (:meth:`LoopSettings.resolve`), so an ``Epoch(n)`` boundary falls on the last
batch of every n-th epoch.
"""

from __future__ import annotations

import abc
import dataclasses
import sys
from typing import Any, Literal, Union

from dauntless.config import ExperimentConfig, Length

CheckpointPolicy = Literal["best", "all", "none"]


class TrainUnit(abc.ABC):
    """A training length: ``value`` batches or epochs.

    Args:
        value: the count (an int >= 0); a period of 0 fires after every batch.

    Raises:
        TypeError: if ``value`` is not an int.
        ValueError: if it is negative.
    """

    def __init__(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{type(self).__name__} needs an int, got {value!r}")
        if value < 0:
            raise ValueError(f"{type(self).__name__} needs a value >= 0, got {value}")
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    @abc.abstractmethod
    def to_batches(self, epoch_len: int) -> int:
        """This length in batches, given ``epoch_len`` batches per epoch."""
        raise NotImplementedError  # abstract


class Batch(TrainUnit):
    """``value`` batches."""

    def to_batches(self, epoch_len: int) -> int:
        """``value`` (batches need no conversion)."""
        return self.value


class Epoch(TrainUnit):
    """``value`` epochs (passes over the training loader)."""

    def to_batches(self, epoch_len: int) -> int:
        """``value * epoch_len`` batches."""
        return self.value * epoch_len


Period = Union[int, TrainUnit]
"""A period: batches as an int, or a :class:`Batch` / :class:`Epoch`."""

NEVER = Batch(sys.maxsize)
"""The default period of the Trainer: never fires."""


def _check_period(name: str, value: Period | None, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, TrainUnit):
        return
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return
    raise ValueError(f"{name} must be Batch(n), Epoch(n) or an int >= 0 (batches), got {value!r}")


@dataclasses.dataclass(frozen=True)
class ResolvedSettings:
    """:class:`LoopSettings` with every period in batches (0 = never)."""

    reporting_period: int
    validation_period: int
    checkpoint_period: int
    max_length: int | None


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """When to report, validate and checkpoint.

    Attributes:
        reporting_period: report averaged training metrics every this many batches
            (>= 1 once resolved); also at the end of each searcher operation.
        validation_period: validate every this many batches; 0 = only at the end of each
            searcher operation.
        checkpoint_period: checkpoint every this many batches; 0 = never periodically.
        checkpoint_policy: after a validation, checkpoint when it is the experiment's
            best so far (``best``), always (``all``) or never (``none``).
        searcher_metric: the validation metric the searcher reads; None when nothing
            reads one (local training).
        smaller_is_better: whether a smaller ``searcher_metric`` is better.
        initial_validation: validate before training the first batch.
        max_length: the trial's full length, for progress and as a cap on the searcher's
            operations; None = the current operation's length.
        test_mode: train one batch, validate one batch, checkpoint, stop.

    Raises:
        ValueError: if a period is out of range, the policy unknown or the metric empty.
    """

    reporting_period: Period = 100
    validation_period: Period = 0
    checkpoint_period: Period = 0
    checkpoint_policy: CheckpointPolicy = "best"
    searcher_metric: str | None = "validation_loss"
    smaller_is_better: bool = True
    initial_validation: bool = False
    max_length: Period | None = None
    test_mode: bool = False

    def __post_init__(self) -> None:
        _check_period("reporting_period", self.reporting_period, allow_none=False)
        if self.reporting_period == 0:
            raise ValueError("reporting_period must be >= 1 batch, got 0")
        _check_period("validation_period", self.validation_period, allow_none=False)
        _check_period("checkpoint_period", self.checkpoint_period, allow_none=False)
        _check_period("max_length", self.max_length, allow_none=True)
        if self.checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(
                f"checkpoint_policy must be 'best', 'all' or 'none', got {self.checkpoint_policy!r}"
            )
        if self.searcher_metric is not None and (
            not isinstance(self.searcher_metric, str) or not self.searcher_metric
        ):
            raise ValueError(f"searcher_metric must be a metric name, got {self.searcher_metric!r}")
        if self.max_length is not None and self.max_length in (0, Batch(0), Epoch(0)):
            raise ValueError(f"max_length must be >= 1 batch, got {self.max_length}")

    def resolve(self, epoch_len: int) -> ResolvedSettings:
        """Every period in batches, given ``epoch_len`` batches per epoch.

        A :class:`TrainUnit` of value 0 becomes 1 (every batch); a period beyond any
        reachable batch count (e.g. ``Batch(sys.maxsize)``) becomes 0 (never).
        """

        def batches(period: Period, unit_zero: int) -> int:
            if isinstance(period, TrainUnit):
                n = period.to_batches(epoch_len)
                if n == 0:
                    return unit_zero
                return 0 if n >= sys.maxsize else n
            return period

        max_length = None
        if self.max_length is not None:
            max_length = batches(self.max_length, 1) or None
        return ResolvedSettings(
            reporting_period=batches(self.reporting_period, 1) or sys.maxsize,
            validation_period=batches(self.validation_period, 1),
            checkpoint_period=batches(self.checkpoint_period, 1),
            max_length=max_length,
        )

    @classmethod
    def from_config(cls, config: ExperimentConfig, global_batch_size: int | None) -> LoopSettings:
        """The settings an experiment config asks for (the ``module:Class`` entrypoint).

        Lengths in records or epochs are converted with ``global_batch_size`` and
        ``records_per_epoch`` (``max(records // global_batch_size, 1)``).

        Args:
            config: the validated experiment config.
            global_batch_size: records per batch over all processes; needed only when a
                period is in records or epochs.

        Raises:
            ValueError: if a length cannot be converted to batches.
        """

        def batches(length: Length | None) -> int | None:
            if length is None:
                return None
            return length.to_batches(global_batch_size, config.records_per_epoch)

        max_length: Period | None = batches(getattr(config.searcher, "max_length", None))
        validation_period: Period = batches(config.min_validation_period) or 0
        time_metric = getattr(config.searcher, "time_metric", None)
        max_time = getattr(config.searcher, "max_time", None)
        if not max_length and max_time is not None and time_metric == "epochs":
            # ASHA on epochs (0.38 mode) and no searcher.max_length: the legacy harness
            # trains to max_time epochs and, unless told otherwise, validates every lowest
            # rung threshold so that the searcher can stop the trial there (a Dauntless
            # extension: Determined's legacy harness needs searcher.max_length). With
            # time_metric batches the searcher hands out rung lengths instead (see
            # dauntless.config.searcher_length).
            max_length = Epoch(max_time)
            if not validation_period:
                validation_period = Epoch(_lowest_rung(config.searcher))
        return cls(
            reporting_period=config.scheduling_unit,
            validation_period=validation_period,
            checkpoint_period=batches(config.min_checkpoint_period) or 0,
            checkpoint_policy=config.checkpoint_policy,
            searcher_metric=config.searcher.metric,
            smaller_is_better=config.searcher.smaller_is_better,
            initial_validation=config.perform_initial_validation,
            max_length=max_length or None,
        )


def _lowest_rung(searcher: Any) -> int:
    """The smallest rung threshold of an ASHA config (``max_time`` units): rung 0 of the
    deepest possible bracket, ``max(int(T / D**(R-1)), 1)`` (reference §2.4 step 5)."""
    divisor = float(getattr(searcher, "divisor", 4.0))
    max_time = int(searcher.max_time)

    def rungs_within(x: float) -> int:  # floor(log_D(x)) + 1, exactly
        k = 0
        while divisor ** (k + 1) <= x:
            k += 1
        return k + 1

    rungs = getattr(searcher, "num_rungs", None)
    if rungs is None:
        explicit = list(getattr(searcher, "bracket_rungs", []) or [])
        rungs = (
            max(explicit)
            if explicit
            else min(
                int(getattr(searcher, "max_rungs", 5)),
                rungs_within(max_time),
                rungs_within(int(getattr(searcher, "max_trials", 1))),
            )
        )
    return max(int(max_time / divisor ** (int(rungs) - 1)), 1)
