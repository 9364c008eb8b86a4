"""Metric series of an experiment's trials, downsampled on the server for charts.

The algorithm is M4 (U. Jugel, Z. Jerzak, G. Hackenbroich, V. Markl, "M4: A
Visualization-Oriented Time Series Data Aggregation", PVLDB 7(10), 2014): the x axis
(batches) is cut into buckets of equal width, and in each bucket only the first and last
points and the points with the smallest and largest value are kept, at most 4 points per
bucket. A line drawn through them covers the same pixels as one drawn through every
point when a bucket is at most one pixel column wide, so spikes and dips stay visible.

Buckets are ``x // width`` with ``width`` a power of two (batches), so the buckets of one
width nest exactly in those of twice the width, and M4 of M4-reduced points equals M4 of
the raw points. That makes the summary of a series incremental: :class:`M4Series` keeps
at most ``4 * cap_buckets`` points however long the series grows, doubling its width when
it has too many buckets, and new reports are folded in without reading old ones again.

The summaries live in the database (``metric_summaries``, one row per trial, group and
metric; :class:`~dauntless.master.db.models.MetricSummaryRow`), so a chart
(:func:`read_experiment_series`) reads at most ``4 * CAP_BUCKETS`` points per series,
never the ``metrics`` table, and a restarted master has them at once.

Reports are folded in lazily and in bulk (issue 19): the transaction that stores a
report (one ``metrics`` row) also adds a ``metric_folds_pending`` row for it
(:func:`queue_metric_folds`) and is acknowledged when it commits; :class:`MetricFolder`
folds what is pending every :data:`FOLD_INTERVAL` seconds, many reports of a trial per
transaction (:func:`fold_pending`, :func:`fold_metric_reports`), and every reader folds
what is pending for its trials first, so no answer misses an acknowledged report. A
restarted master folds what was pending when it stopped. Folding k reports at once costs
about what folding one does (a read and a write of each summary), and gives the same
summaries byte for byte. The invariant: the summaries of a (trial, group) are the fold of
exactly its ``metrics`` rows that have no pending row.

Reports stored before the summaries table existed (an upgraded database) are summarised
from the ``metrics`` rows once per trial and group, on first use
(:func:`build_missing_summaries`), then kept.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import orjson
from sqlalchemy import Text, bindparam, cast, delete, exists, insert, select, update
from sqlalchemy.orm import Session

from .db import Database, ExperimentRow, MetricRow, TrialRow
from .db.models import MetricFoldPendingRow, MetricSummaryRow
from .errors import NotFound

log = logging.getLogger("dauntless.master.metric_series")

MAX_POINTS = 1024
"""The most points per series an answer may ask for (``max_points``)."""

CAP_BUCKETS = 256
"""Buckets a stored summary keeps (so at most ``4 * CAP_BUCKETS`` points)."""

POINT_BUDGET = 200_000
"""The most points in one answer over all series: with many trials each series gets
``POINT_BUDGET // trials`` (at least 8)."""

MAX_NAME_LENGTH = 256
"""The longest metric name that is summarised (characters)."""

FOLD_INTERVAL = 5.0
"""Seconds between the background folds of pending reports (:class:`MetricFolder`)."""

FOLD_PAUSE = 0.01
"""Seconds the background fold sleeps between trials (see :func:`fold_pending`)."""

FOLD_CHUNK = 1000
"""The most pending reports of one (trial, group) folded in one write transaction."""

_IN_CHUNK = 500  # trial ids per IN (...) list
_BUILD_CHUNK = 16  # trials summarised from metrics rows per write transaction
_X_DTYPE = np.dtype("<i8")  # stored batches: little-endian int64
_Y_DTYPE = np.dtype("<f8")  # stored values: little-endian float64


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


def check_metric_name(name: str) -> str:
    """``name`` if it can be summarised and asked for.

    Raises:
        ValueError: not a string, empty, longer than :data:`MAX_NAME_LENGTH`, or holding a
            double quote or a control character.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"metric name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"metric name must be at most {MAX_NAME_LENGTH} characters, got {len(name)}"
        )
    if '"' in name or any(ord(c) < 32 for c in name):
        raise ValueError(f"metric name {name!r} must hold no double quote or control character")
    return name


def _chartable(name: Any, value: Any) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool) and ``name`` a
    metric name :func:`check_metric_name` accepts; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(f) or not _name_ok(name):
        return None
    return f


@functools.lru_cache(maxsize=4096)
def _name_ok(name: Any) -> bool:
    try:
        check_metric_name(name)
    except ValueError:
        return False
    return True


_SUMMARIES = MetricSummaryRow.__table__
_METRICS = MetricRow.__table__
_PENDING = MetricFoldPendingRow.__table__
# Metrics rows already folded (those without a pending row): what the summaries hold.
_FOLDED = ~exists().where(_PENDING.c.metric_id == _METRICS.c.id)
_C = _SUMMARIES.c
# Built once: the per-report statements then skip SQL construction and compilation.
_INSERT = insert(_SUMMARIES)
_SELECT_NAMED = select(_C.name, _C.width, _C.raw_points, _C.batches, _C["values"]).where(
    _C.trial_id == bindparam("tid"),
    _C.kind == bindparam("grp"),
    _C.name.in_(bindparam("names", expanding=True)),
)
_UPDATE_NAMED = (
    update(_SUMMARIES)
    .where(_C.trial_id == bindparam("tid"), _C.kind == bindparam("grp"), _C.name == bindparam("nm"))
    .values(
        width=bindparam("w"),
        raw_points=bindparam("r"),
        batches=bindparam("bx"),
        values=bindparam("by"),
    )
)


def _pack(series: M4Series) -> dict[str, Any]:
    """The stored columns of a summary."""
    return {
        "width": series.width,
        "raw_points": series.raw_points,
        "batches": series.x.astype(_X_DTYPE).tobytes(),
        "values": series.y.astype(_Y_DTYPE).tobytes(),
    }


def _unpack(width: int, raw_points: int, batches: bytes, values: bytes) -> M4Series:
    return M4Series.restore(
        width,
        raw_points,
        np.frombuffer(batches, dtype=_X_DTYPE).astype(np.int64),
        np.frombuffer(values, dtype=_Y_DTYPE).astype(np.float64),
    )


def _rows(trial_id: int, group: str, series: Mapping[str, M4Series]) -> list[dict[str, Any]]:
    """Rows to insert: the (trial, group) marker and one per summary."""
    rows = [
        {
            "trial_id": trial_id,
            "kind": group,
            "name": "",
            "width": 0,
            "raw_points": 0,
            "batches": b"",
            "values": b"",
        }
    ]
    rows.extend(
        {"trial_id": trial_id, "kind": group, "name": name, **_pack(summary)}
        for name, summary in series.items()
    )
    return rows


def _summaries_from_metrics(
    s: Session, trial_ids: Sequence[int], group: str, skip_batches: frozenset[int] = frozenset()
) -> dict[int, dict[str, M4Series]]:
    """Summaries built from the folded ``metrics`` rows of ``trial_ids`` in ``group``
    (those with no ``metric_folds_pending`` row: the pending ones are folded later).

    Returns:
        ``{trial_id: {name: summary}}``; rows whose batch count is in ``skip_batches``
        are left out, and so are documents that are not JSON objects (SQLite may also hold
        the bare word ``NaN`` an older master wrote, which Python's parser reads).
    """
    raw: dict[int, dict[str, tuple[list[int], list[float]]]] = {}
    text = cast(_METRICS.c["values"], Text)
    for i in range(0, len(trial_ids), _IN_CHUNK):
        q = select(_METRICS.c.trial_id, _METRICS.c.total_batches, text).where(
            _METRICS.c.trial_id.in_(list(trial_ids[i : i + _IN_CHUNK])),
            _METRICS.c.kind == group,
            _FOLDED,
        )
        for trial_id, batches, doc in s.execute(q):
            if batches in skip_batches:
                continue
            points = raw.setdefault(trial_id, {})
            values = _load_values(doc)
            if not isinstance(values, dict):
                continue
            for name, v in values.items():
                f = _chartable(name, v)
                if f is not None:
                    xs, ys = points.setdefault(name, ([], []))
                    xs.append(batches)
                    ys.append(f)
    out: dict[int, dict[str, M4Series]] = {}
    for trial_id, points in raw.items():
        out[trial_id] = {}
        for name, (xs, ys) in points.items():
            out[trial_id][name] = M4Series()
            out[trial_id][name].extend(xs, ys)
    return out


def _load_values(doc: str | bytes | None) -> Any:
    """A stored ``metrics.values`` document parsed, or None when it is not JSON.

    orjson first (several times faster on 256-value reports); Python's parser for what
    orjson refuses, such as the bare ``NaN`` an older master wrote into SQLite."""
    if doc is None:
        return None
    try:
        return orjson.loads(doc)
    except orjson.JSONDecodeError:
        try:
            return json.loads(doc)
        except ValueError:
            return None


def fold_metric_reports(
    s: Session,
    trial_id: int,
    group: str,
    reports: Sequence[tuple[int, Mapping[str, Any]]],
) -> None:
    """Fold newly stored metric reports of one trial into its persisted summaries.

    Call it in a write transaction, either with reports whose ``metrics`` rows that
    transaction adds (seeding does) or with reports taken off ``metric_folds_pending``
    (:func:`fold_pending`, which then deletes their pending rows): every later chart
    reads the summaries only. Only finite int and float values (not bools) of names that
    :func:`check_metric_name` accepts are kept. When the trial has no summaries of
    ``group`` yet but has older folded ``metrics`` rows (an upgraded database), those are
    summarised first, once. Costs one read of the summaries of the reported names and
    one write per name changed (a summary holds at most ``4 * CAP_BUCKETS`` points), so
    folding k reports at once costs about what folding one does: the master folds
    lazily, in bulk, for that reason.

    Folding several reports at once gives the same summary, byte for byte, as folding
    them one at a time in any order: the buckets nest (see the module docstring), the
    width that ends up chosen is the smallest power of two, no narrower than the
    stored one, at which all points fit, and ties keep the earliest point either way.

    Args:
        s: a session of ``Database.write()`` (under the write lock).
        trial_id: an existing trial.
        group: the reports' group (``"training"`` or ``"validation"``; at most 16
            characters, the metrics row's ``kind``).
        reports: ``(total_batches, metrics)`` pairs, in any order: batch counts (>= 0)
            distinct and not folded before; metrics a mapping of name to value (NaN and
            infinities already turned into None, or they are skipped here).

    Raises:
        ValueError: ``group`` is empty or too long, a batch count is negative, not an
            int, or repeated.
        TypeError: a report's metrics are not a mapping.
    """
    plan = _plan_fold(s, trial_id, group, reports)
    if plan is not None:
        _write_fold(s, plan)


class _FoldWrite(NamedTuple):
    """What a fold writes for one (trial, group): with ``replace`` every summary row of
    it is deleted first; then ``updates`` (parameters of ``_UPDATE_NAMED``) and
    ``inserts`` (rows of ``metric_summaries``)."""

    trial_id: int
    group: str
    replace: bool
    updates: list[dict[str, Any]]
    inserts: list[dict[str, Any]]


def _plan_fold(
    s: Session,
    trial_id: int,
    group: str,
    reports: Sequence[tuple[int, Mapping[str, Any]]],
) -> _FoldWrite | None:
    """The reads and the computation of :func:`fold_metric_reports` (any session:
    nothing is written); None when there is nothing to write. Raises as it does."""
    if not isinstance(group, str) or not 0 < len(group) <= 16:
        raise ValueError(f"group must be a name of 1..16 characters, got {group!r}")
    seen: set[int] = set()
    points: dict[str, tuple[list[int], list[float]]] = {}
    for batches, metrics in reports:
        if isinstance(batches, bool) or not isinstance(batches, (int, np.integer)) or batches < 0:
            raise ValueError(f"total_batches must be an int >= 0, got {batches!r}")
        if batches in seen:
            raise ValueError(f"total_batches {batches} is reported twice")
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping, got {type(metrics).__name__}")
        seen.add(int(batches))
        for name, v in metrics.items():
            f = _chartable(name, v)
            if f is not None:
                xs, ys = points.setdefault(name, ([], []))
                xs.append(int(batches))
                ys.append(f)
    if not seen:
        return None
    stored = {
        row[0]: row[1:]
        for row in s.execute(_SELECT_NAMED, {"tid": trial_id, "grp": group, "names": ["", *points]})
    }
    if "" not in stored:  # the group's first reports, or reports from before the table
        earlier = [
            b
            for b in s.scalars(
                select(_METRICS.c.total_batches).where(
                    _METRICS.c.trial_id == trial_id, _METRICS.c.kind == group, _FOLDED
                )
            )
            if b not in seen
        ]
        series = (
            _summaries_from_metrics(s, [trial_id], group, frozenset(seen)).get(trial_id, {})
            if earlier
            else {}
        )
        for name, (xs, ys) in points.items():
            series.setdefault(name, M4Series()).extend(xs, ys)
        # replace: there are none, or some left without a marker
        return _FoldWrite(trial_id, group, True, [], _rows(trial_id, group, series))
    updates, inserts = [], {}
    for name, (xs, ys) in points.items():
        summary = _unpack(*stored[name]) if name in stored else M4Series()
        summary.extend(xs, ys)
        if name in stored:
            state = _pack(summary)
            updates.append(
                {
                    "tid": trial_id,
                    "grp": group,
                    "nm": name,
                    "w": state["width"],
                    "r": state["raw_points"],
                    "bx": state["batches"],
                    "by": state["values"],
                }
            )
        else:
            inserts[name] = summary
    return _FoldWrite(trial_id, group, False, updates, _rows(trial_id, group, inserts)[1:])


def _write_fold(s: Session, plan: _FoldWrite) -> None:
    """Write what :func:`_plan_fold` computed (in a ``Database.write()`` session)."""
    if plan.replace:
        s.execute(delete(_SUMMARIES).where(_C.trial_id == plan.trial_id, _C.kind == plan.group))
    if plan.updates:
        s.execute(_UPDATE_NAMED, plan.updates)
    if plan.inserts:
        s.execute(_INSERT, plan.inserts)


def queue_metric_folds(s: Session, trial_id: int, group: str, batches: Sequence[int]) -> None:
    """Record that the just-inserted reports of ``trial_id`` at ``batches`` (in
    ``group``) still have to be folded into the summaries: one ``INSERT ... SELECT``
    into ``metric_folds_pending``, in the transaction that stores the reports, so what
    is acknowledged is durable and a restarted master folds what was left.

    Args:
        s: the session of ``Database.write()`` that inserted the ``metrics`` rows.
        trial_id: the reporting trial.
        group: ``"training"`` or ``"validation"``.
        batches: the reports' ``total_batches`` (distinct), at most a few thousand.
    """
    if not batches:
        return
    m = _METRICS.c
    s.execute(
        insert(_PENDING).from_select(
            ["metric_id", "trial_id", "kind"],
            select(m.id, m.trial_id, m.kind).where(
                m.trial_id == trial_id, m.kind == group, m.total_batches.in_(list(batches))
            ),
        )
    )


def store_metric_rows(s: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert reports into ``metrics`` and queue them for the lazy fold, in ``s``'s
    transaction (what the master does for each acknowledged report).

    On PostgreSQL this is one statement (``WITH ins AS (INSERT INTO metrics ...
    RETURNING ...) INSERT INTO metric_folds_pending SELECT ... FROM ins``): every
    statement is a round trip to the server, and under the write lock those round trips
    bound the reports per second. Elsewhere (SQLite, in-process) an executemany and one
    :func:`queue_metric_folds` per group.

    Args:
        s: a session of ``Database.write()``.
        rows: ``metrics`` rows (column name to value) of one trial, with distinct
            ``(kind, total_batches)`` not stored before, at most a few thousand.
    """
    if not rows:
        return
    if s.get_bind().dialect.name == "postgresql":
        m = _METRICS.c
        ins = insert(_METRICS).values(list(rows)).returning(m.id, m.trial_id, m.kind).cte("ins")
        s.execute(
            insert(_PENDING).from_select(
                ["metric_id", "trial_id", "kind"], select(ins.c.id, ins.c.trial_id, ins.c.kind)
            )
        )
        return
    s.execute(insert(_METRICS), list(rows))
    for trial_id, group in sorted({(r["trial_id"], r["kind"]) for r in rows}):
        batches = [
            r["total_batches"] for r in rows if r["trial_id"] == trial_id and r["kind"] == group
        ]
        queue_metric_folds(s, trial_id, group, batches)


def fold_pending(db: Database, trial_ids: Iterable[int] | None = None, pause: float = 0.0) -> int:
    """Fold the pending reports (``metric_folds_pending``) into the summaries, in bulk.

    Per (trial, group) and per :data:`FOLD_CHUNK` of its reports, the pending reports
    and the summaries are read and the new summaries computed in a read session, then
    written, with the reports' pending rows deleted, in one short write transaction:
    reports are acknowledged meanwhile (the write lock is held for the writes only).
    Folders are serialised by a lock of their own (see :func:`_fold_lock`), so what was
    read is still current when it is written; a trial deleted meanwhile is skipped. A reader calls this first for the trials it reads, so the summaries
    it reads hold every report acknowledged before; the background
    :class:`MetricFolder` calls it for all trials.

    Args:
        db: the master database.
        trial_ids: only these trials (None: every trial with pending reports).
        pause: seconds to sleep after each (trial, group), without the fold lock: the
            background fold spreads its CPU so that requests (which share the
            interpreter lock with it) are not held up by one long burst; readers,
            waiting for their answer, pass 0.

    Returns:
        The number of reports folded.
    """
    p = _PENDING.c
    q = select(p.trial_id, p.kind).distinct()
    ids = None if trial_ids is None else sorted(set(trial_ids))
    with db.read() as s:
        if ids is None:
            todo = sorted((t, g) for t, g in s.execute(q))
        else:
            todo = sorted(
                (t, g)
                for i in range(0, len(ids), _IN_CHUNK)
                for t, g in s.execute(q.where(p.trial_id.in_(ids[i : i + _IN_CHUNK])))
            )
    m = _METRICS.c
    folded = 0
    for trial_id, group in todo:
        if pause > 0 and folded:
            time.sleep(pause)
        with _fold_lock(db):
            while True:
                with db.read() as s:  # read and compute without the write lock
                    rows = list(
                        s.execute(
                            select(m.id, m.total_batches, cast(m["values"], Text))
                            .join(_PENDING, p.metric_id == m.id)
                            .where(p.trial_id == trial_id, p.kind == group)
                            .order_by(m.id)
                            .limit(FOLD_CHUNK)
                        )
                    )
                    if not rows:
                        break
                    reports = []
                    for _, batches, doc in rows:
                        values = _load_values(doc)
                        reports.append((batches, values if isinstance(values, dict) else {}))
                    plan = _plan_fold(s, trial_id, group, reports)
                ids = [r[0] for r in rows]
                with db.write() as s:  # then write it in a short transaction
                    result = s.execute(delete(_PENDING).where(p.metric_id.in_(ids)))
                    gone = int(getattr(result, "rowcount", -1))  # a CursorResult's
                    if gone == len(ids) and plan is not None:
                        _write_fold(s, plan)
                    # else the trial was deleted meanwhile, its rows with it: skip it
                if gone != len(ids):
                    break
                folded += len(rows)
                if len(rows) < FOLD_CHUNK:
                    break
    return folded


_FOLD_LOCKS: weakref.WeakKeyDictionary[Database, threading.RLock] = weakref.WeakKeyDictionary()
_FOLD_LOCKS_GUARD = threading.Lock()


def _fold_lock(db: Database) -> threading.RLock:
    """The lock that serialises the writers of ``db``'s summaries other than the eager
    :func:`fold_metric_reports` (:func:`fold_pending`, :func:`build_missing_summaries`):
    they read and compute outside the write lock, so reports are acknowledged meanwhile,
    and write what they computed only while no other of them can have changed it. The
    master is one process (as for ``Database.write_lock``)."""
    with _FOLD_LOCKS_GUARD:
        lock = _FOLD_LOCKS.get(db)
        if lock is None:
            lock = _FOLD_LOCKS[db] = threading.RLock()
        return lock


class MetricFolder:
    """The master's background fold of pending metric reports: :func:`fold_pending`
    at start (what a stopped master left) and then every ``interval`` seconds.

    Folding a trial's reports every few seconds rather than one by one as they
    are acknowledged costs one read and one write of each summary per fold instead of
    per report (issue 19: a report of 256 metrics took ~27 ms of master CPU to fold
    alone, most of the ingest cost). Readers never wait for it: they fold what is
    pending for them first.

    Args:
        db: the master database.
        interval: seconds between folds (> 0).

    Raises:
        ValueError: ``interval`` <= 0.
    """

    def __init__(self, db: Database, interval: float = FOLD_INTERVAL) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.db = db
        self.interval = interval
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        """Fold until :attr:`stop` is set (a failed fold is logged and retried later)."""
        while True:
            try:
                fold_pending(self.db, pause=FOLD_PAUSE)
            except Exception:  # keep folding; the reports stay pending until it works
                log.exception("folding pending metric reports failed")
            if self.stop.wait(self.interval):
                return

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread."""
        self.thread = threading.Thread(target=self.run, name="metric-folder", daemon=True)
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for its fold to end."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)


def build_missing_summaries(db: Database, trial_ids: Iterable[int], group: str) -> list[int]:
    """Summarise, from their ``metrics`` rows, the trials that have no summaries of
    ``group`` yet (reports stored before the ``metric_summaries`` table existed), and
    persist the summaries; later reports are folded in by :func:`fold_metric_reports`.

    Works through 16 trials per write transaction so that reports of other trials wait
    at most that long; a trial summarised meanwhile, or deleted, is skipped. A trial
    without reports gets its marker too, so it is not looked at again.

    Args:
        db: the master database.
        trial_ids: trials to check.
        group: ``"training"`` or ``"validation"``.

    Returns:
        The trial ids summarised here, ascending.

    Raises:
        ValueError: ``group`` is empty or longer than 16 characters.
    """
    if not isinstance(group, str) or not 0 < len(group) <= 16:
        raise ValueError(f"group must be a name of 1..16 characters, got {group!r}")
    ids = sorted(set(trial_ids))
    done: list[int] = []
    with _fold_lock(db):  # no lazy fold writes these trials' summaries meanwhile
        for i in range(0, len(ids), _BUILD_CHUNK):
            chunk = ids[i : i + _BUILD_CHUNK]
            with db.write() as s:
                have = set(
                    s.scalars(
                        select(_SUMMARIES.c.trial_id).where(
                            _SUMMARIES.c.trial_id.in_(chunk),
                            _SUMMARIES.c.kind == group,
                            _SUMMARIES.c.name == "",
                        )
                    )
                )
                alive = set(s.scalars(select(TrialRow.id).where(TrialRow.id.in_(chunk))))
                todo = [t for t in chunk if t in alive and t not in have]
                if not todo:
                    continue
                built = _summaries_from_metrics(s, todo, group)
                s.execute(
                    delete(_SUMMARIES).where(
                        _SUMMARIES.c.trial_id.in_(todo), _SUMMARIES.c.kind == group
                    )
                )
                s.execute(_INSERT, [row for t in todo for row in _rows(t, group, built.get(t, {}))])
                done.extend(todo)
    return done


def _read_summaries(
    s: Session, exp_id: int, group: str, name: str, only: Sequence[int] | None
) -> tuple[set[int], dict[int, M4Series]]:
    """(trials with a marker, {trial: summary of ``name``}) of an experiment's trials (or
    of the ``only`` ones)."""
    c = _SUMMARIES.c
    base = select(c.trial_id, c.name, c.width, c.raw_points, c.batches, c["values"]).where(
        c.kind == group, c.name.in_(("", name))
    )
    if only is None:
        queries = [
            base.join(TrialRow.__table__, TrialRow.__table__.c.id == c.trial_id).where(
                TrialRow.__table__.c.experiment_id == exp_id
            )
        ]
    else:
        queries = [
            base.where(c.trial_id.in_(list(only[i : i + _IN_CHUNK])))
            for i in range(0, len(only), _IN_CHUNK)
        ]
    marked: set[int] = set()
    found: dict[int, M4Series] = {}
    for q in queries:
        for trial_id, row_name, width, raw_points, batches, values in s.execute(q):
            if row_name == "":
                marked.add(trial_id)
            else:
                found[trial_id] = _unpack(width, raw_points, batches, values)
    return marked, found


def read_experiment_series(
    db: Database,
    exp_id: int,
    group: str,
    name: str | None,
    max_points: int,
    trial_ids: Iterable[int] | None = None,
) -> dict[str, Any]:
    """One metric of an experiment's trials, each series M4-downsampled, from the stored
    summaries (the trials' pending reports are folded first, and trials with reports
    from before the summaries are summarised first, once).

    Args:
        db: the master database.
        exp_id: the experiment.
        group: ``"training"`` or ``"validation"``.
        name: the metric; None: the experiment's searcher metric.
        max_points: per series, 8..:data:`MAX_POINTS`; with many trials each series gets
            at most ``POINT_BUDGET // trials``.
        trial_ids: only these trials (None: all).

    Returns:
        ``{"experiment_id", "group", "name", "max_points", "downsampling", "series":
        [{"trial_id", "batches", "values", "raw_points", "downsampled"}]}``: one series
        per trial with at least one finite value, by trial id.

    Raises:
        NotFound: no such experiment.
        ValueError: bad ``group``, ``name`` or ``max_points``.
    """
    if group not in ("training", "validation"):
        raise ValueError(f"group must be 'training' or 'validation', got {group!r}")
    if not 8 <= max_points <= MAX_POINTS:
        raise ValueError(f"max_points must be within 8..{MAX_POINTS}, got {max_points}")
    with db.read() as s:
        if s.get(ExperimentRow, exp_id) is None:
            raise NotFound(f"experiment {exp_id} not found")
        every = list(s.scalars(select(TrialRow.id).where(TrialRow.experiment_id == exp_id)))
    fold_pending(db, every if trial_ids is None else set(trial_ids) & set(every))
    with db.read() as s:
        exp = s.get(ExperimentRow, exp_id)
        if exp is None:
            raise NotFound(f"experiment {exp_id} not found")
        if name is None:
            name = exp.config.get("searcher", {}).get("metric") or "loss"
        check_metric_name(name)
        trials = list(
            s.scalars(
                select(TrialRow.id).where(TrialRow.experiment_id == exp_id).order_by(TrialRow.id)
            )
        )
        chosen = trials if trial_ids is None else sorted(set(trial_ids) & set(trials))
        marked, found = _read_summaries(
            s, exp_id, group, name, None if trial_ids is None else chosen
        )
    missing = [t for t in chosen if t not in marked]
    if missing and build_missing_summaries(db, missing, group):
        with db.read() as s:
            found.update(_read_summaries(s, exp_id, group, name, missing)[1])
    summaries = [(t, found[t]) for t in chosen if t in found]
    per_series = min(max_points, max(8, POINT_BUDGET // max(1, len(summaries))))
    out = []
    for trial_id, series in summaries:
        x, y = series.points(per_series)
        out.append(
            {
                "trial_id": trial_id,
                "batches": x.tolist(),
                "values": y.tolist(),
                "raw_points": series.raw_points,
                "downsampled": int(x.size) < series.raw_points,
            }
        )
    return {
        "experiment_id": exp_id,
        "group": group,
        "name": name,
        "max_points": per_series,
        "downsampling": "M4 (Jugel et al., PVLDB 7(10), 2014)",
        "series": out,
    }


def read_metric_names(db: Database, exp_id: int) -> dict[str, list[str]]:
    """The numeric metric names in the latest training and validation report of each of
    an experiment's trials.

    Each trial's latest report of a group is found through the ``(trial_id, kind,
    total_batches)`` index (one seek per trial and group), so the answer does not grow
    with the number of reports.

    Returns:
        ``{"training": [name], "validation": [name]}``, each sorted.

    Raises:
        NotFound: no such experiment.
    """
    groups = ("training", "validation")

    def latest(group: str) -> Any:
        return (
            select(MetricRow.values)
            .where(MetricRow.trial_id == TrialRow.id, MetricRow.kind == group)
            .order_by(MetricRow.total_batches.desc())
            .limit(1)
            .correlate(TrialRow)
            .scalar_subquery()
        )

    with db.read() as s:
        if s.get(ExperimentRow, exp_id) is None:
            raise NotFound(f"experiment {exp_id} not found")
        rows = s.execute(
            select(*(latest(g) for g in groups)).where(TrialRow.experiment_id == exp_id)
        )
        names: dict[str, set[str]] = {g: set() for g in groups}
        for reports in rows:
            for group, values in zip(groups, reports, strict=True):
                for key, v in (values if isinstance(values, dict) else {}).items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        names[group].add(key)
        return {k: sorted(v) for k, v in names.items()}


def read_trial_series(
    db: Database,
    trial_id: int,
    groups: Sequence[str],
    names: Sequence[str] | None,
    max_points: int,
) -> list[dict[str, Any]]:
    """A trial's metrics, each series M4-downsampled, from the stored summaries (the
    trial's reports from before them are summarised first, once): what ``GET
    /trials/{id}/metrics?downsample=N`` answers, in time independent of the number of
    reports (at most ``4 * CAP_BUCKETS`` points read per series). The trial's pending
    reports are folded first, so every report acknowledged before is in the answer.

    Args:
        db: the master database.
        trial_id: the trial (the caller checked it exists).
        groups: among ``"training"``, ``"validation"``.
        names: only these metrics; None: every summarised metric.
        max_points: per series, 8..:data:`MAX_POINTS`.

    Returns:
        ``[{"group", "name", "batches", "values", "raw_points", "downsampled"}]`` by
        group and name; a series holds the finite values of one metric.

    Raises:
        ValueError: a bad group, name or ``max_points``.
    """
    if not 8 <= max_points <= MAX_POINTS:
        raise ValueError(f"downsample must be within 8..{MAX_POINTS}, got {max_points}")
    for name in names or ():
        check_metric_name(name)
    fold_pending(db, [trial_id])
    c = _SUMMARIES.c
    out: list[dict[str, Any]] = []
    for group in groups:
        if group not in ("training", "validation"):
            raise ValueError(f"group must be 'training' or 'validation', got {group!r}")
        query = select(c.name, c.width, c.raw_points, c.batches, c["values"]).where(
            c.trial_id == trial_id, c.kind == group
        )
        if names is not None:
            query = query.where(c.name.in_(["", *names]))
        with db.read() as s:
            rows = list(s.execute(query))
        if not any(r[0] == "" for r in rows) and build_missing_summaries(db, [trial_id], group):
            with db.read() as s:
                rows = list(s.execute(query))
        for name, width, raw_points, batches, values in sorted(rows, key=lambda r: r[0]):
            if name == "":
                continue
            x, y = _unpack(width, raw_points, batches, values).points(max_points)
            out.append(
                {
                    "group": group,
                    "name": name,
                    "batches": x.tolist(),
                    "values": y.tolist(),
                    "raw_points": raw_points,
                    "downsampled": int(x.size) < raw_points,
                }
            )
    return out
