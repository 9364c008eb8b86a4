"""ASHA vs random search on the digits task, with the same budget of training batches.

For each experiment seed of a seed set, an ``adaptive_asha`` search runs first; then a
``random`` search over the same space gets the batches ASHA spent, as whole trials of the
full length (``max_trials = ASHA's batches // max_length``). Both are driven by the pure
simulator (:func:`dauntless.searcher.simulate`, one trial at a time) against an
objective that really trains the digits example's MLP in this process with torch for
the requested number of batches and answers its validation accuracy. A trial's model,
optimizer, data order and RNG state are kept between its validations, so a promoted
trial continues from its previous rung instead of training again; each trial has its
own torch RNG state, so its results do not depend on what ran in between.

Figures per seed and search: trials created, batches trained in all, the best validation
accuracy found, and the batches spent (by all trials, in the order the simulator ran
them) until a validation first reached the target accuracy. With one trial at a time
that count is exact. The same experiment seed draws the same hyperparameters in the same
order for both searchers, so random search trains ASHA's first trials to the end: a
paired comparison.

Algorithm: Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys
2020); the searchers are ``dauntless.searcher``'s.

``--suite model`` (issue 35) compares instead the model-based searchers (``tpe``, ASHA
with ``sampler: tpe``) with random search, Optuna alone and Ray Tune on Branin,
Hartmann-6 with noise and the digits MLP, and times a proposal at 1,000 observations:
see ``benchmarks/_search_model.py``. Ray Tune is not a test dependency: ``pip install
'ray[tune]'`` for it (``--no-ray`` skips it).

Usage::

    python benchmarks/search_efficiency.py [--seeds 10] [--first-seed 0]
        [--max-trials 64] [--max-length 640] [--divisor 4] [--mode standard]
        [--target 0.98]
    python benchmarks/search_efficiency.py --suite model [--seeds 10] [--no-ray]
        [--no-digits | --only-digits] [--no-cost] [--no-asha] [--gp]
        [--problems branin,hartmann6] [--tpe-options '{"n_startup_trials": 5}']
        [--asha-options '{...}'] [--asha-trials-r64 256]
    python benchmarks/search_efficiency.py --suite pbt [--seeds 10] [--no-ray]

``--suite pbt`` compares Dauntless's ``pbt`` with Ray Tune's PopulationBasedTraining on
a learning-rate schedule problem: see ``benchmarks/_search_pbt.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dauntless.config import ExperimentConfig, parse_experiment_config
from dauntless.searcher import simulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples" / "digits"))
from model_def import NUM_CLASSES, split_digits  # noqa: E402  (the example's own data split)

HYPERPARAMETERS: dict[str, Any] = {
    "global_batch_size": 32,
    "lr": {"type": "log", "base": 10, "minval": -4.0, "maxval": -1.0},
    "hidden_size": {"type": "int", "minval": 8, "maxval": 256},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
}
"""The space of ``examples/digits/adaptive.yaml`` (Adam, batches of 32)."""


def make_model(hidden_size: int, dropout: float) -> nn.Module:
    """The digits example's MLP: ``Linear(64, h) -> ReLU -> Dropout -> Linear(h, 10)``;
    input ``[batch, 64]`` floats in [0, 1], output ``[batch, 10]`` logits."""
    return nn.Sequential(
        nn.Linear(64, hidden_size),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_size, NUM_CLASSES),
    )


@dataclass
class _TrialState:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    shuffle: torch.Generator
    rng_state: torch.Tensor
    batch_size: int
    batches: int = 0
    order: torch.Tensor | None = None
    position: int = 0


@dataclass
class DigitsObjective:
    """An objective for :func:`dauntless.searcher.simulate` that trains for real.

    ``objective(hparams, length, trial_seed)`` trains the trial (identified by its seed
    and hyperparameters) from where it stopped to ``length`` batches in all (shuffled
    epochs of the 1,438 training images, incomplete last batch dropped, as the example's
    DataLoader does), then returns its accuracy on the 359 validation images.

    Attributes:
        spent: batches trained by all trials so far.
        events: ``(spent, accuracy)`` after each validation, in the order they ran.
    """

    validation_fraction: float = 0.2
    split_seed: int = 0
    spent: int = 0
    events: list[tuple[int, float]] = field(default_factory=list)
    _trials: dict[str, _TrialState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        train, val = split_digits(self.validation_fraction, self.split_seed)
        self._x, self._y = train.tensors
        self._vx, self._vy = val.tensors
        self._loss = nn.CrossEntropyLoss()

    def _state(self, hparams: dict[str, Any], trial_seed: int) -> _TrialState:
        key = json.dumps([trial_seed, hparams], sort_keys=True)
        state = self._trials.get(key)
        if state is None:
            outer = torch.get_rng_state()
            torch.manual_seed(trial_seed)
            model = make_model(int(hparams["hidden_size"]), float(hparams["dropout"]))
            state = _TrialState(
                model=model,
                optimizer=torch.optim.Adam(model.parameters(), lr=float(hparams["lr"])),
                shuffle=torch.Generator().manual_seed(trial_seed),
                rng_state=torch.get_rng_state(),
                batch_size=int(hparams["global_batch_size"]),
            )
            torch.set_rng_state(outer)
            self._trials[key] = state
        return state

    def _train(self, state: _TrialState, batches: int) -> None:
        per_epoch = len(self._x) // state.batch_size
        outer = torch.get_rng_state()
        torch.set_rng_state(state.rng_state)  # the trial's own dropout randomness
        state.model.train()
        for _ in range(batches):
            if state.order is None or state.position == per_epoch:
                state.order = torch.randperm(len(self._x), generator=state.shuffle)
                state.position = 0
            start = state.position * state.batch_size
            idx = state.order[start : start + state.batch_size]
            state.position += 1
            loss = self._loss(state.model(self._x[idx]), self._y[idx])
            state.optimizer.zero_grad()
            loss.backward()
            state.optimizer.step()
        state.rng_state = torch.get_rng_state()
        torch.set_rng_state(outer)

    def __call__(self, hparams: dict[str, Any], length: int, trial_seed: int) -> float:
        """Train to ``length`` batches and return the validation accuracy (0..1).

        Raises:
            ValueError: if ``length`` is below what the trial already trained (a searcher
                never asks a trial to go back).
        """
        state = self._state(hparams, trial_seed)
        if length < state.batches:
            raise ValueError(
                f"trial {trial_seed} already trained {state.batches} batches; cannot "
                f"validate at {length}"
            )
        self._train(state, length - state.batches)
        self.spent += length - state.batches
        state.batches = length
        state.model.eval()
        with torch.no_grad():
            accuracy = (state.model(self._vx).argmax(dim=1) == self._vy).float().mean().item()
        self.events.append((self.spent, accuracy))
        return accuracy

    def batches_to(self, target: float) -> int | None:
        """Batches spent until a validation first reached ``target`` accuracy; None if
        none did."""
        return next((spent for spent, acc in self.events if acc >= target), None)


def search_config(searcher: dict[str, Any]) -> ExperimentConfig:
    """An experiment config over :data:`HYPERPARAMETERS` with the given searcher block
    (metric ``accuracy``, larger is better)."""
    return parse_experiment_config(
        {
            "name": "digits-search-efficiency",
            "hyperparameters": HYPERPARAMETERS,
            "searcher": {"metric": "accuracy", "smaller_is_better": False, **searcher},
        }
    )


@dataclass
class Outcome:
    """One search's figures: trials, batches, best accuracy, batches until the target
    (None: never reached), wall seconds."""

    trials: int
    batches: int
    best: float
    to_target: int | None
    seconds: float


def run_search(config: ExperimentConfig, seed: int, target: float) -> Outcome:
    """Simulate one search (one trial at a time) with a fresh :class:`DigitsObjective`."""
    objective = DigitsObjective()
    start = time.perf_counter()
    result = simulate(config, objective, seed, max_concurrent=1)
    return Outcome(
        trials=len(result.trials),
        batches=result.total_batches,
        best=float(result.best_metric or 0.0),
        to_target=objective.batches_to(target),
        seconds=time.perf_counter() - start,
    )


def compare(seed: int, args: argparse.Namespace) -> tuple[Outcome, Outcome]:
    """ASHA, then random search with ASHA's batches as whole full-length trials."""
    asha = run_search(
        search_config(
            {
                "name": "adaptive_asha",
                "max_trials": args.max_trials,
                "max_time": args.max_length,
                "time_metric": "batches",
                "divisor": args.divisor,
                "mode": args.mode,
            }
        ),
        seed,
        args.target,
    )
    random = run_search(
        search_config(
            {
                "name": "random",
                "max_trials": max(asha.batches // args.max_length, 1),
                "max_length": {"batches": args.max_length},
            }
        ),
        seed,
        args.target,
    )
    return asha, random


def _cell(n: int | None) -> str:
    return "-" if n is None else str(n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="number of experiment seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="the first experiment seed")
    parser.add_argument("--max-trials", type=int, default=64, help="ASHA's max_trials")
    parser.add_argument(
        "--max-length",
        type=int,
        default=640,
        help="full training length in batches (ASHA max_time, random max_length)",
    )
    parser.add_argument("--divisor", type=float, default=4.0, help="ASHA divisor")
    parser.add_argument(
        "--mode",
        default="standard",
        choices=["aggressive", "standard", "conservative"],
        help="ASHA mode",
    )
    parser.add_argument(
        "--target", type=float, default=0.98, help="target validation accuracy (0..1)"
    )
    parser.add_argument(
        "--suite", default="asha", choices=["asha", "model", "pbt"], help="which comparison to run"
    )
    parser.add_argument("--no-ray", action="store_true", help="model and pbt suites: skip Ray Tune")
    parser.add_argument(
        "--ray-priority",
        type=int,
        default=0,
        choices=range(21),
        metavar="0..20",
        help="start Ray's node at this niceness decrement (root; see _search_model._start_ray)",
    )
    parser.add_argument("--no-digits", action="store_true", help="model suite: skip digits")
    parser.add_argument(
        "--no-cost", action="store_true", help="model suite: skip the proposal-cost timings"
    )
    parser.add_argument(
        "--gp",
        action="store_true",
        help="model suite: also Dauntless gp on the synthetic problems (minutes of CPU)",
    )
    parser.add_argument(
        "--problems",
        default="branin,hartmann6",
        help="model suite: synthetic problems to run (comma-separated; '' for none)",
    )
    parser.add_argument(
        "--no-asha", action="store_true", help="model suite: skip ASHA and ASHA+TPE"
    )
    parser.add_argument(
        "--asha-options",
        default="",
        help="model suite: ASHA+TPE's sampler_options as JSON",
    )
    parser.add_argument(
        "--asha-trials-r64",
        type=int,
        default=256,
        help="model suite: max_trials of the ASHA and ASHA+TPE searches measured against "
        "random search's best of 64",
    )
    parser.add_argument(
        "--tpe-options",
        default="",
        help="model suite: tpe's sampler_options as JSON (also given to Optuna and Ray)",
    )
    parser.add_argument(
        "--only-digits", action="store_true", help="model suite: digits only, no timing"
    )
    args = parser.parse_args(argv)
    if args.suite == "pbt":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _search_pbt

        _search_pbt.run(args)
        return
    if args.suite == "model":
        torch.set_num_threads(1)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _search_model

        _search_model.run(args, DigitsObjective)
        return
    if args.seeds < 1 or args.max_trials < 1 or args.max_length < 1:
        parser.error("--seeds, --max-trials and --max-length must be >= 1")
    if not 0.0 < args.target <= 1.0:
        parser.error("--target must be in (0, 1]")
    torch.set_num_threads(1)

    print(
        f"digits MLP, lr/hidden_size/dropout as in examples/digits/adaptive.yaml; "
        f"full length {args.max_length} batches; ASHA max_trials {args.max_trials}, "
        f"divisor {args.divisor:g}, mode {args.mode}; target accuracy {args.target}"
    )
    header = (
        f"{'seed':>4} | {'ASHA trials':>11} {'batches':>8} {'best acc':>8} "
        f"{'to target':>9} | {'random trials':>13} {'batches':>8} {'best acc':>8} "
        f"{'to target':>9}"
    )
    print(header)
    print("-" * len(header))
    rows: list[tuple[Outcome, Outcome]] = []
    started = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        asha, rnd = compare(seed, args)
        rows.append((asha, rnd))
        print(
            f"{seed:>4} | {asha.trials:>11} {asha.batches:>8} {asha.best:>8.4f} "
            f"{_cell(asha.to_target):>9} | {rnd.trials:>13} {rnd.batches:>8} "
            f"{rnd.best:>8.4f} {_cell(rnd.to_target):>9}",
            flush=True,
        )

    asha_best = statistics.mean(a.best for a, _ in rows)
    rnd_best = statistics.mean(r.best for _, r in rows)
    print(
        f"\nmean best accuracy: ASHA {asha_best:.4f}, random {rnd_best:.4f} "
        f"(ASHA / random = {asha_best / rnd_best:.4f}); ASHA better on "
        f"{sum(a.best > r.best for a, r in rows)}, equal on "
        f"{sum(a.best == r.best for a, r in rows)}, worse on "
        f"{sum(a.best < r.best for a, r in rows)} of {len(rows)} seeds"
    )
    print(
        f"mean batches trained: ASHA {statistics.mean(a.batches for a, _ in rows):.0f}, "
        f"random {statistics.mean(r.batches for _, r in rows):.0f}"
    )
    reached_a = [a.to_target for a, _ in rows if a.to_target is not None]
    reached_r = [r.to_target for _, r in rows if r.to_target is not None]
    print(
        f"target {args.target} reached: ASHA on {len(reached_a)}, random on "
        f"{len(reached_r)} of {len(rows)} seeds"
    )
    both = [
        (a.to_target, r.to_target)
        for a, r in rows
        if a.to_target is not None and r.to_target is not None
    ]
    if both:
        med_a = statistics.median(a for a, _ in both)
        med_r = statistics.median(r for _, r in both)
        print(
            f"batches until the target, median over the {len(both)} seeds where both "
            f"reached it: ASHA {med_a:.0f}, random {med_r:.0f} "
            f"(random / ASHA = {med_r / med_a:.2f}x)"
        )
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
