"""The Pareto front of a multi-objective search."""

from __future__ import annotations

import math
from collections.abc import Sequence


def pareto_front(points: Sequence[Sequence[float]], smaller_is_better: Sequence[bool]) -> list[int]:
    """The indexes of the non-dominated points, ascending.

    A point dominates another when it is at least as good in every objective and better
    in one (Deb et al., 2002, the definition NSGA-II ranks by). Points with a non-finite
    value are never on the front. O(n² · m) for n points of m objectives: a front is
    computed over one experiment's trials.

    Args:
        points: one value per objective for each point.
        smaller_is_better: per objective, whether smaller values are better.

    Returns:
        Indexes into ``points``; equal points are all on the front.

    Raises:
        ValueError: a point has not one value per objective.
    """
    m = len(smaller_is_better)
    signed: list[tuple[float, ...] | None] = []
    for i, p in enumerate(points):
        if len(p) != m:
            raise ValueError(f"point {i} has {len(p)} values; expected {m} (one per objective)")
        vals = tuple(
            float(v) if s else -float(v) for v, s in zip(p, smaller_is_better, strict=True)
        )
        signed.append(vals if all(math.isfinite(v) for v in vals) else None)
    front = []
    for i, a in enumerate(signed):
        if a is None:
            continue
        dominated = False
        for j, b in enumerate(signed):
            if j == i or b is None:
                continue
            if all(y <= x for x, y in zip(a, b, strict=True)) and any(
                y < x for x, y in zip(a, b, strict=True)
            ):
                dominated = True
                break
        if not dominated:
            front.append(i)
    return front
