"""``pbt``: population-based training (Jaderberg et al., "Population Based Training of
Neural Networks", 2017), with the rules of Determined's removed ``pbt`` searcher
(reference platform §11.2).

``population_size`` trials start with random hyperparameters and each trains
``length_per_round``. When every live member of the population has validated its round:

- after ``num_rounds`` rounds, every member is closed;
- otherwise the members are sorted by their round's metric (best first; ties by request
  id), ``k = int(truncate_fraction * population_size)``; the worst ``k`` are closed, and
  for each of the best ``k`` a clone is created that starts from the parent's latest
  checkpoint with explored hyperparameters and trains ``length_per_round`` (its own
  batch count starts at 0); the others train on to the end of their next round.

A member that ends early (error, cancel) counts as the worst result of its round, is not
cloned and leaves the population. Exploration, per hyperparameter in sorted path order:
with probability ``resample_probability`` the value is drawn again from the
hyperparameter's distribution; otherwise a numeric value is multiplied by ``1 +
perturb_factor`` or ``1 - perturb_factor`` (one draw, 50/50): an int is then rounded up
(increase) or down (decrease), and every value is clamped to its range (a log
hyperparameter to ``[base**minval, base**maxval]``); categorical and constant values are
kept. Every draw comes from the experiment RNG.

Progress: rounds validated by all trials over ``population_size * num_rounds``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dauntless.config import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP, PBTSearcher

from ._base import Searcher, TrialRecord
from ._ops import ExitedReason, Operation, ValidateAfter
from ._space import sample_hparams


def explore_hparams(
    hyperparameters: Mapping[str, Any],
    hparams: Mapping[str, Any],
    resample_probability: float,
    perturb_factor: float,
    rng: np.random.RandomState,
) -> dict[str, Any]:
    """A clone's hyperparameters, explored from its parent's (see the module docs).

    Args:
        hyperparameters: the parsed hyperparameter space.
        hparams: the parent's values (nested dicts).
        resample_probability: probability (0..1) of drawing a value again.
        perturb_factor: relative change (0..1) of a perturbed value.
        rng: the experiment RNG; it is advanced.

    Returns:
        New values (deep copies; the parent's are not changed).
    """
    out: dict[str, Any] = {}
    for name in sorted(hyperparameters):
        hp = hyperparameters[name]
        value: Any = hparams.get(name)
        if isinstance(hp, Mapping):
            out[name] = explore_hparams(hp, value or {}, resample_probability, perturb_factor, rng)
            continue
        if isinstance(hp, ConstHP):
            out[name] = copy.deepcopy(hp.val)
            continue
        if float(rng.random_sample()) < resample_probability:
            out[name] = sample_hparams({name: hp}, rng)[name]
            continue
        if isinstance(hp, CategoricalHP):
            out[name] = copy.deepcopy(value)
            continue
        up = float(rng.random_sample()) < 0.5
        factor = 1.0 + perturb_factor if up else 1.0 - perturb_factor
        if isinstance(hp, IntHP):
            moved = value * factor
            new = math.ceil(moved) if up else math.floor(moved)
            out[name] = int(min(max(new, hp.minval), hp.maxval))
        elif isinstance(hp, LogHP):
            lo, hi = float(hp.base**hp.minval), float(hp.base**hp.maxval)
            out[name] = float(min(max(value * factor, lo), hi))
        elif isinstance(hp, DoubleHP):
            out[name] = float(min(max(value * factor, hp.minval), hp.maxval))
        else:
            out[name] = copy.deepcopy(value)
    return out


class PBTSearch(Searcher):
    """``pbt`` (see the module documentation)."""

    kind = "pbt"
    archivable = False  # its decisions read ended trials' records

    def _setup(self) -> None:
        cfg = self._config.searcher
        if not isinstance(cfg, PBTSearcher):
            raise TypeError(f"{type(self).__name__} needs a pbt searcher config")
        self._cfg = cfg
        self._round = 0
        #: the live members of the population, in creation order
        self._population: list[str] = []
        #: request id -> rounds it has validated
        self._rounds: dict[str, int] = {}
        #: request id -> its result of the current round (smaller is better)
        self._reports: dict[str, float] = {}
        self._done = False

    def _round_length(self, trial: TrialRecord) -> int:
        return self._batches(self._cfg.length_per_round, trial.hparams)

    def _first_target(self, trial: TrialRecord) -> int | None:
        return self._round_length(trial)

    def _new_member(self, hparams: dict[str, Any] | None = None, parent: str | None = None):
        op = self._create(hparams=hparams, parent=parent)
        self._population.append(op.request_id)
        self._rounds[op.request_id] = 0
        return op

    def _initial(self) -> list[Operation]:
        return [self._new_member() for _ in range(self._cfg.population_size)]

    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        self._rounds[trial.request_id] += 1
        self._reports[trial.request_id] = value
        return self._maybe_next_round()

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        rid = trial.request_id
        if rid in self._population and rid not in self._reports:
            self._reports[rid] = math.inf  # the worst result of this round
        return self._maybe_next_round()

    def _maybe_next_round(self) -> list[Operation]:
        live = [rid for rid in self._population if not self._trials[rid].ended]
        waiting = [rid for rid in live if rid not in self._reports]
        if self._done or waiting or not self._population:
            return []
        members = list(self._population)
        ranked = sorted(members, key=lambda rid: (self._reports[rid], rid))
        self._round += 1
        self._reports = {}
        ops: list[Operation] = []
        if self._round >= self._cfg.num_rounds:
            self._done = True
            self._population = []
            return [self._close(self._trials[rid]) for rid in ranked if rid in live]
        k = int(self._cfg.replace_function.truncate_fraction * self._cfg.population_size)
        k = min(k, len(ranked) // 2)
        worst = set(ranked[len(ranked) - k :]) if k else set()
        best = [rid for rid in ranked[:k] if rid in live]
        survivors = [rid for rid in members if rid in live and rid not in worst]
        self._population = survivors
        for rid in ranked:
            if rid in worst and rid in live:
                ops.append(self._close(self._trials[rid]))
        explore = self._cfg.explore_function
        for rid in best:
            hparams = explore_hparams(
                self._config.hyperparameters,
                self._trials[rid].hparams,
                explore.resample_probability,
                explore.perturb_factor,
                self._rng,
            )
            ops.append(self._new_member(hparams=hparams, parent=rid))
        for rid in survivors:
            trial = self._trials[rid]
            if trial.created and not trial.ended:
                trial.target = self._round_length(trial) * (self._rounds[rid] + 1)
                ops.append(ValidateAfter(rid, trial.target))
        return ops

    def _can_reopen(self) -> bool:
        return False

    def _creating_done(self) -> bool:
        return self._done or not any(not self._trials[r].ended for r in self._population)

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        total = self._cfg.population_size * self._cfg.num_rounds
        return min(sum(self._rounds.values()) / total, 1.0)

    def lineage(self) -> dict[str, str | None]:
        """Request id -> its parent's request id (None for the first population)."""
        return {rid: t.parent for rid, t in self._trials.items()}

    def _method_state(self) -> dict[str, Any]:
        return {
            "round": self._round,
            "population": list(self._population),
            "rounds": dict(self._rounds),
            "reports": {k: (v if math.isfinite(v) else "inf") for k, v in self._reports.items()},
            "done": self._done,
        }

    def _load_method_state(self, state: dict[str, Any]) -> None:
        self._round = int(state["round"])
        self._population = [str(r) for r in state["population"]]
        self._rounds = {str(k): int(v) for k, v in state["rounds"].items()}
        self._reports = {str(k): float(v) for k, v in state["reports"].items()}
        self._done = bool(state["done"])
