"""M4 downsampling of metric series (U. Jugel, Z. Jerzak, G. Hackenbroich, V. Markl, "M4:
A Visualization-Oriented Time Series Data Aggregation", PVLDB 7(10), 2014): :func:`m4`
on whole series and :class:`M4Series`, the incremental summary kept per trial, group and
metric. How and why is in the docstring of :mod:`dauntless.master.metric_series`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

CAP_BUCKETS = 256
"""Buckets a stored summary keeps (so at most ``4 * CAP_BUCKETS`` points)."""


def _bucket_count(x: np.ndarray, width: int) -> int:
    if x.size == 0:
        return 0
    b = x // width
    return int(np.count_nonzero(np.diff(b))) + 1


def m4_indices(x: np.ndarray, y: np.ndarray, width: int) -> np.ndarray:
    """Positions of the M4 points of a series sorted by ``x``.

    Args:
        x: shape (n,), integers (batches), ascending.
        y: shape (n,), finite floats.
        width: bucket width in units of ``x`` (batches), >= 1; bucket of a point: x // width.

    Returns:
        Ascending int positions into ``x``: per bucket the first, last, smallest-``y`` and
        largest-``y`` points (ties: the earliest), at most ``4 * buckets`` of them.

    Raises:
        ValueError: ``width`` < 1, or ``x`` and ``y`` differ in shape or are not 1-D.
    """
    if not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be an integer >= 1 (batches), got {width!r}")
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
    n = x.size
    if n == 0:
        return np.empty(0, dtype=np.int64)
    b = x // width
    starts = np.concatenate(([0], np.flatnonzero(np.diff(b)) + 1))
    lengths = np.diff(np.append(starts, n))
    bucket = np.repeat(np.arange(starts.size), lengths)  # each point's bucket number
    keep = np.zeros(n, dtype=bool)
    keep[starts] = True
    keep[starts + lengths - 1] = True
    for extreme in (np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts)):
        hits = np.flatnonzero(y == extreme[bucket])  # ascending, >= 1 per bucket
        first = np.ones(hits.size, dtype=bool)
        first[1:] = bucket[hits[1:]] != bucket[hits[:-1]]
        keep[hits[first]] = True  # the earliest extreme of each bucket
    return np.flatnonzero(keep)


def m4(x: np.ndarray, y: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """M4-downsample a series (any order) into buckets ``width`` batches wide.

    Args:
        x: shape (n,), integers (batches).
        y: shape (n,), finite floats.
        width: bucket width (batches), >= 1.

    Returns:
        ``(x, y)`` of the kept points, ascending in x; at most 4 per bucket.

    Raises:
        ValueError: as :func:`m4_indices`.
    """
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    keep = m4_indices(x, y, width)
    return x[keep], y[keep]


def _one_point(x: Any, y: Any) -> tuple[int, float] | None:
    """``(x[0], y[0])`` as int and float when ``x`` and ``y`` hold one number each (lists,
    tuples or 1-D arrays), else None."""
    if not isinstance(x, (list, tuple, np.ndarray)) or not isinstance(y, type(x)):
        return None
    if len(x) != 1 or len(y) != 1:
        return None
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and (x.ndim, y.ndim) != (1, 1):
        return None
    try:
        return int(x[0]), float(y[0])
    except (TypeError, ValueError):
        return None


_FEW = 64  # at most this many new points take the plain-Python path of M4Series.extend


def _few_points(x: Any, y: Any) -> tuple[list[int], list[float]] | None:
    """The finite points of lists ``x`` (ints) and ``y`` (floats) of one length 2..64,
    sorted by ``x`` (stably, as numpy's stable argsort orders them), else None (the
    caller takes the numpy path)."""
    if type(x) is not list or type(y) is not list or not 1 < len(x) == len(y) <= _FEW:
        return None
    if not all(type(a) is int for a in x) or not all(type(b) is float for b in y):
        return None
    pts = sorted(
        ((a, b) for a, b in zip(x, y, strict=True) if math.isfinite(b)), key=lambda p: p[0]
    )
    return [p[0] for p in pts], [p[1] for p in pts]


class M4Series:
    """An incremental M4 summary of one series (x: batches, y: a metric's values).

    Args:
        cap_buckets: the most buckets kept; the width doubles (from 1 batch) until the
            series fits, so at most ``4 * cap_buckets`` points are held.

    Raises:
        ValueError: ``cap_buckets`` < 1.
    """

    def __init__(self, cap_buckets: int = CAP_BUCKETS) -> None:
        if not isinstance(cap_buckets, int) or cap_buckets < 1:
            raise ValueError(f"cap_buckets must be an integer >= 1, got {cap_buckets!r}")
        self.cap_buckets = cap_buckets
        self.width = 1
        self.raw_points = 0
        self.x = np.empty(0, dtype=np.int64)
        self.y = np.empty(0, dtype=np.float64)

    @classmethod
    def restore(
        cls,
        width: int,
        raw_points: int,
        x: np.ndarray,
        y: np.ndarray,
        cap_buckets: int = CAP_BUCKETS,
    ) -> M4Series:
        """A summary from its stored state (what :meth:`extend` left).

        Args:
            width: bucket width (batches), a power of two >= 1.
            raw_points: finite points folded in so far, >= ``x.size``.
            x: shape (k,), batches, ascending; y: shape (k,), values.
            cap_buckets: as for the constructor.

        Raises:
            ValueError: ``width`` is not a power of two, ``raw_points`` < k, or ``x`` and
                ``y`` differ in shape.
        """
        if not isinstance(width, (int, np.integer)) or width < 1 or width & (width - 1):
            raise ValueError(f"width must be a power of two >= 1 (batches), got {width!r}")
        x = np.asarray(x, dtype=np.int64).reshape(-1)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if x.shape != y.shape:
            raise ValueError(f"x and y must have one length, got {x.size} and {y.size}")
        if raw_points < x.size:
            raise ValueError(f"raw_points ({raw_points}) must be >= the {x.size} points kept")
        out = cls(cap_buckets)
        out.width, out.raw_points, out.x, out.y = int(width), int(raw_points), x, y
        return out

    def extend(self, x: Sequence[int] | np.ndarray, y: Sequence[float] | np.ndarray) -> None:
        """Fold new points in (any order; non-finite values are dropped).

        Args:
            x: shape (k,), batches.
            y: shape (k,), values.

        Raises:
            ValueError: ``x`` and ``y`` differ in length.
        """
        one = _one_point(x, y)
        few = None if one is not None else _few_points(x, y)
        if one is not None:  # a report adds one point per metric: skip numpy for it
            if not math.isfinite(one[1]):
                return
            self.raw_points += 1
            if self.x.size and one[0] > self.x[-1] and self._append_few([one[0]], [one[1]]):
                return
            nx = np.array([one[0]], dtype=np.int64)
            ny = np.array([one[1]], dtype=np.float64)
        elif few is not None:  # a lazy fold adds a few points per metric: no numpy either
            fx, fy = few
            if not fx:
                return
            self.raw_points += len(fx)
            if self.x.size and fx[0] > self.x[-1] and self._append_few(fx, fy):
                return
            nx = np.array(fx, dtype=np.int64)
            ny = np.array(fy, dtype=np.float64)
        else:
            nx = np.asarray(x, dtype=np.int64).reshape(-1)
            ny = np.asarray(y, dtype=np.float64).reshape(-1)
            if nx.shape != ny.shape:
                raise ValueError(f"x and y must have one length, got {nx.size} and {ny.size}")
            ok = np.isfinite(ny)
            nx, ny = nx[ok], ny[ok]
            if nx.size == 0:
                return
            self.raw_points += int(nx.size)
        if self.x.size and nx.min() > self.x[-1] and self._append(nx, ny):
            return
        xs = np.concatenate((self.x, nx))
        ys = np.concatenate((self.y, ny))
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        while _bucket_count(xs, self.width) > self.cap_buckets:
            self.width *= 2
        keep = m4_indices(xs, ys, self.width)
        self.x, self.y = xs[keep], ys[keep]

    def _append_few(self, xs: list[int], ys: list[float]) -> bool:
        """:meth:`_append` in plain Python for a few points (ascending in ``xs``, all
        after the kept ones): the same result (M4 keeps, per bucket, the first, the last
        and the earliest smallest and largest points), without numpy's per-call cost,
        which dominates for the handful of points a report or a lazy fold adds to each
        metric. False (nothing changed) when the buckets from the first kept one's to
        the last new point's are more than ``cap_buckets``: a bound on the bucket count,
        so :meth:`_append` then decides exactly."""
        width = self.width
        if xs[-1] // width - int(self.x[0]) // width + 1 > self.cap_buckets:
            return False
        start = self.x.size
        if xs[0] // width == int(self.x[-1]) // width:  # the last kept bucket grows
            start = int(np.searchsorted(self.x, (xs[0] // width) * width))
        tx = [*self.x[start:].tolist(), *xs]
        ty = [*self.y[start:].tolist(), *ys]
        kx: list[int] = []
        ky: list[float] = []
        i, n = 0, len(tx)
        while i < n:
            bucket = tx[i] // width
            j = i + 1
            while j < n and tx[j] // width == bucket:
                j += 1
            seg = ty[i:j]
            for k in sorted({i, j - 1, i + seg.index(min(seg)), i + seg.index(max(seg))}):
                kx.append(tx[k])
                ky.append(ty[k])
            i = j
        self.x = np.concatenate((self.x[:start], np.array(kx, dtype=np.int64)))
        self.y = np.concatenate((self.y[:start], np.array(ky, dtype=np.float64)))
        return True

    def _append(self, nx: np.ndarray, ny: np.ndarray) -> bool:
        """Fold in points that all come after the kept ones without a wider bucket; False
        (nothing changed) when the buckets would not fit. Only buckets from the first new
        point's on can change, so only their kept points are reduced again."""
        if nx.size > 1:
            order = np.argsort(nx, kind="stable")
            nx, ny = nx[order], ny[order]
        start = int(np.searchsorted(self.x, (int(nx[0]) // self.width) * self.width))
        tx = np.concatenate((self.x[start:], nx))
        if (
            _bucket_count(self.x[:start], self.width) + _bucket_count(tx, self.width)
            > self.cap_buckets
        ):
            return False
        ty = np.concatenate((self.y[start:], ny))
        keep = m4_indices(tx, ty, self.width)
        self.x = np.concatenate((self.x[:start], tx[keep]))
        self.y = np.concatenate((self.y[:start], ty[keep]))
        return True

    def points(self, max_points: int) -> tuple[np.ndarray, np.ndarray]:
        """The series in at most ``max_points`` points (M4 at the finest width that fits).

        Args:
            max_points: >= 4.

        Raises:
            ValueError: ``max_points`` < 4.
        """
        if max_points < 4:
            raise ValueError(f"max_points must be >= 4, got {max_points}")
        if self.x.size <= max_points:
            return self.x, self.y
        width = self.width
        while _bucket_count(self.x, width) > max_points // 4:
            width *= 2
        keep = m4_indices(self.x, self.y, width)
        return self.x[keep], self.y[keep]
