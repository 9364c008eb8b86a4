"""The ``--suite model`` of benchmarks/search_efficiency.py (issue 35): Dauntless's
model-based searchers against random search, Optuna alone and Ray Tune, in one process
tree.

Problems (all minimized; digits' accuracy is negated):

- ``branin``: Branin-Hoo on ``[-5, 10] x [0, 15]`` (minimum 0.397887);
- ``hartmann6``: Hartmann-6 on ``[0, 1]^6`` (minimum -3.32237) plus Gaussian noise of
  standard deviation 0.05 drawn from the trial seed (Dixon & Szegő 1978 constants, as
  in Surjanovic & Bingham's library of test functions);
- ``digits``: minus the validation accuracy of the digits example's MLP trained for
  real (``search_efficiency.DigitsObjective``) for ``--digits-length`` batches.

For each problem and experiment seed: random search's best of 64 trials is the target;
then each searcher gets up to 64 trials (one at a time) and the figure is the number of
trials until one reached the target: Dauntless ``tpe`` (through ``simulate``), Optuna's
TPESampler alone (``study.optimize``), and Ray Tune with ``OptunaSearch`` over the same
TPESampler. Multi-fidelity: ``adaptive_asha`` with random sampling and with ``sampler:
tpe``, ``max_trials`` 64, lengths up to 64 batches, one trial at a time; the figure is the
batches trained until a full-length validation reached the target. A synthetic
problem's value after ``L`` of 64 batches is ``f(x) + (64 / L - 1) * s * u(x)`` with
``u(x)`` in [0, 1) a fixed pseudo-random number of the point and ``s`` the problem's
scale: low fidelities rank points imperfectly, the full length is exact.

Population-based training (digits): Dauntless ``pbt`` (``simulate``; clones continue
from their parent's model, optimizer and data position, as a warm start from the
parent's checkpoint does) against Ray Tune's ``PopulationBasedTraining`` with the same
population, rounds, truncation and perturbation; figure: the best validation accuracy.

Proposal cost: wall and CPU milliseconds of the event that makes a proposal (a trial
ends, the next is asked) for a Dauntless ``tpe`` searcher holding 1,000 observations,
its snapshot included, against Optuna's ``study.ask`` on the same history; and the
replay of a restore at 1,000 observations (once per master restart).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any

import numpy as np

from dauntless.config import parse_experiment_config
from dauntless.searcher import make_searcher, restore_searcher, simulate

BRANIN_SPACE = {
    "x": {"type": "double", "minval": -5.0, "maxval": 10.0},
    "y": {"type": "double", "minval": 0.0, "maxval": 15.0},
}
HARTMANN_SPACE = {f"x{i}": {"type": "double", "minval": 0.0, "maxval": 1.0} for i in range(6)}
_A = np.array(
    [
        [10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14],
    ]
)
_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)
_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
FULL = 64
TRIALS = 64


def branin(h: dict[str, Any]) -> float:
    """Branin-Hoo (minimum 0.397887 at three points)."""
    x, y = h["x"], h["y"]
    return (
        (y - 5.1 / (4 * math.pi**2) * x * x + 5 / math.pi * x - 6) ** 2
        + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
        + 10
    )


def hartmann6(h: dict[str, Any], seed: int) -> float:
    """Hartmann-6 (minimum -3.32237) plus N(0, 0.05) noise drawn from ``seed``."""
    x = np.array([h[f"x{i}"] for i in range(6)])
    value = -float(np.sum(_ALPHA * np.exp(-np.sum(_A * (x - _P) ** 2, axis=1))))
    return value + 0.05 * float(np.random.RandomState(seed % 2**32).randn())


def _unit(h: dict[str, Any]) -> float:
    key = hash(tuple(round(float(v), 12) for _, v in sorted(h.items()) if isinstance(v, float)))
    return (key % 10_007) / 10_007


class Problem:
    """One benchmark problem: its space, full-length value and low-fidelity value."""

    def __init__(self, name: str, space: dict[str, Any], scale: float, digits: Any = None):
        self.name = name
        self.space = space
        self.scale = scale
        self._factory = digits
        self.digits = digits() if digits is not None else None

    def fresh(self) -> None:
        """A new digits objective (no trial state carried over between searches)."""
        if self._factory is not None:
            self.digits = self._factory()

    def value(self, h: dict[str, Any], seed: int, length: int = FULL) -> float:
        if self.digits is not None:
            return -self.digits(h, length, seed)
        base = branin(h) if self.name == "branin" else hartmann6(h, seed)
        return base + (FULL / max(length, 1) - 1) * self.scale * _unit(h)


def _config(problem: Problem, searcher: dict[str, Any]) -> Any:
    return parse_experiment_config(
        {"hyperparameters": problem.space, "searcher": {"metric": "value", **searcher}}
    )


def _first_reaching(values: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(values) if v <= target), None)


def _ours(problem: Problem, name: str, seed: int, trials: int) -> list[float]:
    problem.fresh()
    config = _config(
        problem,
        {"name": name, "max_trials": trials, "max_concurrent_trials": 1, "max_length": FULL},
    )
    result = simulate(config, lambda h, length, s: problem.value(h, s), seed)
    return [t.metrics[-1][1] for t in result.trials]


def _optuna_alone(problem: Problem, seed: int, trials: int) -> list[float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem.fresh()
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    rng = np.random.RandomState(seed)

    def objective(trial: Any) -> float:
        h: dict[str, Any] = {}
        for k, v in problem.space.items():
            if not isinstance(v, dict):
                h[k] = v
            elif v["type"] == "int":
                h[k] = trial.suggest_int(k, v["minval"], v["maxval"])
            elif v["type"] == "log":
                lo, hi = v["base"] ** v["minval"], v["base"] ** v["maxval"]
                h[k] = trial.suggest_float(k, lo, hi, log=True)
            else:
                h[k] = trial.suggest_float(k, v["minval"], v["maxval"])
        return problem.value(h, int(rng.randint(0, 2**31)))

    study.optimize(objective, n_trials=trials)
    return [t.value for t in study.trials]


def _ray_tune(problem: Problem, seed: int, trials: int) -> list[float]:
    import optuna
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    space = {k: tune.uniform(v["minval"], v["maxval"]) for k, v in problem.space.items()}

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        return {"value": problem.value(config, int(config.get("__seed", 0)))}

    search = OptunaSearch(metric="value", mode="min", sampler=optuna.samplers.TPESampler(seed=seed))
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(search_alg=search, num_samples=trials, max_concurrent_trials=1),
    )
    results = tuner.fit()
    df = results.get_dataframe()
    order = df.sort_values("trial_id") if "trial_id" in df else df
    return [float(v) for v in order["value"]]


def _asha_batches(
    problem: Problem, sampler: str, seed: int, target: float | None
) -> tuple[int | None, float]:
    """Batches all trials trained until a full-length validation reached ``target``
    (None: the search's own best), and the best full-length value found."""
    searcher = {
        "name": "adaptive_asha",
        "max_trials": TRIALS,
        "max_time": FULL,
        "time_metric": "batches",
        "divisor": 4,
        "mode": "standard",
        "max_concurrent_trials": 1,
        "sampler": sampler,
    }
    problem.fresh()
    trained: dict[str, int] = {}
    spent = [0]

    def objective(h: dict[str, Any], length: int, s: int) -> float:
        key = json.dumps([s, h], sort_keys=True)
        spent[0] += length - trained.get(key, 0)
        trained[key] = length
        value = problem.value(h, s, length)
        if length == FULL:
            finals.append((spent[0], value))
        return value

    finals: list[tuple[int, float]] = []
    simulate(_config(problem, searcher), objective, seed, max_concurrent=1)
    best = min((v for _, v in finals), default=math.inf)
    goal = best if target is None else target
    reached = [n for n, v in finals if v <= goal]
    return (reached[0] if reached else None), best


def proposal_cost(observations: int = 1000) -> dict[str, float]:
    """Milliseconds per proposal at ``observations`` results: Dauntless (event +
    snapshot), Optuna's ``study.ask`` alone, and a restore's replay."""
    import optuna

    problem = Problem("branin", BRANIN_SPACE, 50.0)
    config = _config(
        problem,
        {
            "name": "tpe",
            "max_trials": observations + 30,
            "max_concurrent_trials": 1,
            "max_length": 1,
        },
    )
    searcher = make_searcher(config, 1)
    [op] = [o for o in searcher.initial_operations()]
    rid = op.request_id
    searcher.on_trial_created(rid)
    wall: list[float] = []
    cpu: list[float] = []
    for n in range(observations + 20):
        hparams = next(t.hparams for t in searcher.trials() if t.request_id == rid)
        searcher.on_validation_completed(rid, branin(hparams), 1)
        t0, c0 = time.perf_counter(), time.process_time()
        ops = searcher.on_trial_closed(rid)
        searcher.snapshot()
        if n >= observations:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        rid = ops[0].request_id
        searcher.on_trial_created(rid)
    snap = searcher.snapshot()
    t0, c0 = time.perf_counter(), time.process_time()
    restored = restore_searcher(config, snap)
    restored.on_validation_completed(rid, 1.0, 1)
    restored.on_trial_closed(rid)  # the first proposal after a restore replays the log
    replay_wall, replay_cpu = time.perf_counter() - t0, time.process_time() - c0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1))
    dists = {
        k: optuna.distributions.FloatDistribution(v["minval"], v["maxval"])
        for k, v in BRANIN_SPACE.items()
    }
    alone: list[float] = []
    for n in range(observations + 20):
        t0 = time.perf_counter()
        trial = study.ask(dists)
        if n >= observations:
            alone.append(time.perf_counter() - t0)
        study.tell(trial, branin(trial.params))
    return {
        "ours_wall_ms": 1000 * statistics.median(wall),
        "ours_cpu_ms": 1000 * statistics.median(cpu),
        "optuna_ask_ms": 1000 * statistics.median(alone),
        "replay_wall_s": replay_wall,
        "replay_cpu_s": replay_cpu,
    }


def _fmt(values: list[int | None], cap: int) -> str:
    shown = [v if v is not None else cap + 1 for v in values]
    return f"median {statistics.median(shown):.0f} (not reached: {sum(v is None for v in values)})"


def run(args: argparse.Namespace, digits_factory: Any) -> None:
    """Print the model suite's figures (see the module documentation)."""
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    print(f"load average at start: {os.getloadavg()}")
    cost = proposal_cost() if not args.only_digits else None
    if cost is not None:
        _print_cost(cost)
    _run_problems(args, digits_factory, start_wall, start_cpu)


def _print_cost(cost: dict[str, float]) -> None:
    print(
        "proposal at 1,000 observations: Dauntless tpe {ours_wall_ms:.1f} ms wall "
        "({ours_cpu_ms:.1f} ms CPU; event + snapshot), Optuna study.ask alone "
        "{optuna_ask_ms:.1f} ms; a restore's replay of 1,000: {replay_wall_s:.1f} s wall "
        "({replay_cpu_s:.1f} s CPU)".format(**cost),
        flush=True,
    )


def _run_problems(
    args: argparse.Namespace, digits_factory: Any, start_wall: float, start_cpu: float
) -> None:
    ray_ok = False
    if not args.no_ray:
        try:
            os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")  # read at import
            import ray

            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
            ray_ok = True
        except Exception as exc:  # Ray is a benchmark-only extra
            print(f"Ray Tune not run: {exc!r}")
    problems = [
        Problem("branin", BRANIN_SPACE, 50.0),
        Problem("hartmann6", HARTMANN_SPACE, 1.0),
    ]
    if args.only_digits:
        problems = []
    if not args.no_digits:
        from search_efficiency import HYPERPARAMETERS

        problems.append(Problem("digits", dict(HYPERPARAMETERS), 0.0, digits=digits_factory))
    for problem in problems:
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            random_values = _ours(problem, "random", seed, TRIALS)
            target = min(random_values)
            row = {
                "random": _first_reaching(random_values, target),
                "tpe": _first_reaching(_ours(problem, "tpe", seed, TRIALS), target),
                "optuna": _first_reaching(_optuna_alone(problem, seed, TRIALS), target),
            }
            if ray_ok and problem.digits is None:
                row["ray"] = _first_reaching(_ray_tune(problem, seed, TRIALS), target)
            # ASHA's figure: batches until ASHA with random sampling's best full-length
            # result (its own), and ASHA with TPE until the same value.
            row["asha"], asha_best = _asha_batches(problem, "random", seed, None)
            row["asha_tpe"], _ = _asha_batches(problem, "tpe", seed, asha_best)
            rows.append(row)
            print(f"{problem.name} seed {seed}: target {target:.4g}: {row}", flush=True)
        for key in rows[0]:
            cap = TRIALS if not key.startswith("asha") else TRIALS * FULL
            what = "trials to random's best of 64"
            if key.startswith("asha"):
                what = "batches to ASHA (random sampling)'s best"
            print(f"  {problem.name} {key}: {what}: {_fmt([r[key] for r in rows], cap)}")
        ratios = [r["tpe"] / TRIALS for r in rows if r["tpe"] is not None]
        own = [r["tpe"] / r["random"] for r in rows if r["tpe"] is not None]
        asha_ratios = [
            r["asha_tpe"] / r["asha"] for r in rows if r["asha_tpe"] is not None and r["asha"]
        ]
        print(
            f"  {problem.name}: median tpe trials / random's 64 = "
            f"{statistics.median(ratios) if ratios else float('nan'):.3f} (target <= 0.333), "
            f"/ random's own trials to its best = "
            f"{statistics.median(own) if own else float('nan'):.3f}; "
            f"median ASHA+TPE batches / ASHA's = "
            f"{statistics.median(asha_ratios) if asha_ratios else float('nan'):.3f} (target <= 0.5)",
            flush=True,
        )
    print(
        f"wall {time.perf_counter() - start_wall:.1f} s, CPU {time.process_time() - start_cpu:.1f} s "
        f"(this process; Ray's workers not counted), load average {os.getloadavg()}"
    )
