"""``adaptive_asha``: asynchronous successive halving over several brackets.

Algorithm: Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys
2020), in the multi-bracket layout of Determined's ``adaptive_asha`` (reference §2.4; the
bracket math is in :mod:`._asha_math`).

Promotion rule: the ≤0.37 ``stop_once`` rule of reference §2.5, because it is the one
that matches "asynchronous promotion of the top 1/divisor of each rung, the others stopped
at their rung". When a trial validates at its rung length, its result is inserted into
that rung's results (ascending, after equal values, so ties go to the earlier report).
If it is among the first ``max(int(n / divisor), 1)`` of the ``n`` results the rung now
holds, it is promoted at once (``ValidateAfter`` of the next rung's length); otherwise it
is closed for good. A trial at the top rung is closed: it is done. The other ≤0.37 rule
(``stop_once: false``) keeps unpromoted trials waiting to be promoted later; it is not
used, whatever ``stop_once`` says. A validation past several rung lengths is checked
against each rung in turn (as in 0.38).

Each bracket creates its share of ``max_trials`` and runs at most its share of
``max_concurrent_trials``: when one of its trials ends (closed, errored, canceled, or
exited on its own), a new one takes its place while the bracket's budget lasts. A trial
that errors or is canceled counts as the worst result at its rung; one that exits with
``INVALID_HP`` has its results removed and does not count against the budget.

Two modes, chosen by the config:

- ``max_time`` + ``time_metric`` (Determined 0.38, reference §2.4 step 7): the trials
  train as long as their own code says; each validation they report (the whole metrics
  dict) is checked with :meth:`on_validation_metrics`. ``time_metric`` is any numeric
  validation metric (``batches``, ``epochs``, ``samples``, a user metric) and the rung
  thresholds are in its unit. From the trial's current rung, while the reported time has
  reached the rung's threshold, its value is inserted into the rung (before equal values)
  and the trial moves up if it is among the first ``max(int(n / divisor), 1)``; otherwise,
  or at the top rung, it is stopped (``Close``; the master stops it through the
  preemption path) and a replacement is created while the bracket's budget lasts. A
  trial that exits on its own before it is stopped gets no replacement (as in 0.38).
- only ``max_length`` (≤0.37, deprecated): the searcher tells each trial how far to
  train (``ValidateAfter``), with the promotion rule described above; ``max_length`` in
  records or epochs gives rungs in that unit, converted to batches per trial through its
  ``global_batch_size``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from dauntless.config import AdaptiveASHASearcher, AsyncHalvingSearcher, Length, searcher_length

from ._asha_math import (
    BracketPlan,
    insert_result,
    plan_brackets,
    promotion_quota,
    rung_lengths,
)
from ._base import Searcher, TrialRecord
from ._errors import SearcherConfigError
from ._ops import ExitedReason, Operation, ValidateAfter


@dataclass
class _Bracket:
    plan: BracketPlan
    lengths: list[Length]
    values: list[list[float]] = field(default_factory=list)
    ids: list[list[str]] = field(default_factory=list)
    created: int = 0
    invalid: int = 0
    ended: int = 0

    def __post_init__(self) -> None:
        self.values = [[] for _ in range(self.plan.rungs)]
        self.ids = [[] for _ in range(self.plan.rungs)]

    def insert(self, rung: int, value: float, request_id: str, before_equal: bool = False) -> int:
        if before_equal:
            index = bisect.bisect_left(self.values[rung], value)
            self.values[rung].insert(index, value)
        else:
            index = insert_result(self.values[rung], value)
        self.ids[rung].insert(index, request_id)
        return index

    def remove(self, request_id: str) -> None:
        for rung in range(self.plan.rungs):
            keep = [i for i, rid in enumerate(self.ids[rung]) if rid != request_id]
            self.values[rung] = [self.values[rung][i] for i in keep]
            self.ids[rung] = [self.ids[rung][i] for i in keep]


def _float_to_json(x: float) -> float | str:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _float_from_json(x: float | str) -> float:
    return float(x)


def asha_length(config: AdaptiveASHASearcher | AsyncHalvingSearcher) -> tuple[str, int]:
    """The full training length of an ASHA search: ``(unit, value)``.

    With ``max_time`` the unit is the ``time_metric`` (any metric name, 0.38 mode); else
    the deprecated ``max_length``'s unit (``batches``, ``records`` or ``epochs``).

    Raises:
        SearcherConfigError: for a length < 1 or an empty time metric.
    """
    if config.max_time is not None:
        if not config.time_metric:
            raise SearcherConfigError(
                "searcher.time_metric", "name the validation metric that measures training time"
            )
        return str(config.time_metric), config.max_time
    if config.max_length is None or config.max_length.value < 1:
        raise SearcherConfigError(
            "searcher.max_length", "adaptive_asha needs a training length of at least 1"
        )
    return config.max_length.unit.value, config.max_length.value


def _real(metrics: dict[str, Any], name: str, field: str) -> float:
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(
            f"the trial's validation metrics have no numeric {name!r} ({field}); got "
            f"{value!r}. Report it in every validation (e.g. "
            f"core.train.report_validation_metrics(steps, {{{name!r}: ...}}))"
        )
    return float(value)


class AdaptiveASHASearch(Searcher):
    """``adaptive_asha`` (see the module documentation for the rules).

    Raises:
        SearcherConfigError: at construction, for an unsupported ``time_metric`` or a
            bracket layout that cannot be built (the message names the field).
    """

    kind = "adaptive_asha"

    def _setup(self) -> None:
        cfg = self._config.searcher
        if not isinstance(cfg, (AdaptiveASHASearcher, AsyncHalvingSearcher)):
            raise TypeError(f"{type(self).__name__} needs an adaptive_asha searcher config")
        unit, total = asha_length(cfg)
        self._metric_mode = searcher_length(self._config) is None
        self._time_metric = unit
        plans = self._plans(cfg, total)
        self._divisor = cfg.divisor
        lengths_unit = "batches" if self._metric_mode else unit
        self._brackets = [
            _Bracket(plan, [Length(**{lengths_unit: n}) for n in plan.lengths]) for plan in plans
        ]

    def _plans(self, cfg: Any, total: int) -> list[BracketPlan]:
        try:
            return plan_brackets(
                max_time=total,
                max_trials=cfg.max_trials,
                divisor=cfg.divisor,
                mode=cfg.mode,
                max_rungs=cfg.max_rungs,
                bracket_rungs_override=list(cfg.bracket_rungs),
                max_concurrent_trials=cfg.max_concurrent_trials,
            )
        except ValueError as exc:
            raise SearcherConfigError("searcher", str(exc)) from None

    @property
    def metric_mode(self) -> bool:
        """True in the 0.38 mode (``max_time``): trials decide their length and the
        searcher stops them from their validation metrics."""
        return self._metric_mode

    @property
    def brackets(self) -> list[BracketPlan]:
        """The bracket layout, deepest first."""
        return [b.plan for b in self._brackets]

    def _target(self, trial: TrialRecord, rung: int) -> int:
        return self._batches(self._brackets[trial.group].lengths[rung], trial.hparams)

    def _first_target(self, trial: TrialRecord) -> int | None:
        return None if self._metric_mode else self._target(trial, 0)

    def validation_times(self, request_id: str) -> list[float]:
        trial = self._get(request_id)
        if not self._metric_mode:
            return []
        return [float(x) for x in self._brackets[trial.group].plan.lengths]

    def _on_metrics(self, trial: TrialRecord, metrics: dict[str, Any]) -> list[Operation]:
        if not self._metric_mode:
            return []
        cfg = self._config.searcher
        raw = _real(metrics, cfg.metric, "searcher.metric")
        time = _real(metrics, self._time_metric, "searcher.time_metric")
        value = raw if cfg.smaller_is_better else -raw
        bracket = self._brackets[trial.group]
        stop = False
        while time >= bracket.plan.lengths[trial.rung]:
            rung = trial.rung
            index = bracket.insert(rung, value, trial.request_id, before_equal=True)
            self._observe(trial, rung, value)
            if rung == bracket.plan.rungs - 1:
                stop = True
                break
            if index >= promotion_quota(len(bracket.values[rung]), self._divisor):
                stop = True
                break
            trial.rung = rung + 1
        if not stop:
            return []
        ops: list[Operation] = [self._close(trial)]
        if bracket.created - bracket.invalid < bracket.plan.trials:
            ops.append(self._create_in(trial.group))
        return ops

    def _observe(self, trial: TrialRecord, rung: int, value: float) -> None:
        """A result entered a rung (``value``: smaller is better); a model-based sampler
        (``searcher.sampler``) learns it. Nothing by default."""

    def _create_in(self, group: int) -> Operation:
        self._brackets[group].created += 1
        return self._create(group=group)

    def _initial(self) -> list[Operation]:
        ops: list[Operation] = []
        for group, bracket in enumerate(self._brackets):
            n = min(bracket.plan.max_concurrent, bracket.plan.trials)
            ops.extend(self._create_in(group) for _ in range(n))
        return ops

    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        bracket = self._brackets[trial.group]
        while True:
            rung = trial.rung
            index = bracket.insert(rung, value, trial.request_id)
            self._observe(trial, rung, value)
            if rung == bracket.plan.rungs - 1:
                return [self._close(trial)]
            if index >= promotion_quota(len(bracket.values[rung]), self._divisor):
                return [self._close(trial)]
            trial.rung = rung + 1
            trial.target = self._target(trial, trial.rung)
            if length < trial.target:
                return [ValidateAfter(trial.request_id, trial.target)]

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        bracket = self._brackets[trial.group]
        bracket.ended += 1
        if self._metric_mode and reason is None:
            # Stopped by the searcher (its replacement came with the stop), or exited on
            # its own before being stopped (no replacement, as in 0.38).
            return []
        if reason is ExitedReason.INVALID_HP:
            bracket.invalid += 1
            bracket.remove(trial.request_id)
        elif reason is not None:
            bracket.insert(trial.rung, math.inf, trial.request_id)
        if bracket.created - bracket.invalid < bracket.plan.trials:
            return [self._create_in(trial.group)]
        return []

    def _reopened(self, trial: TrialRecord, reason: ExitedReason | None) -> int | None:
        bracket = self._brackets[trial.group]
        bracket.ended -= 1
        if reason is ExitedReason.INVALID_HP:
            bracket.invalid -= 1
        elif reason is not None:
            # Drop the +inf placeholder of its error or cancel at its current rung.
            rung = trial.rung
            keep = [i for i, rid in enumerate(bracket.ids[rung]) if rid != trial.request_id]
            bracket.values[rung] = [bracket.values[rung][i] for i in keep]
            bracket.ids[rung] = [bracket.ids[rung][i] for i in keep]
        return None if self._metric_mode else self._target(trial, trial.rung)

    def _creating_done(self) -> bool:
        if self._metric_mode:
            # A bracket with no live trial gets no more events that could create one.
            return all(
                b.created - b.invalid >= b.plan.trials or b.created == b.ended
                for b in self._brackets
            )
        return all(b.created - b.invalid >= b.plan.trials for b in self._brackets)

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        if self._metric_mode:
            # 0.38 (reference §2.4 step 8): rung-0 results over 1.2 N until rung 0 holds
            # N results, then the share of ended trials; the mean over brackets.
            shares = []
            for b in self._brackets:
                n = b.plan.trials
                if len(b.values[0]) < n:
                    shares.append(min(len(b.values[0]) / (1.2 * n), 1.0))
                else:
                    shares.append(min((b.ended - b.invalid) / n, 1.0))
            return sum(shares) / len(shares)
        shares = [min((b.ended - b.invalid) / b.plan.trials, 1.0) for b in self._brackets]
        return sum(shares) / len(shares)

    def rung_results(self, group: int, rung: int) -> list[tuple[float, str]]:
        """A rung's results so far, best first: ``(value, request_id)``, where value is
        the metric negated if larger is better, and ``inf`` for an errored trial.

        Raises:
            IndexError: for a bracket or rung that does not exist.
        """
        bracket = self._brackets[group]
        return list(zip(bracket.values[rung], bracket.ids[rung], strict=True))

    def _method_state(self) -> dict[str, Any]:
        return {
            "brackets": [
                {
                    "plan": [
                        b.plan.rungs,
                        b.plan.trials,
                        b.plan.max_concurrent,
                        list(b.plan.lengths),
                    ],
                    "rungs": [
                        [[_float_to_json(v), rid] for v, rid in zip(vals, ids, strict=True)]
                        for vals, ids in zip(b.values, b.ids, strict=True)
                    ],
                }
                for b in self._brackets
            ]
        }

    def _load_method_state(self, state: dict[str, Any]) -> None:
        saved = state["brackets"]
        mine = [
            [b.plan.rungs, b.plan.trials, b.plan.max_concurrent, list(b.plan.lengths)]
            for b in self._brackets
        ]
        if [s["plan"] for s in saved] != mine:
            raise ValueError(
                "the snapshot's ASHA brackets do not match the config's "
                f"({[s['plan'] for s in saved]} vs {mine}); restore with the experiment's "
                "own config"
            )
        for bracket, data in zip(self._brackets, saved, strict=True):
            bracket.values = [[_float_from_json(v) for v, _ in rung] for rung in data["rungs"]]
            bracket.ids = [[rid for _, rid in rung] for rung in data["rungs"]]
        for trial in self._trials.values():
            bracket = self._brackets[trial.group]
            bracket.created += 1
            if trial.ended:
                bracket.ended += 1
            if trial.exit is ExitedReason.INVALID_HP:
                bracket.invalid += 1
        for group, bracket in enumerate(self._brackets):
            ended, invalid = self._archived_in_group(group)
            bracket.created += ended
            bracket.ended += ended
            bracket.invalid += invalid


class AsyncHalvingSearch(AdaptiveASHASearch):
    """``async_halving``: asynchronous successive halving in one bracket.

    ``num_rungs`` rungs at ``max(int(T / D**(num_rungs-1-i)), 1)`` (T: ``max_time`` or
    the deprecated ``max_length``), ``max_trials`` trials, at most
    ``max_concurrent_trials`` at once (0: all of them). Decisions as in
    :class:`AdaptiveASHASearch`, in either mode.
    """

    kind = "async_halving"

    def _plans(self, cfg: Any, total: int) -> list[BracketPlan]:
        concurrent = cfg.max_concurrent_trials or cfg.max_trials
        lengths = tuple(rung_lengths(total, cfg.divisor, cfg.num_rungs))
        return [BracketPlan(cfg.num_rungs, cfg.max_trials, concurrent, lengths)]
