"""The ``--suite pbt`` of benchmarks/search_efficiency.py (issue 35): Dauntless's ``pbt``
against Ray Tune's ``PopulationBasedTraining`` on the same objective, in one process tree.

Objective (a schedule problem, where a fixed hyperparameter cannot do well and PBT's
exploit-and-explore can): a trial's state is a progress ``a`` in [0, 1] (an accuracy),
starting at 0; each training step adds ``RATE * exp(-(log10(lr) - best(a))**2 / (2 *
WIDTH**2))``, capped at 1, where ``best(a) = -3 + 2 * min(a, 1 - a)``: the learning rate
that helps most rises from 1e-3 to 1e-2 while ``a`` goes to 0.5 and falls back to 1e-3
as ``a`` reaches 1 (warm-up then decay, the shape real schedules take). ``lr`` is a log
hyperparameter on [1e-4, 1e-1]. Following the best schedule, ``a`` gains ``RATE`` a step;
a constant ``lr`` gains it only while ``best(a)`` is near ``log10(lr)``. The figure is the
population's best ``a`` after ``ROUNDS * STEPS`` steps of training (larger is better); a
clone starts from its parent's ``a`` (its checkpoint), as on a cluster.

Both searchers get the same population (8), rounds (10 of 10 steps), truncation (the
worst quarter replaced by clones of the best quarter: Dauntless's ``truncate_fraction``
0.25, Ray's ``quantile_fraction`` 0.25) and exploration (resample with probability 0.25,
else multiply by 1.2 or 0.8: Dauntless's ``perturb_factor`` 0.2, Ray's
``perturbation_factors`` (1.2, 0.8)); Ray runs synchronously (``synch=True``), as
Dauntless's rounds do. The baseline is the same 8 first-population learning rates kept
constant for the whole training (PBT without exploit and explore).

Two budgets, both printed. In all: each searcher's whole population runs ``steps_all``
/ ``ray_steps_all`` training steps (Ray's counted from every trial's reported results,
one per iteration of ``STEPS``); on Ray 2.60 both ran 800 on every seed (8 trials of
``ROUNDS`` iterations), so ``pbt`` against ``ray_pbt`` is a comparison at equal total
training. Per lineage: each Ray trial reports the steps its lineage trained (restored
from the checkpoint it exploits; the row's ``ray_steps`` is the best trial's), and Ray's
best lineage trained 130 to 170 steps where every Dauntless lineage trains ``ROUNDS *
STEPS`` = 100 (a Ray clone counts its own iterations, not its parent's; why it can copy
a parent further along than itself under ``synch=True`` was not traced). Stopping Ray's
trials at the lineage's budget deadlocks its synchronous PBT, so the equal-lineage
figure is read afterwards: ``ray_pbt_equal`` is the best progress any Ray trial reported
with its lineage at most ``ROUNDS * STEPS`` steps trained (progress never falls along a
lineage, so this is the best lineage's progress at Dauntless's per-lineage budget).

Dauntless is driven here event by event (:func:`run_ours`) rather than through
``simulate``, whose objective sees a clone's hyperparameters but not its parent's state.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import warnings
from collections import deque
from typing import Any

from dauntless.config import parse_experiment_config
from dauntless.searcher import make_searcher
from dauntless.searcher._ops import Close, Create, Shutdown, ValidateAfter

POPULATION = 8
ROUNDS = 10
STEPS = 10
RATE = 0.01
WIDTH = 0.25
LR_SPACE = {"type": "log", "base": 10, "minval": -4.0, "maxval": -1.0}


def train(a: float, lr: float, steps: int) -> float:
    """The progress after ``steps`` training steps at ``lr`` from progress ``a`` (see the
    module documentation)."""
    x = math.log10(lr)
    for _ in range(steps):
        best = -3.0 + 2.0 * min(a, 1.0 - a)
        a = min(a + RATE * math.exp(-((x - best) ** 2) / (2 * WIDTH**2)), 1.0)
    return a


def run_ours(seed: int) -> tuple[float, list[float], int]:
    """Dauntless ``pbt`` on the objective, one trial at a time.

    Returns:
        The best final progress (0..1), the first population's learning rates and the
        training steps all members ran in all.
    """
    config = parse_experiment_config(
        {
            "hyperparameters": {"lr": LR_SPACE},
            "searcher": {
                "name": "pbt",
                "metric": "progress",
                "smaller_is_better": False,
                "population_size": POPULATION,
                "num_rounds": ROUNDS,
                "length_per_round": {"batches": STEPS},
                "replace_function": {"truncate_fraction": 0.25},
                "explore_function": {"resample_probability": 0.25, "perturb_factor": 0.2},
            },
        }
    )
    searcher = make_searcher(config, seed)
    state: dict[str, dict[str, Any]] = {}
    targets: dict[str, int] = {}
    closing: deque[str] = deque()
    first: list[float] = []
    finals: list[float] = []
    total = 0
    done = False

    def apply(ops: list[Any]) -> None:
        nonlocal done
        queue = deque(ops)
        while queue:
            op = queue.popleft()
            if isinstance(op, Create):
                parent = op.parent_request_id
                start = state[parent]["a"] if parent else 0.0  # the parent's checkpoint
                state[op.request_id] = {"a": start, "trained": 0, "lr": op.hparams["lr"]}
                if parent is None:
                    first.append(float(op.hparams["lr"]))
                queue.extend(searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                targets[op.request_id] = op.length
            elif isinstance(op, Close):
                targets.pop(op.request_id, None)
                closing.append(op.request_id)
            elif isinstance(op, Shutdown):
                done = True

    apply(searcher.initial_operations())
    while not done and (targets or closing):
        if closing:
            rid = closing.popleft()
            finals.append(state[rid]["a"])
            apply(searcher.on_trial_closed(rid))
            continue
        rid, length = next(iter(targets.items()))
        del targets[rid]
        s = state[rid]
        s["a"] = train(s["a"], s["lr"], length - s["trained"])
        total += length - s["trained"]
        s["trained"] = length
        apply(searcher.on_validation_completed(rid, s["a"], length))
    if not done:
        raise RuntimeError("Dauntless pbt stopped without Shutdown")
    return max(finals), first, total


def constant(lrs: list[float]) -> float:
    """The best progress of constant learning rates trained the whole length."""
    return max(train(0.0, lr, ROUNDS * STEPS) for lr in lrs)


def run_ray(seed: int) -> tuple[float, int, float, int]:
    """Ray Tune's ``PopulationBasedTraining`` on the objective (one training iteration
    is one round of ``STEPS`` steps; checkpoints hold the progress).

    Returns:
        The best final progress (0..1), the steps its lineage trained (the budget is
        ``ROUNDS * STEPS``), the best progress reported by a lineage that had
        trained at most ``ROUNDS * STEPS`` steps (the equal-budget figure), and the
        training steps all trials ran in all (each reported result is one ``step`` of
        ``STEPS``).
    """
    import random

    import numpy as np
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    class Schedule(tune.Trainable):
        def setup(self, config: dict[str, Any]) -> None:
            self.a = 0.0
            self.steps = 0  # steps trained along the trial's lineage (the budget check)

        def step(self) -> dict[str, float]:
            self.a = train(self.a, float(self.config["lr"]), STEPS)
            self.steps += STEPS
            return {"progress": self.a, "steps": self.steps}

        def save_checkpoint(self, checkpoint_dir: str) -> dict[str, float]:
            return {"a": self.a, "steps": self.steps}

        def load_checkpoint(self, checkpoint: dict[str, float]) -> None:
            self.a = float(checkpoint["a"])
            self.steps = int(checkpoint["steps"])

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            return True  # lr is read at each step; the state comes from the checkpoint

    # Ray's PBT and initial sampling draw from Python's and NumPy's global RNGs.
    random.seed(seed)
    np.random.seed(seed % 2**32)
    lo, hi = 10 ** LR_SPACE["minval"], 10 ** LR_SPACE["maxval"]
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=1,
        hyperparam_mutations={"lr": tune.loguniform(lo, hi)},
        quantile_fraction=0.25,
        resample_probability=0.25,
        perturbation_factors=(1.2, 0.8),
        synch=True,
    )
    with tempfile.TemporaryDirectory(prefix="dauntless-ray-pbt-") as storage:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tuner = tune.Tuner(
                Schedule,
                param_space={"lr": tune.loguniform(lo, hi)},
                tune_config=tune.TuneConfig(
                    metric="progress",
                    mode="max",
                    scheduler=pbt,
                    num_samples=POPULATION,
                    reuse_actors=True,
                ),
                run_config=tune.RunConfig(
                    storage_path=storage,
                    verbose=0,
                    # Stopping by the lineage's steps instead deadlocks synch=True
                    # (a stopped trial never reaches the next perturbation).
                    stop={"training_iteration": ROUNDS},
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                ),
            )
            results = tuner.fit()
            best = max(results, key=lambda r: float(r.metrics["progress"]))
            equal = max(
                float(row.progress)
                for r in results
                for row in r.metrics_dataframe.itertuples()
                if int(row.steps) <= ROUNDS * STEPS
            )
            total = STEPS * sum(len(r.metrics_dataframe) for r in results)
    return float(best.metrics["progress"]), int(best.metrics["steps"]), equal, total


def run(args: argparse.Namespace) -> None:
    """Print the PBT comparison per seed and its medians with 95% intervals."""
    from _search_model import _interval_text, _start_ray

    start_wall, start_cpu = time.perf_counter(), time.process_time()
    print(f"load average at start: {os.getloadavg()}")
    ray_ok = not args.no_ray and _start_ray(args.ray_priority)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0, c0 = time.perf_counter(), time.process_time()
        ours, lrs, total = run_ours(seed)
        row = {"pbt": ours, "constant": constant(lrs), "steps_all": total}
        ours_s = (time.perf_counter() - t0, time.process_time() - c0)
        if ray_ok:
            t0 = time.perf_counter()
            ray_out = run_ray(seed)
            row["ray_pbt"], row["ray_steps"], row["ray_pbt_equal"], row["ray_steps_all"] = ray_out
            row["ray_wall_s"] = time.perf_counter() - t0
        print(
            f"seed {seed}: best progress {row} (Dauntless {ours_s[0] * 1000:.0f} ms wall, "
            f"{ours_s[1] * 1000:.0f} ms CPU)",
            flush=True,
        )
        rows.append(row)
    for key in ("pbt", "constant", "ray_pbt", "ray_pbt_equal"):
        if key in rows[0]:
            print(f"  best progress, {key}: median {_interval_text([r[key] for r in rows])}")
    if "ray_pbt" in rows[0]:
        steps = [r["ray_steps"] for r in rows]
        ratio = [r["pbt"] / r["ray_pbt"] for r in rows]
        print(
            f"  Dauntless pbt / Ray PBT best progress, Ray's best lineage trained "
            f"{min(steps)}-{max(steps)} steps, ours {ROUNDS * STEPS}: {_interval_text(ratio)}"
        )
        equal = [r["pbt"] / r["ray_pbt_equal"] for r in rows]
        print(
            f"  Dauntless pbt / Ray PBT at an equal budget ({ROUNDS * STEPS} steps per "
            f"lineage): {_interval_text(equal)}"
        )
    print(
        f"wall {time.perf_counter() - start_wall:.1f} s, CPU "
        f"{time.process_time() - start_cpu:.1f} s (this process; Ray's workers not "
        f"counted), load average {os.getloadavg()}"
    )
