"""The decision math of adaptive ASHA as pure functions.

Algorithm: asynchronous successive halving (Li et al., "A System for Massively Parallel
Hyperparameter Tuning", MLSys 2020) run as several brackets, the "adaptive" layout of
Determined's ``adaptive_asha`` searcher (reference §2.4, steps 1-6). Lengths here are in
the unit of the config's training length (batches for ``max_time``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

Mode = Literal["aggressive", "standard", "conservative"]


def floor_log(x: float, base: float) -> int:
    """The largest ``k >= 0`` with ``base ** k <= x``: ``int(log(x) / log(base))`` made
    exact where floating point lands just below an integer (``log(1000) / log(10)``).

    Raises:
        ValueError: unless ``x >= 1`` and ``base > 1``.
    """
    if not x >= 1:
        raise ValueError(f"x must be >= 1, got {x!r}")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    k = int(math.log(x) / math.log(base))
    while base ** (k + 1) <= x:
        k += 1
    while k > 0 and base**k > x:
        k -= 1
    return k


def num_rungs(max_time: int, max_trials: int, divisor: float, max_rungs: int) -> int:
    """Rungs of the deepest bracket: ``min(max_rungs, floor_log(T) + 1, floor_log(N) + 1)``.

    Args:
        max_time: T, the full training length (≥ 1).
        max_trials: N, trials in the whole search (≥ 1).
        divisor: D (> 1).
        max_rungs: the config's cap (≥ 1).
    """
    if max_rungs < 1:
        raise ValueError(f"max_rungs must be >= 1, got {max_rungs}")
    return min(max_rungs, floor_log(max_time, divisor) + 1, floor_log(max_trials, divisor) + 1)


def bracket_rungs(mode: Mode, rungs: int) -> list[int]:
    """Rungs per bracket, deepest first: aggressive ``[R]``; standard
    ``[R, R-1, ..., (R-1)//2 + 1]``; conservative ``[R, ..., 1]``.

    Raises:
        ValueError: for an unknown mode or ``rungs < 1``.
    """
    if rungs < 1:
        raise ValueError(f"rungs must be >= 1, got {rungs}")
    if mode == "aggressive":
        return [rungs]
    if mode == "standard":
        return list(range(rungs, (rungs - 1) // 2, -1))
    if mode == "conservative":
        return list(range(rungs, 0, -1))
    raise ValueError(f"mode must be aggressive, standard or conservative, got {mode!r}")


def bracket_trials(rungs: list[int], divisor: float, max_trials: int) -> list[int]:
    """Trials per bracket: weight ``D**(r-1) / r`` each, ``max(int(w / sum(w) * N), 1)``,
    and what rounding left of N goes to the first bracket.

    Args:
        rungs: rungs of each bracket (from :func:`bracket_rungs`).
        divisor: D.
        max_trials: N.
    """
    if not rungs or min(rungs) < 1:
        raise ValueError(f"rungs must be a non-empty list of ints >= 1, got {rungs}")
    weights = [divisor ** (r - 1) / r for r in rungs]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    rest = max_trials - sum(trials)
    if rest > 0:
        trials[0] += rest
    return trials


def bracket_concurrency(max_concurrent_trials: int, divisor: float, trials: list[int]) -> list[int]:
    """Concurrent trials per bracket.

    With ``max_concurrent_trials == 0`` every bracket gets ``max(trials[-1], int(D))``;
    otherwise ``M = max(max_concurrent_trials, len(trials))`` is split evenly, the first
    ``M % len(trials)`` brackets getting one more.
    """
    if max_concurrent_trials < 0:
        raise ValueError(f"max_concurrent_trials must be >= 0, got {max_concurrent_trials}")
    n = len(trials)
    if max_concurrent_trials == 0:
        return [max(trials[-1], int(divisor))] * n
    m = max(max_concurrent_trials, n)
    return [m // n + (1 if i < m % n else 0) for i in range(n)]


def rung_lengths(max_time: int, divisor: float, rungs: int) -> list[int]:
    """Training length of each rung: ``max(int(T / D**(r-1-i)), 1)`` for rung ``i``; the
    top rung is T."""
    return [max(int(max_time / divisor ** (rungs - 1 - i)), 1) for i in range(rungs)]


def promotion_quota(results: int, divisor: float) -> int:
    """How many of a rung's ``results`` (best first) continue: ``max(int(n / D), 1)``."""
    return max(int(results / divisor), 1)


def insert_result(values: list[float], value: float) -> int:
    """Insert ``value`` into ascending ``values`` after any equal ones; return its index.

    Ties go to the trial that reported first.
    """
    index = bisect.bisect_right(values, value)
    values.insert(index, value)
    return index


@dataclass(frozen=True)
class BracketPlan:
    """One bracket of adaptive ASHA.

    Attributes:
        rungs: number of rungs.
        trials: trials it creates (not counting those with invalid hyperparameters).
        max_concurrent: trials it runs at once.
        lengths: rung training lengths, ascending, in the config's length unit.
    """

    rungs: int
    trials: int
    max_concurrent: int
    lengths: tuple[int, ...]


def plan_brackets(
    *,
    max_time: int,
    max_trials: int,
    divisor: float,
    mode: Mode = "standard",
    max_rungs: int = 5,
    bracket_rungs_override: list[int] | None = None,
    max_concurrent_trials: int = 16,
) -> list[BracketPlan]:
    """The brackets of an adaptive ASHA search (reference §2.4 steps 1-3 and 5).

    Args:
        max_time: T, the full training length of a trial (≥ 1), in the config's unit.
        max_trials: N (≥ 1).
        divisor: D (> 1).
        mode: how many brackets (see :func:`bracket_rungs`).
        max_rungs: cap on rungs.
        bracket_rungs_override: explicit rungs per bracket (``searcher.bracket_rungs``);
            empty or None to derive them from ``mode``.
        max_concurrent_trials: for the whole search; 0 derives it per bracket.

    Returns:
        The brackets, deepest first.

    Raises:
        ValueError: if an argument is out of range.
    """
    if max_time < 1:
        raise ValueError(f"max_time must be >= 1, got {max_time}")
    if max_trials < 1:
        raise ValueError(f"max_trials must be >= 1, got {max_trials}")
    if bracket_rungs_override:
        if min(bracket_rungs_override) < 1:
            raise ValueError(f"bracket_rungs must all be >= 1, got {bracket_rungs_override}")
        rungs = sorted(bracket_rungs_override, reverse=True)
    else:
        rungs = bracket_rungs(mode, num_rungs(max_time, max_trials, divisor, max_rungs))
    trials = bracket_trials(rungs, divisor, max_trials)
    concurrency = bracket_concurrency(max_concurrent_trials, divisor, trials)
    return [
        BracketPlan(r, n, c, tuple(rung_lengths(max_time, divisor, r)))
        for r, n, c in zip(rungs, trials, concurrency, strict=True)
    ]
