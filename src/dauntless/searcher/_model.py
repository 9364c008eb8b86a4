"""Model-based searchers: Optuna's TPE, CMA-ES, Gaussian-process and NSGA-II samplers,
alone or proposing into ASHA's brackets (BOHB-style).

``tpe`` / ``cmaes`` / ``gp`` / ``nsgaii`` run ``max_trials`` trials, at most
``max_concurrent_trials`` at once (0: all), like ``random``; each trial's
hyperparameters come from the sampler, which has learned the results of every trial
that ended before it was asked (with ``constant_liar``, TPE also accounts for the trials
still running). With ``searcher.max_length`` a trial gets one ``ValidateAfter`` and its
result is that validation; without it (Determined 0.38) the trial trains as long as its
own code says and its result is the last validation it reported. ``searcher.metrics``
(several objectives) makes TPE, GP and NSGA-II multi-objective: each trial's result is
the vector of those metrics, and the master passes the whole validation dict.

``adaptive_asha`` / ``async_halving`` with ``sampler: tpe|cmaes|gp`` keep every ASHA
decision and draw each new trial's hyperparameters from the sampler instead of at random
(Falkner et al., "BOHB", ICML 2018, in Optuna's form): each rung result is an intermediate
value at step = the rung's length; a trial that finished the top rung is COMPLETE with its
value there, one that failed FAIL. A trial ASHA stopped below the top rung is told
(:func:`stopped_rule`, recorded in the snapshot as ``sampler.stopped``): to TPE,
COMPLETE with the value of the last rung it reached; to CMA-ES and GP, PRUNED, as
Optuna's pruners leave it.

Why TPE's differs. Told PRUNED, stopped trials are ranked by Optuna's TPE by the rung
they reached first and their value there second (its ``_split_trials``), behind every
COMPLETE one, so its "good" group (about the best tenth) is the trials ASHA carried
furthest. ASHA promotes the first result of every rung, so those are largely the
search's first trials, drawn before the sampler learned anything: in 64-trial searches
of the issue 35 benchmark (Hartmann-6, seeds 100-109) trials 0, 1 and 2 (the first of
each bracket) reached the top rung on every seed and 4 to 7 of the first 10 did. Told
COMPLETE with their latest value, all trials are ranked by value, whatever rung it came
from. On that benchmark (``benchmarks/search_efficiency.py --suite model``, selection
seeds 100-130, not the 0-9 it reports on), batches until a full-length result reached
random search's best of 64 (256-trial searches, the same ASHA settings on both sides):
ASHA+TPE / ASHA median 0.73 against 0.85 with PRUNED on Hartmann-6 (this rule faster
on 12 seeds, slower on 2, equal on 17: the same point was hit before the sampler
mattered) and 1.00 against 1.00 on Branin (faster on 13, slower on 6); to ASHA's own
best in 64-trial searches, faster on 9 and slower on 7 seeds (Hartmann-6), 6 and 4
(Branin). The value is taken as it is: where low rungs read systematically worse (a
real learning curve), trials stopped early still rank behind those carried further, as
they did told PRUNED (the digits MLP: the same batches to either target with both rules
on 6 of 6 seeds, 100-105).
Tried on fewer seeds and not adopted (seeds won / lost to random's best of 64 against
the rule compared with): a stopped trial's rank in its rung scaled to its bracket's
first rung, an estimate of its quantile over all trials (against PRUNED: 1 / 3 on
Hartmann-6, seeds 100-108; 8 / 5 on Branin, seeds 100-115, median 1.10 against 1.01);
with this rule, ``constant_liar: false`` (2 / 4 on Hartmann-6, seeds 100-111; 8 / 10 on
Branin, seeds 100-121), ``n_startup_trials: 5`` (2 / 9; 10 / 6), ``prior_weight: 2``
(2 / 3) and ``multivariate: false`` (1 / 7) (Hartmann-6, seeds 100-111). BOHB's own rule
(section 4: fit only on the results of the largest rung length that has enough of them,
here Optuna's ``n_startup_trials``) was tried earlier against PRUNED feeding and was no
better: over 40 seeds (100-139) it beat it on 15 seeds and lost on 12 (Branin), won 15
and lost 23 (Hartmann-6). CMA-ES and GP keep PRUNED for want of evidence either way.
It was tried again against this rule in full (commit c3f06d9, reverted): a third of the
new trials at random (BOHB's rho, HpBandSter's ``random_fraction`` 1/3), the rest from
TPE fit only on the largest rung length with at least d + 2 results (one in-memory study
per length, each draw seeded from the sampler seed and the trial number, so it restored
exactly). Batches to random's best of 64, selection seeds 100-124 (Branin) and 100-114
(Hartmann-6), seeds it won / lost against this rule: 5 / 14 (Branin; 14 of 25 searches
never reached the target, 6 with this rule) and 3 / 11 (Hartmann-6; ASHA+TPE / ASHA
median 1.38 against this rule's 0.62). No variant did better than this rule: without the
random third 3 / 16 and 2 / 12; d + 1 results 4 / 15 and 4 / 10; 16 results 7 / 14 and
4 / 10; BOHB's 15% good fraction as TPE's ``gamma`` (alone, or with at least
d + 1 good points; both together) 2 / 2 and 1 / 3 on the 4 (Branin) and 2 (Hartmann-6)
seeds run.
Why, here: ASHA promotes the first result of every rung, so the top rung has d + 2
results after the brackets' first few (random) trials, then gains a handful in the next
200 (Branin seed 100: 12 top-rung results by trial 64 and 15 at the end, against 145
first-rung results by trial 224), and TPE is fit on the same few points for most of the
search while the lower rungs' results are thrown away. BOHB's Hyperband fills its
largest budget from a bracket that starts configurations there; every bracket of
Determined's ASHA starts below the top rung.
Tried next and not adopted (prototypes outside the searcher, not committed; ASHA+TPE /
ASHA is the batches to random's best of 64 of 256-trial searches, ASHA in Determined's
standard mode; won / lost: seeds where the variant needed fewer / more batches than this
rule):

- TPE's ``n_ei_candidates`` (Optuna's 24; more candidates exploit harder), seeds
  100-139: for ``tpe`` alone 64 won 18 / lost 14 (Branin, trials / random's 64 median
  0.375 against 0.375) and 13 / 17 (Hartmann-6, 0.273 against 0.250); 128 won 13 / 17
  and 14 / 15. For ASHA+TPE 64 won 8 / 21 and 10 / 18, 128 12 / 18 and 10 / 18; fewer
  (8, seeds 100-124) 10 / 10 and 4 / 13. ``n_startup_trials: 20`` 10 / 11 and 4 / 13.
  Optuna's 24 stays. For ASHA+TPE also ``prior_weight: 0.5`` (seeds 100-139): 17 / 13
  (Branin, median 1.00 against 1.00) and 9 / 12 (Hartmann-6, 0.79 against 0.82);
  ``consider_endpoints: true`` (seeds 100-124): 7 / 14 and 5 / 10.
- A bracket that starts at the top rung (Hyperband's; ``bracket_rungs: [4, 3, 2, 1]``
  for ASHA+TPE only), seeds 100-139: 10 / 21 (Branin; ASHA+TPE / ASHA median 1.20
  against 1.00) and 6 / 30 (Hartmann-6, 1.08 against 0.82): its trials are drawn by TPE
  but each costs the full 64 batches. With random sampling the same layout gave 1.02
  and 1.44 against standard ASHA. ``[4, 3]`` (seeds 100-124): 8 / 10 and 15 / 6,
  median 1.00 and 0.99 against 1.00 and 0.86.
- A top-rung model over the lower rungs: a stopped trial told its rung value corrected
  by the mean difference (top minus that rung) over the trials that reached both, once
  3 such pairs exist (seeds 100-124): 7 / 9 (Branin, median 1.06 against 1.00) and
  2 / 7 (Hartmann-6, 0.98 against 0.86; 2 of 25 searches never reached the target,
  none with this rule); told instead the linear regression of the top value on that
  rung's value over the same pairs (slope clipped to [0, 1], which shrinks lucky
  low-rung values toward the mean): 2 / 8 on Hartmann-6 (seeds 100-125, median 1.00
  against 0.91; 2 never reached). Trials stopped at the first rung told FAIL (so TPE
  learns from 4 batches and more): 5 / 13 and 6 / 11. Every rule tried that weighs the
  lower rungs' results less than their raw value (PRUNED, BOHB's, these three) lost to
  this rule.
- Measured, seeds 100-139 (this rule / ASHA with random sampling): full-length results
  before the first that reached the target, median 9.5 / 8 (Branin) and 7 / 8.5
  (Hartmann-6), at a median 80 / 87 and 70 / 81 batches per full-length result;
  ASHA+TPE needed more batches than ASHA on 19 (Branin) and 17 (Hartmann-6) of 40
  seeds. The batches follow the number of full-length results needed, and the sampler
  does not cut it by half: ``tpe`` alone needs a median 24 (Branin) and 16 (Hartmann-6)
  full-length trials to reach the target, and a 256-trial ASHA search has only 16 to 24
  full-length results in all (Branin searches that never reached it).
- ASHA's mode, not the sampler, moves the figure on Hartmann-6: ``mode: aggressive``
  (one bracket of 4 rungs, seeds 100-124) gives 0.44 with TPE and 0.45 with random
  sampling, both against standard-mode ASHA; within that mode TPE / random is 1.12
  [0.78, 1.54] (TPE faster on 10 seeds, slower on 15) on Hartmann-6 and 1.00 [0.05,
  1.00] on Branin (12 / 7; 9 TPE and 16 random searches of 25 never reached the target).
  The issue's measure keeps the same ASHA settings on both sides, so this is not a gain
  of the sampler.

State: the sampler's seed (drawn from the experiment RNG when the search starts) and the
ordered log of every ask, report and tell (:class:`~._optuna_model.OptunaModel`), so a
restored searcher proposes exactly what the uninterrupted one would.
"""

from __future__ import annotations

import math
from typing import Any

from dauntless.config import SearchMetric

from ._asha import AdaptiveASHASearch, AsyncHalvingSearch
from ._base import Searcher, TrialRecord
from ._basic import initial_count
from ._ops import Create, ExitedReason, Operation
from ._optuna_model import OptunaModel, SpaceMap, import_optuna, sampler_defaults
from ._rng import draw_trial_seed


class _ModelState:
    """The sampler model of a search and the map of request ids to its trial numbers."""

    def __init__(self, sampler: str, options: dict[str, Any], objectives: list[SearchMetric]):
        import_optuna(sampler=sampler)  # refuse at create when Optuna is missing
        self.sampler = sampler
        #: the config's sampler_options, as written
        self.options = options
        #: what a new search's sampler is built with (the config's plus our defaults)
        self.effective = sampler_defaults(sampler, options, len(objectives))
        self.objectives = objectives
        self.model: OptunaModel | None = None
        self.numbers: dict[str, int] = {}
        self.told: set[str] = set()

    def start(self, seed: int, space: SpaceMap) -> None:
        self.model = OptunaModel(self.sampler, self.effective, seed, self.objectives, space)

    def get(self) -> OptunaModel:
        if self.model is None:
            raise RuntimeError("the search has not started (initial_operations)")
        return self.model

    def tell(self, request_id: str, state: str, values: list[float] | None = None) -> None:
        if request_id in self.told or request_id not in self.numbers:
            return
        self.told.add(request_id)
        self.get().tell(self.numbers[request_id], state, values)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": None if self.model is None else self.model.to_json(),
            "numbers": dict(self.numbers),
            "told": sorted(self.told),
        }

    def load(self, state: dict[str, Any], space: SpaceMap) -> None:
        saved = state["model"]
        if saved is not None:
            if saved["sampler"] != self.sampler:
                raise ValueError(
                    f"the snapshot's sampler is {saved['sampler']!r}, the config's "
                    f"{self.sampler!r}; restore with the experiment's own config"
                )
            # A snapshot made before the options were recorded was built with the
            # config's options alone: replay with those, so it continues exactly.
            options = saved["options"] if "options" in saved else self.options
            self.model = OptunaModel(
                self.sampler, options, int(saved["seed"]), self.objectives, space, saved["log"]
            )
        self.numbers = {str(k): int(v) for k, v in state["numbers"].items()}
        self.told = set(state["told"])


def objective_values(
    objectives: list[SearchMetric], metrics: dict[str, Any] | None, metric: float
) -> list[float]:
    """The raw value of each objective: ``metric`` for a single objective, else read
    from the validation ``metrics`` dict.

    Raises:
        ValueError: an objective is missing from ``metrics`` or not a real number (the
            message names it).
    """
    if len(objectives) == 1 and metrics is None:
        return [float(metric)]
    out = []
    for o in objectives:
        value = (metrics or {}).get(o.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"searcher.metrics: the validation metrics have no numeric {o.name!r} "
                f"(got {value!r}); report every objective in each validation"
            )
        out.append(float(value))
    return out


class ModelSearch(Searcher):
    """``tpe``, ``cmaes``, ``gp``, ``nsgaii`` (see the module documentation).

    Raises:
        SearcherConfigError: at construction, when Optuna (or the sampler's own
            dependency) is not installed, naming ``searcher.name``.
    """

    kind = "tpe"

    def _setup(self) -> None:
        cfg: Any = self._config.searcher
        self._max_trials = int(cfg.max_trials)
        self._max_concurrent = int(cfg.max_concurrent_trials)
        self._objectives: list[SearchMetric] = cfg.objectives()
        self._space = SpaceMap(self._config.hyperparameters)
        self._state = _ModelState(cfg.name, dict(cfg.sampler_options), self._objectives)
        #: request id -> the raw objective values of its latest validation (None: NaN)
        self._latest: dict[str, list[float] | None] = {}

    @property
    def wants_validation_metrics(self) -> bool:  # type: ignore[override]
        return len(self._objectives) > 1

    def _propose(self) -> Create:
        number, hparams = self._state.get().ask()
        op = self._create(hparams=hparams)
        self._state.numbers[op.request_id] = number
        return op

    def _initial(self) -> list[Operation]:
        self._state.start(draw_trial_seed(self._rng), self._space)
        return [
            self._propose() for _ in range(initial_count(self._max_trials, self._max_concurrent))
        ]

    def _first_target(self, trial: TrialRecord) -> int | None:
        length = getattr(self._config.searcher, "max_length", None)
        return None if length is None else self._batches(length, trial.hparams)

    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        values = objective_values(self._objectives, self._event_metrics, self._event_raw)
        self._note(trial.request_id, values)
        self._state.tell(trial.request_id, "complete", values)
        return [self._close(trial)]

    def _note(self, request_id: str, values: list[float]) -> None:
        """Keep a trial's latest result; one with a NaN or infinite value is a failure."""
        finite = all(math.isfinite(v) for v in values)
        self._latest[request_id] = values if finite else None

    def _on_metrics(self, trial: TrialRecord, metrics: dict[str, Any]) -> list[Operation]:
        if trial.target is not None:
            return []
        first = metrics.get(self._objectives[0].name)
        if len(self._objectives) == 1:
            if isinstance(first, bool) or not isinstance(first, (int, float)):
                raise ValueError(
                    f"searcher.metric: the validation metrics have no numeric "
                    f"{self._objectives[0].name!r} (got {first!r})"
                )
            self._note(trial.request_id, [float(first)])
        else:
            self._note(trial.request_id, objective_values(self._objectives, metrics, math.nan))
        return []

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        latest = self._latest.get(trial.request_id)
        if reason is None and latest is not None:
            self._state.tell(trial.request_id, "complete", latest)
        else:
            self._state.tell(trial.request_id, "fail")
        if self._count_valid() < self._max_trials:
            return [self._propose()]
        return []

    def _can_reopen(self) -> bool:
        return False

    def _creating_done(self) -> bool:
        return self._count_valid() >= self._max_trials

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        done = self._n_ended - self._n_exits[ExitedReason.INVALID_HP]
        return min(done / self._max_trials, 1.0)

    def _method_state(self) -> dict[str, Any]:
        state = self._state.to_json()
        state["latest"] = {k: None if v is None else list(v) for k, v in self._latest.items()}
        return state

    def _load_method_state(self, state: dict[str, Any]) -> None:
        self._state.load(state, self._space)
        self._latest = {
            str(k): None if v is None else [float(x) for x in v] for k, v in state["latest"].items()
        }


class CmaEsSearch(ModelSearch):
    """``cmaes``: Optuna's CMA-ES sampler."""

    kind = "cmaes"


class GPSearch(ModelSearch):
    """``gp``: Optuna's Gaussian-process sampler."""

    kind = "gp"


class NSGAIISearch(ModelSearch):
    """``nsgaii``: Optuna's NSGA-II sampler."""

    kind = "nsgaii"


def stopped_rule(sampler: str) -> str:
    """How ASHA with ``sampler`` tells the study a trial it stopped below the top rung.

    ``complete`` (TPE): COMPLETE with the value at the rung where it stopped, so TPE
    ranks every trial by its latest result. ``pruned`` (CMA-ES, GP): PRUNED, as Optuna's
    pruners do; those samplers then learn from the trials that finished the top rung
    (CMA-ES also from pruned ones with its ``consider_pruned_trials``). See the module
    documentation for why TPE's differs and the benchmark evidence.

    Args:
        sampler: ``tpe``, ``cmaes`` or ``gp``.

    Returns:
        ``complete`` or ``pruned``.
    """
    return "complete" if sampler == "tpe" else "pruned"


class _ASHAModelMixin:
    """ASHA whose new trials' hyperparameters come from an Optuna sampler."""

    _config: Any
    _rng: Any
    _trials: dict[str, TrialRecord]
    _brackets: Any

    def _model_setup(self) -> None:
        cfg = self._config.searcher
        objective = SearchMetric(name=cfg.metric, smaller_is_better=cfg.smaller_is_better)
        self._space = SpaceMap(self._config.hyperparameters)
        self._state = _ModelState(cfg.sampler, dict(cfg.sampler_options), [objective])
        self._last: dict[str, float] = {}
        #: how a trial that ASHA stopped below the top rung is told to the study
        self._stopped = stopped_rule(cfg.sampler)

    def _raw(self, value: float) -> float:
        return value if self._config.searcher.smaller_is_better else -value

    def _model_observe(self, trial: TrialRecord, rung: int, value: float) -> None:
        if not math.isfinite(value):
            return
        raw = self._raw(value)
        self._last[trial.request_id] = raw
        step = int(self._brackets[trial.group].plan.lengths[rung])
        self._state.get().report(self._state.numbers[trial.request_id], step, raw)

    def _model_close(self, trial: TrialRecord) -> None:
        top = self._brackets[trial.group].plan.rungs - 1
        last = self._last.get(trial.request_id)
        if last is not None and (trial.rung == top or self._stopped == "complete"):
            self._state.tell(trial.request_id, "complete", [last])
        elif last is not None:
            self._state.tell(trial.request_id, "pruned")
        else:
            self._state.tell(trial.request_id, "fail")

    def _model_state_json(self, base: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        out["sampler"] = self._state.to_json()
        out["sampler"]["last"] = dict(self._last)
        out["sampler"]["stopped"] = self._stopped
        return out

    def _model_load(self, state: dict[str, Any]) -> dict[str, Any]:
        saved = dict(state)
        model = saved.pop("sampler")
        self._state.load(model, self._space)
        self._last = {str(k): float(v) for k, v in model["last"].items()}
        # A snapshot from before the rule was recorded told every stopped trial PRUNED:
        # it continues so, exactly as it would have.
        self._stopped = str(model.get("stopped", "pruned"))
        return saved


class ModelASHASearch(_ASHAModelMixin, AdaptiveASHASearch):
    """``adaptive_asha`` with ``sampler: tpe|cmaes|gp`` (BOHB-style)."""

    def _setup(self) -> None:
        super()._setup()
        self._model_setup()

    def _initial(self) -> list[Operation]:
        self._state.start(draw_trial_seed(self._rng), self._space)
        return super()._initial()

    def _create(self, group: int = 0, hparams: Any = None, **kw: Any) -> Create:
        number = None
        if hparams is None:
            number, hparams = self._state.get().ask()
        op = super()._create(group, hparams, **kw)
        if number is not None:
            self._state.numbers[op.request_id] = number
        return op

    def _observe(self, trial: TrialRecord, rung: int, value: float) -> None:
        self._model_observe(trial, rung, value)

    def _close(self, trial: TrialRecord) -> Any:
        self._model_close(trial)
        return super()._close(trial)

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        if reason is not None:
            self._state.tell(trial.request_id, "fail")
        elif trial.request_id not in self._state.told:
            self._model_close(trial)
        return super()._on_trial_ended(trial, reason)

    def _can_reopen(self) -> bool:
        return False

    def _method_state(self) -> dict[str, Any]:
        return self._model_state_json(super()._method_state())

    def _load_method_state(self, state: dict[str, Any]) -> None:
        super()._load_method_state(self._model_load(state))


class ModelAsyncHalvingSearch(ModelASHASearch, AsyncHalvingSearch):
    """``async_halving`` with ``sampler: tpe|cmaes|gp``."""

    kind = "async_halving"
