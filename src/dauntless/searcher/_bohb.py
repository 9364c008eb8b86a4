"""BOHB's proposal rule for ASHA with ``sampler: tpe``: Optuna's TPE fit on one rung.

Falkner, Klein and Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization at
Scale" (ICML 2018), section 4 and its HpBandSter implementation (documented defaults
``random_fraction=1/3``, ``min_points_in_model`` = the number of hyperparameters + 1):
each new configuration is drawn

- at random with probability :data:`RANDOM_FRACTION` (1/3, BOHB's rho), so the search
  keeps exploring whatever the model believes;
- otherwise from a model fit only on the results of the *largest* rung length (budget)
  that has at least ``d + 2`` results, ``d`` the number of searched hyperparameters
  (``sampler_options.n_startup_trials`` replaces ``d + 2`` when the config gives it);
  results of shorter rungs are not mixed in (they rank configurations by a noisier
  measure), and trials stopped by ASHA simply have no result on the longer rungs;
- at random while no rung has that many results.

The model is Optuna's ``TPESampler`` (the config's ``sampler_options`` and Dauntless's
defaults, :func:`~._optuna_model.sampler_defaults`; its own ``n_startup_trials`` is 0
because the rung's count above decides when it starts), not BOHB's own kernel density
estimator: the issue asks for Optuna's samplers, and Optuna's multivariate TPE is the
same kind of model (a Parzen estimator of the good and of the bad results).

Exact restore: every draw uses a fresh sampler seeded from (the search's seed, the
trial's number) (:func:`_draw_seed`), so a draw depends only on which results the chosen
rung holds, in order. One in-memory study per rung length holds that rung's results as
COMPLETE trials, in the order they arrived, and each model draw on it leaves a FAIL
trial (Optuna's ``ask``; TPE reads only COMPLETE, PRUNED and, with the constant liar,
RUNNING trials). The state is the seed and the ordered log of asks (with the rung each
came from, -1: random) and rung results; a restored model rebuilds the studies from the
log, FAIL trials included, at its first draw.
"""

from __future__ import annotations

import math
from typing import Any

from ._optuna_model import SpaceMap, _jsonable, build_sampler, import_optuna, quiet

RANDOM_FRACTION = 1.0 / 3.0
"""BOHB's rho: the fraction of new trials drawn at random whatever the model."""

KIND = "largest_rung"
"""The ``kind`` a :class:`RungModel` snapshot records (absent: an :class:`OptunaModel`)."""


def _draw_seed(seed: int, number: int, stream: int) -> int:
    """A 31-bit seed for trial ``number``'s draw: ``stream`` 0 the random-or-model coin,
    1 the sampler. NumPy's SeedSequence mixes the three integers (stable across
    platforms and NumPy versions, which is what an exact replay needs)."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed), int(number), stream]).generate_state(1)[0]) >> 1


class RungModel:
    """BOHB's rule (see the module documentation) with the interface of
    :class:`~._optuna_model.OptunaModel` that ASHA's model mixin uses.

    Args:
        options: the TPE sampler's options (the config's plus Dauntless's defaults).
        seed: the search's sampler seed, ``0..2**31-1``.
        space: the search space.
        log: a saved log to continue (:meth:`to_json`); None or empty for a new model.

    Raises:
        SearcherConfigError: Optuna is not installed, or refuses an option (at the
            first model draw).
    """

    def __init__(
        self,
        options: dict[str, Any],
        seed: int,
        space: SpaceMap,
        log: list[list[Any]] | None = None,
    ) -> None:
        self._optuna = import_optuna(sampler="tpe")
        self._options = dict(options)
        self._seed = int(seed)
        self._space = space
        self._dists = space.distributions(self._optuna)
        given = self._options.get("n_startup_trials")
        #: the results a rung needs before the model is fit on it
        self.min_points = int(given) if given is not None else len(self._dists) + 2
        self._log: list[list[Any]] = [list(e) for e in (log or [])]
        self._params: dict[int, dict[str, Any]] = {}
        self._counts: dict[int, int] = {}
        self._seen: set[tuple[int, int]] = set()
        for e in self._log:
            if e[0] == "ask":
                self._params[int(e[1])] = e[2]
            elif e[0] == "report":
                self._seen.add((int(e[1]), int(e[2])))
                self._counts[int(e[2])] = self._counts.get(int(e[2]), 0) + 1
        self._asked = len(self._params)
        self._studies: dict[int, Any] | None = None  # rung length -> study, once built

    @property
    def asked(self) -> int:
        """How many trials were asked so far."""
        return self._asked

    def _new_study(self) -> Any:
        optuna = self._optuna
        return optuna.create_study(storage=optuna.storages.InMemoryStorage())

    def _add(self, entry: list[Any]) -> None:
        """Put one logged ask or rung result into the studies (they are built)."""
        assert self._studies is not None
        trials = self._optuna.trial
        if entry[0] == "report":
            step = int(entry[2])
            study = self._studies.setdefault(step, self._new_study())
            study.add_trial(
                trials.create_trial(
                    params=self._params[int(entry[1])],
                    distributions=self._dists,
                    value=float(entry[3]),
                )
            )
        elif entry[0] == "ask" and int(entry[3]) >= 0:
            study = self._studies.setdefault(int(entry[3]), self._new_study())
            study.add_trial(
                trials.create_trial(
                    params=entry[2],
                    distributions=self._dists,
                    state=trials.TrialState.FAIL,
                )
            )

    def _built(self) -> dict[int, Any]:
        if self._studies is None:
            self._studies = {}
            with quiet(self._optuna):
                for entry in self._log:
                    self._add(entry)
        return self._studies

    def rung(self) -> int:
        """The rung length the next model draw is fit on: the largest with at least
        :attr:`min_points` results; -1 when none has."""
        full = [step for step, n in self._counts.items() if n >= self.min_points]
        return max(full, default=-1)

    def ask(self) -> tuple[int, dict[str, Any]]:
        """Draw a new trial's hyperparameters.

        Returns:
            ``(number, hparams)``: the trial's number (``0, 1, ...``) and the
            experiment's hyperparameter values (nested dicts; constants included).

        Raises:
            SearcherConfigError: Optuna refuses a sampler option.
        """
        import numpy as np

        number = self._asked
        coin = np.random.default_rng(_draw_seed(self._seed, number, 0)).random()
        step = -1 if coin < RANDOM_FRACTION else self.rung()
        seed = _draw_seed(self._seed, number, 1)
        optuna = self._optuna
        studies = self._built() if step >= 0 else {}
        with quiet(self._optuna):
            if step < 0:
                study = self._new_study()
                study.sampler = optuna.samplers.RandomSampler(seed=seed)
                trial = study.ask(self._dists)
                params = _jsonable(trial.params)
            else:
                study = studies[step]
                options = {**self._options, "n_startup_trials": 0}
                study.sampler = build_sampler(optuna, "tpe", options, seed)
                trial = study.ask(self._dists)
                params = _jsonable(trial.params)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._log.append(["ask", number, params, step])
        self._params[number] = params
        self._asked += 1
        return number, self._space.to_hparams(params)

    def report(self, number: int, step: int, value: float) -> None:
        """A rung result: trial ``number`` read ``value`` (smaller is better) at rung
        length ``step``. Non-finite values, and a second result of the same trial at the
        same length, are left out."""
        if not math.isfinite(value) or (int(number), int(step)) in self._seen:
            return
        entry = ["report", int(number), int(step), float(value)]
        self._seen.add((int(number), int(step)))
        self._counts[int(step)] = self._counts.get(int(step), 0) + 1
        self._log.append(entry)
        if self._studies is not None:
            with quiet(self._optuna):
                self._add(entry)

    def tell(self, number: int, state: str, values: list[float] | None = None) -> None:
        """A trial's end: nothing to learn (BOHB's model reads rung results only)."""

    def to_json(self) -> dict[str, Any]:
        """The model's state: its kind, the sampler options, the seed and the log."""
        return {
            "kind": KIND,
            "sampler": "tpe",
            "options": dict(self._options),
            "seed": self._seed,
            "optuna": str(self._optuna.__version__),
            "log": [list(e) for e in self._log],
        }
