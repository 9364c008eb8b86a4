"""The searchers that ignore metrics: ``single``, ``random`` and ``grid``.

With ``searcher.max_length`` (deprecated in 0.38) each trial gets one
``ValidateAfter(max_length)`` and is closed after that validation; without it a trial
trains as long as its own code says and is done when it exits. A trial that ends frees
its place for the next one (Determined's rules, reference §2.2 and §2.3).
"""

from __future__ import annotations

from typing import Any

from dauntless.config import GridSearcher, RandomSearcher, SingleSearcher

from ._base import Searcher, TrialRecord
from ._ops import ExitedReason, Operation
from ._space import GridSpace


def initial_count(total: int, max_concurrent_trials: int) -> int:
    """How many trials to create at the start: all of ``total`` when
    ``max_concurrent_trials`` is 0 (unlimited), else at most ``max_concurrent_trials``."""
    return total if max_concurrent_trials == 0 else min(total, max_concurrent_trials)


class _OneLength(Searcher):
    """Shared by single, random and grid: one ValidateAfter of ``searcher.max_length``,
    or none when the config has no ``max_length`` (0.38: the trial's code decides how long
    it trains, and the trial is done when it exits)."""

    def _first_target(self, trial: TrialRecord) -> int | None:
        length = getattr(self._config.searcher, "max_length", None)
        if length is None:
            return None
        return self._batches(length, trial.hparams)

    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        return [self._close(trial)]


class RandomSearch(_OneLength):
    """``random``: ``max_trials`` trials with sampled hyperparameters.

    At most ``max_concurrent_trials`` (0: all) exist at once; each trial that ends is
    followed by a new one while fewer than ``max_trials`` trials were created. Trials that
    exit with ``INVALID_HP`` do not count, so each gets a replacement. Progress is the
    share of ``max_trials`` that have ended (invalid ones excluded).
    """

    kind = "random"

    def _setup(self) -> None:
        cfg = self._config.searcher
        if isinstance(cfg, SingleSearcher):
            self._max_trials, self._max_concurrent = 1, 1
        elif isinstance(cfg, RandomSearcher):
            self._max_trials, self._max_concurrent = cfg.max_trials, cfg.max_concurrent_trials
        else:
            raise TypeError(f"{type(self).__name__} needs a random or single searcher config")

    def _initial(self) -> list[Operation]:
        n = initial_count(self._max_trials, self._max_concurrent)
        return [self._create() for _ in range(n)]

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        if self._count_valid() < self._max_trials:
            return [self._create()]
        return []

    def _creating_done(self) -> bool:
        return self._count_valid() >= self._max_trials

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        done = self._n_ended - self._n_exits[ExitedReason.INVALID_HP]
        return min(done / self._max_trials, 1.0)


class SingleSearch(RandomSearch):
    """``single``: one trial trained to ``max_length`` (random search with one trial);
    a trial that exits with ``INVALID_HP`` is replaced."""

    kind = "single"


class GridSearch(_OneLength):
    """``grid``: one trial per point of the hyperparameter grid (:class:`GridSpace`).

    Points are handed out from the last one backwards, as Determined does (reference
    §2.3); at most ``max_concurrent_trials`` (0: all) exist at once, and each trial that
    ends is followed by the next point. Points whose trial exits with ``INVALID_HP`` are
    not retried. Progress is the share of points whose trial has ended.

    Raises:
        SearcherConfigError: at construction, for an int, double or log hyperparameter
            without ``count``.
    """

    kind = "grid"

    def _setup(self) -> None:
        cfg = self._config.searcher
        if not isinstance(cfg, GridSearcher):
            raise TypeError(f"{type(self).__name__} needs a grid searcher config")
        self._space = GridSpace(self._config.hyperparameters)
        self._max_concurrent = cfg.max_concurrent_trials

    @property
    def grid_size(self) -> int:
        """The number of grid points (= trials)."""
        return self._space.size

    def _next(self) -> Operation:
        index = self._space.size - 1 - self._n_created
        return self._create(hparams=self._space.point(index))

    def _initial(self) -> list[Operation]:
        n = initial_count(self._space.size, self._max_concurrent)
        return [self._next() for _ in range(n)]

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        return [self._next()] if self._n_created < self._space.size else []

    def _creating_done(self) -> bool:
        return self._n_created >= self._space.size

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        return min(self._n_ended / self._space.size, 1.0)

    def _method_state(self) -> dict[str, Any]:
        return {"grid_size": self._space.size}

    def _load_method_state(self, state: dict[str, Any]) -> None:
        if state.get("grid_size") != self._space.size:
            raise ValueError(
                f"the snapshot's grid has {state.get('grid_size')} points but the config's "
                f"has {self._space.size}; restore with the experiment's own config"
            )
