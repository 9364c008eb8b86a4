"""Hyperparameter spaces: random sampling and grid points.

Rules from Determined's searcher (reference §2.1 and §2.3), with one change: nested
hyperparameters are walked in sorted key order (Determined iterates a Go map there, which
makes nested sampling order non-deterministic).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dauntless.config import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP

from ._errors import SearcherConfigError
from ._rng import check_rng


def sample_hparams(
    hyperparameters: Mapping[str, Any], rng: np.random.RandomState
) -> dict[str, Any]:
    """Draw one set of hyperparameter values.

    Keys are visited in sorted order at every nesting level, and each leaf draws from
    ``rng`` as follows (Determined's rules, reference §2.1):

    - const: its value, no draw;
    - int: ``minval + rng.randint(0, maxval - minval + 1)`` (both ends included);
    - double: ``minval + (maxval - minval) * rng.random_sample()`` (``[minval, maxval)``);
    - log: ``base ** e`` with ``e`` drawn as a double in ``[minval, maxval)``;
    - categorical: ``vals[rng.randint(0, len(vals))]``.

    Args:
        hyperparameters: parsed hyperparameters (``ExperimentConfig.hyperparameters``):
            names to :class:`~dauntless.config.ConstHP`, ``IntHP``, ``DoubleHP``,
            ``LogHP``, ``CategoricalHP``, or a dict of nested hyperparameters.
        rng: the experiment RNG; it is advanced.

    Returns:
        Plain JSON values, nested dicts for nested hyperparameters; constants and
        categorical values are deep copies.

    Raises:
        TypeError: if ``rng`` is not a ``numpy.random.RandomState`` or a leaf is not a
            parsed hyperparameter (the message names it).
    """
    check_rng(rng)
    return _sample(hyperparameters, rng, "hyperparameters")


def _sample(hps: Mapping[str, Any], rng: np.random.RandomState, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(hps):
        hp = hps[name]
        where = f"{path}.{name}"
        if isinstance(hp, Mapping):
            out[name] = _sample(hp, rng, where)
        elif isinstance(hp, ConstHP):
            out[name] = copy.deepcopy(hp.val)
        elif isinstance(hp, IntHP):
            out[name] = hp.minval + int(rng.randint(0, hp.maxval - hp.minval + 1))
        elif isinstance(hp, DoubleHP):
            out[name] = hp.minval + (hp.maxval - hp.minval) * float(rng.random_sample())
        elif isinstance(hp, LogHP):
            exponent = hp.minval + (hp.maxval - hp.minval) * float(rng.random_sample())
            out[name] = float(hp.base**exponent)
        elif isinstance(hp, CategoricalHP):
            out[name] = copy.deepcopy(hp.vals[int(rng.randint(0, len(hp.vals)))])
        else:
            raise TypeError(
                f"{where}: expected a parsed hyperparameter (ConstHP, IntHP, DoubleHP, "
                f"LogHP, CategoricalHP or a dict of them), got {type(hp).__name__}"
            )
    return out


def round_half_away(x: float) -> int:
    """Round to the nearest int, halves away from zero (Go's ``math.Round``)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def _spaced(lo: float, hi: float, count: int) -> list[float]:
    """``count`` evenly spaced values from ``lo`` to ``hi`` (both ends); one: the midpoint."""
    if count == 1:
        return [(lo + hi) / 2]
    return [lo + (hi - lo) * i / (count - 1) if i < count - 1 else hi for i in range(count)]


def grid_axis(hp: Any, path: str) -> list[Any]:
    """The grid values of one leaf hyperparameter (reference §2.3).

    - const: ``[val]``; categorical: ``vals``;
    - int: ``count`` is capped at ``maxval - minval + 1``; one value is the rounded
      midpoint, more are ``minval + i * (maxval - minval) / (count - 1)`` rounded (halves
      away from zero);
    - double: one value is the midpoint, more are evenly spaced including both ends;
    - log: the double rule on the exponents, each value ``base ** e``.

    Args:
        hp: a parsed leaf hyperparameter.
        path: its dotted path, for error messages.

    Returns:
        The axis values, in order.

    Raises:
        SearcherConfigError: for an int, double or log hyperparameter without ``count``.
        TypeError: if ``hp`` is not a parsed leaf hyperparameter.
    """
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if isinstance(hp, (IntHP, DoubleHP, LogHP)):
        if hp.count is None:
            raise SearcherConfigError(
                path,
                f"grid search needs 'count' for a {hp.type} hyperparameter (how many values "
                f"to try between minval and maxval), for example count: 3",
            )
        if isinstance(hp, IntHP):
            count = min(hp.count, hp.maxval - hp.minval + 1)
            return [round_half_away(v) for v in _spaced(hp.minval, hp.maxval, count)]
        values = _spaced(hp.minval, hp.maxval, hp.count)
        if isinstance(hp, LogHP):
            return [float(hp.base**e) for e in values]
        return values
    raise TypeError(f"{path}: expected a parsed hyperparameter, got {type(hp).__name__}")


class GridSpace:
    """The cartesian product of every leaf's grid axis, indexed without materializing it.

    Axes are the leaves in sorted path order (nested hyperparameters expanded; an empty
    nested mapping is a single ``{}``). Point 0 takes every axis's first value; the last
    axis varies fastest and the first slowest.

    Args:
        hyperparameters: parsed hyperparameters (``ExperimentConfig.hyperparameters``).

    Raises:
        SearcherConfigError: for an int, double or log hyperparameter without ``count``.
    """

    def __init__(self, hyperparameters: Mapping[str, Any]) -> None:
        self._axes: list[tuple[tuple[str, ...], list[Any]]] = []
        self._collect(hyperparameters, ())
        self.size = math.prod(len(values) for _, values in self._axes)

    def _collect(self, hps: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for name in sorted(hps):
            hp = hps[name]
            path = (*prefix, name)
            if isinstance(hp, Mapping):
                if hp:
                    self._collect(hp, path)
                else:
                    self._axes.append((path, [{}]))
            else:
                self._axes.append((path, grid_axis(hp, "hyperparameters." + ".".join(path))))

    def point(self, index: int) -> dict[str, Any]:
        """The hyperparameter values of grid point ``index`` (deep copies).

        Raises:
            IndexError: unless ``0 <= index < size``.
        """
        if not 0 <= index < self.size:
            raise IndexError(f"grid point {index} out of range 0..{self.size - 1}")
        chosen: list[Any] = []
        for _, values in reversed(self._axes):
            index, i = divmod(index, len(values))
            chosen.append(values[i])
        out: dict[str, Any] = {}
        for (path, _), value in zip(self._axes, reversed(chosen), strict=True):
            node = out
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = copy.deepcopy(value)
        return out


def grid_points(hyperparameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every grid point, first axis (in sorted name order) varying slowest.

    Args:
        hyperparameters: parsed hyperparameters (``ExperimentConfig.hyperparameters``).

    Returns:
        ``product(len(axis))`` dicts of hyperparameter values.

    Raises:
        SearcherConfigError: for an int, double or log hyperparameter without ``count``.
    """
    space = GridSpace(hyperparameters)
    return [space.point(i) for i in range(space.size)]
