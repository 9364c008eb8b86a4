"""Throughput of the pure search simulator: random search and adaptive ASHA.

Runs :func:`dauntless.searcher.simulate` on synthetic objectives (no training, no I/O) and
prints trials per second of wall time. The searchers must keep up with 10,000-trial
searches in well under 10 s.

Usage: ``python benchmarks/search_simulator.py [--trials 10000] [--seed 0] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import math
import time

from dauntless.config import ExperimentConfig, parse_experiment_config
from dauntless.searcher import SimulationResult, simulate

HYPERPARAMETERS = {
    "lr": {"type": "log", "minval": -5, "maxval": -1},
    "width": {"type": "int", "minval": 16, "maxval": 512},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam", "adamw"]},
    "global_batch_size": 64,
}


def objective(hparams: dict, length: int, trial_seed: int) -> float:
    """A synthetic loss: best near lr=1e-3, width 256, dropout 0.1, falling with length
    (batches); a little per-trial noise from the trial seed."""
    loss = (math.log10(hparams["lr"]) + 3) ** 2 + (hparams["width"] - 256) ** 2 / 65536
    loss += (hparams["dropout"] - 0.1) ** 2 + (hparams["optimizer"] == "sgd") * 0.05
    return loss + 10.0 / (1 + length) + (trial_seed % 1000) * 1e-5


def configs(trials: int) -> dict[str, ExperimentConfig]:
    base = {"metric": "loss", "max_trials": trials, "max_concurrent_trials": 64}
    return {
        "random": parse_experiment_config(
            {
                "searcher": {**base, "name": "random", "max_length": {"batches": 1000}},
                "hyperparameters": HYPERPARAMETERS,
            }
        ),
        "adaptive_asha": parse_experiment_config(
            {
                "searcher": {
                    **base,
                    "name": "adaptive_asha",
                    "max_time": 1000,
                    "time_metric": "batches",
                    "mode": "standard",
                },
                "hyperparameters": HYPERPARAMETERS,
            }
        ),
    }


def run(name: str, config: ExperimentConfig, seed: int, repeat: int) -> None:
    best_time = math.inf
    result: SimulationResult
    for _ in range(repeat):
        start = time.perf_counter()
        result = simulate(config, objective, seed)
        best_time = min(best_time, time.perf_counter() - start)
    print(
        f"{name:>14}: {len(result.trials):6d} trials in {best_time:6.2f} s "
        f"= {len(result.trials) / best_time:9.0f} trials/s; "
        f"{result.total_batches} batches simulated, best loss {result.best_metric:.4f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000, help="max_trials per search")
    parser.add_argument("--seed", type=int, default=0, help="experiment seed")
    parser.add_argument("--repeat", type=int, default=3, help="runs per searcher (best kept)")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.repeat < 1:
        parser.error("--trials and --repeat must be >= 1")
    for name, config in configs(args.trials).items():
        run(name, config, args.seed, args.repeat)


if __name__ == "__main__":
    main()
