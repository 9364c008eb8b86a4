"""``SearcherContext``: the searcher operations a trial trains for."""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Iterator

from ._backend import Backend, SearcherAnswer
from ._distributed import DistributedContext

logger = logging.getLogger("dauntless.core")


class SearcherMode(enum.Enum):
    """Which processes iterate :meth:`SearcherContext.operations`.

    ``WorkersAskChief``: every rank iterates; the chief asks the master and broadcasts
    each operation (a collective). ``ChiefOnly``: only the chief may iterate.
    """

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class SearcherOperation:
    """ "Train until ``total_batches == length``, validate, and report the searcher metric."

    Attributes:
        length: the absolute target, in batches.
        completed: whether :meth:`report_completed` was called.
    """

    def __init__(self, context: SearcherContext, length: int, is_chief: bool = True) -> None:
        self._context = context
        self.length = length
        self.completed = False
        self._is_chief = is_chief

    def __repr__(self) -> str:
        return f"SearcherOperation(length={self.length}, completed={self.completed})"

    def report_progress(self, length: float) -> None:
        """Report how far training has come towards this operation (chief only).

        Args:
            length: batches trained so far (absolute, like :attr:`length`).

        Raises:
            ValueError: if ``length`` is negative or not a finite number.
            RuntimeError: on a non-chief rank.
        """
        if not self._is_chief:
            raise RuntimeError("report_progress() is chief-only")
        if (
            isinstance(length, bool)
            or not isinstance(length, (int, float))
            or not (math.isfinite(length) and length >= 0)
        ):
            raise ValueError(f"length must be a finite number >= 0 (batches), got {length!r}")
        self._context._progress(min(1.0, length / self.length) if self.length else 1.0)

    def report_completed(self, searcher_metric: float) -> None:
        """Report the operation done, with the value of the searcher's metric.

        Args:
            searcher_metric: the validation value of ``searcher.metric`` at ``length``.

        Raises:
            RuntimeError: if the operation was already completed.
            TypeError: if ``searcher_metric`` is not a real number.
        """
        if not self._is_chief:
            raise RuntimeError("report_completed() is chief-only")
        if self.completed:
            raise RuntimeError(f"operation of length {self.length} was already completed")
        if isinstance(searcher_metric, bool) or not isinstance(searcher_metric, (int, float)):
            raise TypeError(
                f"searcher_metric must be a number, got {type(searcher_metric).__name__}"
            )
        self._context._complete(self.length, float(searcher_metric))
        self.completed = True


class SearcherContext:
    """Ask the searcher what to train; a trial's operations come one at a time.

    Args:
        backend: the searcher's side (the master, or a local searcher).
        trial_id: the trial asking.
        poll_interval: seconds between asks while the searcher has no operation ready.
        sleep: the function used to wait (seconds).
        distributed: the process layout; one process when None.
        own_length: ``False`` (default): the master hands out the operations (≤0.37
            configs with ``searcher.max_length``). Otherwise the trial's code decides its
            length (Determined 0.38) and :meth:`operations` is 0.38's deprecated shim:
            one operation of this many batches (from a deprecated ``max_length``), whose
            completion the master does not need; None: no length configured at all.
    """

    def __init__(
        self,
        backend: Backend,
        trial_id: int,
        *,
        poll_interval: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        distributed: DistributedContext | None = None,
        own_length: int | None | bool = False,
    ) -> None:
        if poll_interval < 0:
            raise ValueError(f"poll_interval must be >= 0 seconds, got {poll_interval}")
        self._backend = backend
        self.trial_id = trial_id
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._dist = distributed or DistributedContext()
        self._last_completed: int | None = None
        self._own_length = own_length
        # The answer the master gave with the last completion: the next ask, saved.
        self._answer: SearcherAnswer | None = None

    def poll(self) -> SearcherAnswer:
        """Ask once: the current operation's length (or None) and whether closed."""
        return self._backend.get_searcher_operation(self.trial_id)

    def operations(
        self,
        searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
        auto_ack: bool = True,
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[SearcherOperation]:
        """Yield the trial's operations until the searcher closes the trial.

        While the searcher has no new operation (``op: null``, or the operation just
        completed is still the current one), it polls every ``poll_interval`` seconds,
        calling ``should_stop`` before each wait; the iteration ends when that returns
        True (for example when the trial is preempted).

        Each operation must be completed (:meth:`SearcherOperation.report_completed`,
        on the chief) before the next one is asked for.

        Args:
            searcher_mode: see :class:`SearcherMode`; with several processes in
                ``WorkersAskChief`` mode every rank must iterate (a collective).
            auto_ack: accepted for compatibility (operations need no acknowledgement).
            should_stop: called on the chief while waiting; True ends the iteration.

        Yields:
            :class:`SearcherOperation` objects.

        When the experiment config has no searcher-driven length (Determined 0.38: no
        ``searcher.max_length``, or ASHA with ``max_time``), this is 0.38's deprecated
        shim: one operation of the configured ``max_length``, or a RuntimeError when
        none is configured.

        Raises:
            TypeError: if ``searcher_mode`` is not a :class:`SearcherMode`.
            RuntimeError: if an operation was not completed before the next iteration,
                a non-chief rank iterates in ``ChiefOnly`` mode, or (0.38) the config
                sets no training length.
        """
        if not isinstance(searcher_mode, SearcherMode):
            raise TypeError(f"searcher_mode must be a SearcherMode, got {searcher_mode!r}")
        chief = self._dist.is_chief
        if searcher_mode is SearcherMode.ChiefOnly and not chief:
            raise RuntimeError("operations() is chief-only in SearcherMode.ChiefOnly")
        if self._own_length is not False:
            yield from self._shim_operations(chief)
            return
        shared = searcher_mode is SearcherMode.WorkersAskChief and self._dist.size > 1
        while True:
            length = self._next_length(should_stop) if chief else None
            if shared:
                length = self._dist.broadcast(length)
            if length is None:
                return
            op = SearcherOperation(self, length, is_chief=chief)
            yield op
            if chief and not op.completed:
                raise RuntimeError(
                    f"searcher operation of length {op.length} was not completed: call "
                    "op.report_completed(metric) before asking for the next operation"
                )
            if not chief:
                self._last_completed = length

    def _shim_operations(self, chief: bool) -> Iterator[SearcherOperation]:
        length = self._own_length
        if length is None:
            raise RuntimeError(
                "core.searcher.operations() has no operation to give: the experiment config "
                "sets no searcher.max_length (deprecated since Determined 0.38). Decide the "
                "training length in your own code (loop for as many batches as you want, "
                "then exit), or set searcher.max_length in the experiment config"
            )
        op = SearcherOperation(self, int(length), is_chief=chief)
        yield op
        if chief and not op.completed:
            raise RuntimeError(
                f"searcher operation of length {op.length} was not completed: call "
                "op.report_completed(metric)"
            )

    def _next_length(self, should_stop: Callable[[], bool] | None) -> int | None:
        """The next operation's length; None when the trial is closed or must stop."""
        while True:
            answer, self._answer = self._answer or self.poll(), None
            if answer.completed:
                return None
            if answer.length is not None and answer.length != self._last_completed:
                return answer.length
            if should_stop is not None and should_stop():
                return None
            self._sleep(self.poll_interval)

    def _progress(self, progress: float) -> None:
        self._backend.report_progress(self.trial_id, progress)

    def _complete(self, length: int, metric: float) -> None:
        if self._own_length is not False:
            logger.info("searcher operation of %d batches completed (metric %s)", length, metric)
            self._last_completed = length
            return
        self._answer = self._backend.complete_operation(self.trial_id, length, metric)
        self._last_completed = length
