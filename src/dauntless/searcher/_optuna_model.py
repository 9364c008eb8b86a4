"""An Optuna sampler inside a pure searcher: a seeded in-memory study rebuilt by replay.

The model-based searchers (``tpe``, ``cmaes``, ``gp``, ``nsgaii``, and ASHA with a
``sampler``) do not implement an algorithm of their own: they ask Optuna's sampler for
each new trial's hyperparameters and tell it each result. Optuna keeps sampler state in
places a JSON snapshot cannot hold as such (the sampler's RNG, CMA-ES's optimizer in
trial attributes), so :class:`OptunaModel` keeps instead the *ordered log* of every
interaction with the study (ask, intermediate report, tell) and the sampler's seed. A
restored model rebuilds a fresh in-memory study with a sampler of the same seed and
replays the log in order: the sampler then sees exactly the calls it saw the first time,
and proposes next exactly what the uninterrupted run would (ARCHITECTURE.md,
"Integrations and searchers"). Each replayed proposal is checked against the logged one,
so a different Optuna that would propose otherwise is reported instead of silently
changing the search.

The study is built lazily: restoring a model costs nothing until it must propose, and
reports and results that arrive before then only extend the log. Optuna is imported only
here, and only when a model is used (``pip install 'dauntless[search]'``).
"""

from __future__ import annotations

import copy
import math
import threading
import warnings
from collections.abc import Mapping
from typing import Any

from dauntless.config import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP, SearchMetric

from ._errors import SearcherConfigError

OPTUNA_HINT = "install the search extra: pip install 'dauntless[search]'"

_WARN_LOCK = threading.Lock()


def import_optuna(field: str = "searcher.name", sampler: str = "tpe") -> Any:
    """Import Optuna (and what the sampler needs besides: ``cmaes`` for CMA-ES).

    Args:
        field: the config field to name when it is missing.
        sampler: ``tpe``, ``cmaes``, ``gp`` or ``nsgaii``.

    Returns:
        The ``optuna`` module.

    Raises:
        SearcherConfigError: Optuna (or ``cmaes``, or SciPy for ``gp``) is not installed.
    """
    try:
        import optuna
    except ImportError:
        raise SearcherConfigError(
            field, f"the {sampler} searcher needs Optuna, which is not installed; {OPTUNA_HINT}"
        ) from None
    extra = {"cmaes": "cmaes", "gp": "scipy"}.get(sampler)
    if extra is not None:
        try:
            __import__(extra)
        except ImportError:
            raise SearcherConfigError(
                field,
                f"the {sampler} sampler needs the {extra!r} package, which is not installed; "
                f"{OPTUNA_HINT}",
            ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class SpaceMap:
    """The experiment's hyperparameters as Optuna distributions, and back.

    Leaves are named by their dotted path (nested hyperparameters); constants are not
    searched. int -> ``IntDistribution(minval, maxval)``; double ->
    ``FloatDistribution(minval, maxval)``; log -> ``FloatDistribution(base**minval,
    base**maxval, log=True)`` (log-uniform, whatever the base); categorical ->
    ``CategoricalDistribution`` over the *indexes* of ``vals`` (values of any JSON type).

    Args:
        hyperparameters: parsed hyperparameters (``ExperimentConfig.hyperparameters``).

    Raises:
        TypeError: a leaf is not a parsed hyperparameter.
    """

    def __init__(self, hyperparameters: Mapping[str, Any]) -> None:
        self._leaves: list[tuple[tuple[str, ...], Any]] = []
        self._collect(hyperparameters, ())

    def _collect(self, hps: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for name in sorted(hps):
            hp = hps[name]
            path = (*prefix, name)
            if isinstance(hp, Mapping):
                self._collect(hp, path)
                if not hp:
                    self._leaves.append((path, ConstHP(type="const", val={})))
            elif isinstance(hp, (ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP)):
                self._leaves.append((path, hp))
            else:
                raise TypeError(
                    f"hyperparameters.{'.'.join(path)}: expected a parsed hyperparameter, "
                    f"got {type(hp).__name__}"
                )

    def distributions(self, optuna: Any) -> dict[str, Any]:
        """Name -> Optuna distribution of every searched leaf, in sorted path order."""
        d = optuna.distributions
        out: dict[str, Any] = {}
        for path, hp in self._leaves:
            name = ".".join(path)
            if isinstance(hp, IntHP):
                out[name] = d.IntDistribution(hp.minval, hp.maxval)
            elif isinstance(hp, DoubleHP):
                out[name] = d.FloatDistribution(hp.minval, hp.maxval)
            elif isinstance(hp, LogHP):
                out[name] = d.FloatDistribution(hp.base**hp.minval, hp.base**hp.maxval, log=True)
            elif isinstance(hp, CategoricalHP):
                out[name] = d.CategoricalDistribution(list(range(len(hp.vals))))
        return out

    def to_hparams(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The experiment's hyperparameter values (nested dicts) of Optuna params."""
        out: dict[str, Any] = {}
        for path, hp in self._leaves:
            name = ".".join(path)
            if isinstance(hp, ConstHP):
                value = copy.deepcopy(hp.val)
            elif isinstance(hp, CategoricalHP):
                value = copy.deepcopy(hp.vals[int(params[name])])
            elif isinstance(hp, IntHP):
                value = int(params[name])
            else:
                value = float(params[name])
            node = out
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
        return out


def sampler_defaults(sampler: str, options: Mapping[str, Any], objectives: int) -> dict[str, Any]:
    """The options a new search's sampler is built with: the config's
    ``sampler_options`` plus Dauntless's defaults for what the config leaves out.

    TPE gets ``multivariate: true`` for one objective (one Parzen estimator over the
    joint space, so correlated hyperparameters are modelled together) and
    ``constant_liar: true`` (trials still running count as bad results when the next
    one is asked, so concurrent trials spread out instead of piling onto one point):
    Optuna 5's own defaults, pinned so that a search behaves the same under the Optuna
    4 that ``dauntless[search]`` also allows (whose defaults are both false). On the
    issue 35 benchmark (``benchmarks/search_efficiency.py --suite model``), chosen on
    seeds 100-109 (not the 0-9 it reports on): multivariate TPE needed a median 23
    (Branin) and 18 (Hartmann-6) of random search's 64 trials to reach random's best,
    independent TPE 24 and 21 with 3 and 2 seeds never reaching it (1 and 0
    multivariate). Optuna's ``group`` is left off: Dauntless asks every hyperparameter
    of the (always fully defined) space at once, so there is one group and ``group:
    true`` proposes exactly the same (identical figures on those seeds).
    ``n_startup_trials`` stays Optuna's 10: 5 was no better beyond noise over 50 seeds
    (0.34 against 0.40 on Branin). ``n_ei_candidates`` stays Optuna's 24: 64 and 128
    were no better for ``tpe`` and worse for ASHA+TPE on seeds 100-139 (the figures are
    in :mod:`._model`'s documentation). Other samplers get the config's options as given.

    Args:
        sampler: ``tpe``, ``cmaes``, ``gp`` or ``nsgaii``.
        options: the config's ``sampler_options``.
        objectives: how many objectives the search has (1 or more).

    Returns:
        The options, a new dict.
    """
    out = dict(options)
    if sampler == "tpe":
        if objectives == 1:
            out.setdefault("multivariate", True)
        out.setdefault("constant_liar", True)
    return out


def build_sampler(optuna: Any, name: str, options: Mapping[str, Any], seed: int) -> Any:
    """An Optuna sampler of ``name`` with the config's ``sampler_options`` and ``seed``.

    Raises:
        SearcherConfigError: Optuna refuses an option's value (the message names it).
    """
    samplers = optuna.samplers
    opts = dict(options)
    try:
        if name == "tpe":
            return samplers.TPESampler(seed=seed, **opts)
        if name == "cmaes":
            opts.setdefault("warn_independent_sampling", False)
            return samplers.CmaEsSampler(seed=seed, **opts)
        if name == "gp":
            opts.setdefault("warn_independent_sampling", False)
            return samplers.GPSampler(seed=seed, **opts)
        if name == "nsgaii":
            return samplers.NSGAIISampler(seed=seed, **opts)
    except (ValueError, TypeError) as exc:
        raise SearcherConfigError("searcher.sampler_options", str(exc)) from None
    raise SearcherConfigError("searcher.sampler", f"unknown sampler {name!r}")


class OptunaModel:
    """A seeded Optuna study that proposes hyperparameters and learns results.

    Trials are Optuna trial numbers ``0, 1, ...`` in the order they were asked.

    Args:
        sampler: ``tpe``, ``cmaes``, ``gp`` or ``nsgaii``.
        options: the sampler's keyword arguments (``searcher.sampler_options``).
        seed: the sampler's seed, ``0..2**31-1`` (drawn from the experiment RNG).
        objectives: the objectives (their names and directions).
        space: the search space.
        log: a saved interaction log to continue (:meth:`to_json`); empty for a new study.

    Raises:
        SearcherConfigError: Optuna is not installed, or refuses an option.
    """

    def __init__(
        self,
        sampler: str,
        options: Mapping[str, Any],
        seed: int,
        objectives: list[SearchMetric],
        space: SpaceMap,
        log: list[list[Any]] | None = None,
    ) -> None:
        self._optuna = import_optuna(sampler=sampler)
        self._sampler_name = sampler
        self._options = dict(options)
        self._seed = int(seed)
        self._objectives = list(objectives)
        self._space = space
        self._log: list[list[Any]] = [list(e) for e in (log or [])]
        self._asked = sum(1 for e in self._log if e[0] == "ask")
        self._study: Any = None
        self._live: dict[int, Any] = {}

    # ------------------------------------------------------------------ study

    def _quiet(self) -> Any:
        """Optuna's experimental-feature warnings off around a call (pytest makes every
        warning an error; these say nothing to a user of the searcher)."""
        ctx = warnings.catch_warnings()

        class _Quiet:
            def __enter__(_self) -> None:
                _WARN_LOCK.acquire()
                ctx.__enter__()
                warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", RuntimeWarning)

            def __exit__(_self, *exc: Any) -> None:
                try:
                    ctx.__exit__(*exc)
                finally:
                    _WARN_LOCK.release()

        return _Quiet()

    def _ensure_study(self) -> Any:
        if self._study is not None:
            return self._study
        optuna = self._optuna
        with self._quiet():
            sampler = build_sampler(optuna, self._sampler_name, self._options, self._seed)
            study = optuna.create_study(
                storage=optuna.storages.InMemoryStorage(),
                sampler=sampler,
                directions=[
                    "minimize" if o.smaller_is_better else "maximize" for o in self._objectives
                ],
            )
            self._study = study
            for entry in self._log:
                self._apply(entry, replay=True)
        return study

    def _apply(self, entry: list[Any], replay: bool) -> Any:
        kind = entry[0]
        study = self._study
        if kind == "ask":
            trial = study.ask(self._space.distributions(self._optuna))
            number, params = int(entry[1]), entry[2]
            if trial.number != number:
                raise ValueError(f"replay of the search's study: trial {trial.number} != {number}")
            if replay and _jsonable(trial.params) != params:
                raise ValueError(
                    "replaying the search's Optuna study proposed other hyperparameters "
                    f"({_jsonable(trial.params)}) than it did before ({params}): this "
                    f"Optuna ({self._optuna.__version__}) samples differently from the "
                    "one that ran the search; install that version to continue it"
                )
            self._live[number] = trial
            return trial
        if kind == "report":
            self._live[int(entry[1])].report(float(entry[3]), int(entry[2]))
            return None
        if kind == "tell":
            number, state, values = int(entry[1]), entry[2], entry[3]
            states = self._optuna.trial.TrialState
            if state == "complete":
                study.tell(number, values=[float(v) for v in values])
            elif state == "pruned":
                study.tell(number, state=states.PRUNED)
            else:
                study.tell(number, state=states.FAIL)
            self._live.pop(number, None)
            return None
        raise ValueError(f"unknown entry {kind!r} in the search's study log")

    # ------------------------------------------------------------------ events

    @property
    def asked(self) -> int:
        """How many trials were asked so far."""
        return self._asked

    def ask(self) -> tuple[int, dict[str, Any]]:
        """Ask the sampler for a new trial.

        Returns:
            ``(number, hparams)``: the trial's number and the experiment's hyperparameter
            values (nested dicts; constants included).

        Raises:
            ValueError: a replayed study diverged (another Optuna version).
        """
        self._ensure_study()
        number = self._asked
        with self._quiet():
            trial = self._apply(["ask", number, None], replay=False)
        params = _jsonable(trial.params)
        self._log.append(["ask", number, params])
        self._asked += 1
        return number, self._space.to_hparams(params)

    def report(self, number: int, step: int, value: float) -> None:
        """An intermediate value of a single-objective trial (an ASHA rung result).

        Args:
            number: the trial.
            step: the rung's length (time units; larger is further).
            value: the raw metric; non-finite values are not reported.
        """
        if len(self._objectives) != 1 or not math.isfinite(value):
            return
        entry = ["report", int(number), int(step), float(value)]
        if self._study is not None:
            with self._quiet():
                self._apply(entry, replay=False)
        self._log.append(entry)

    def tell(self, number: int, state: str, values: list[float] | None = None) -> None:
        """A trial's result.

        Args:
            number: the trial.
            state: ``complete`` (with ``values``, one per objective), ``pruned`` (stopped
                early by ASHA; its intermediate values count) or ``fail``.
            values: raw metric values, one per objective; a non-finite one makes the
                trial ``fail``.
        """
        vals: list[float] = []
        if state == "complete":
            vals = [float(v) for v in values or []]
            if len(vals) != len(self._objectives) or not all(math.isfinite(v) for v in vals):
                state, vals = "fail", []
        entry = ["tell", int(number), state, vals]
        if self._study is not None:
            with self._quiet():
                self._apply(entry, replay=False)
        self._log.append(entry)

    def to_json(self) -> dict[str, Any]:
        """The model's state: the sampler, the options it was built with, its seed and
        the ordered interaction log."""
        return {
            "sampler": self._sampler_name,
            "options": dict(self._options),
            "seed": self._seed,
            "optuna": str(self._optuna.__version__),
            "log": [list(e) for e in self._log],
        }


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, bool) or v is None or isinstance(v, str):
            out[k] = v
        elif isinstance(v, int) or (hasattr(v, "dtype") and "int" in str(v.dtype)):
            out[k] = int(v)
        else:
            out[k] = float(v)
    return out
