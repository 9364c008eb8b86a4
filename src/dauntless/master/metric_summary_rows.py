"""The stored form of metric summaries (``metric_summaries`` rows) and the metric names
and values that are summarised: the statements, the packing of an :class:`M4Series` into
a row and back, and the summaries rebuilt from ``metrics`` rows
(:mod:`dauntless.master.metric_series` describes the scheme).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Text, bindparam, cast, exists, insert, select, update
from sqlalchemy.orm import Session

from .db import MetricRow
from .db.engine import loads_json
from .db.models import MetricFoldPendingRow, MetricSummaryRow
from .m4_series import M4Series

MAX_NAME_LENGTH = 256
"""The longest metric name that is summarised (characters)."""

TIME_SERIES = '"time"'
"""The name of the summary of when a (trial, group)'s reports were stored: ``reported_at``
(seconds since the epoch) against batches, folded with the metrics, from which the charts
take a wall-time x axis. It holds a double quote, which :func:`check_metric_name` refuses
in a metric name, so no report can add to it or ask for it as a metric."""

_IN_CHUNK = 500  # trial ids per IN (...) list
_X_DTYPE = np.dtype("<i8")  # stored batches: little-endian int64
_Y_DTYPE = np.dtype("<f8")  # stored values: little-endian float64


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


def _report_points(
    reports: Sequence[Sequence[Any]],
) -> tuple[set[int], dict[str, tuple[list[int], list[float]]]]:
    """The chartable points of metric reports, by name, and their batch counts.

    Args:
        reports: ``(total_batches, metrics)`` or ``(total_batches, metrics, reported_at)``
            tuples: distinct batch counts (ints >= 0), metrics a mapping of name to value,
            ``reported_at`` seconds since the epoch or None (a point of
            :data:`TIME_SERIES` when given).

    Returns:
        ``(batch counts, {name: (batches, values)})``; only values :func:`_chartable`
        keeps.

    Raises:
        ValueError: a batch count is negative, not an int, or repeated.
        TypeError: a report's metrics are not a mapping.
    """
    seen: set[int] = set()
    points: dict[str, tuple[list[int], list[float]]] = {}
    for report in reports:
        batches, metrics = report[0], report[1]
        if isinstance(batches, bool) or not isinstance(batches, (int, np.integer)) or batches < 0:
            raise ValueError(f"total_batches must be an int >= 0, got {batches!r}")
        if batches in seen:
            raise ValueError(f"total_batches {batches} is reported twice")
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping, got {type(metrics).__name__}")
        seen.add(int(batches))
        for name, v in metrics.items():
            f = _chartable(name, v)  # never TIME_SERIES: a metric name holds no quote
            if f is not None:
                xs, ys = points.setdefault(name, ([], []))
                xs.append(int(batches))
                ys.append(f)
        at = report[2] if len(report) > 2 else None
        if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at):
            xs, ys = points.setdefault(TIME_SERIES, ([], []))
            xs.append(int(batches))
            ys.append(float(at))
    return seen, points


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
    reports: dict[int, list[tuple[int, Mapping[str, Any], float]]] = {}
    text = cast(_METRICS.c["values"], Text)
    for i in range(0, len(trial_ids), _IN_CHUNK):
        q = select(
            _METRICS.c.trial_id, _METRICS.c.total_batches, text, _METRICS.c.reported_at
        ).where(
            _METRICS.c.trial_id.in_(list(trial_ids[i : i + _IN_CHUNK])),
            _METRICS.c.kind == group,
            _FOLDED,
        )
        for trial_id, batches, doc, reported_at in s.execute(q):
            if batches in skip_batches:
                continue
            values = _load_values(doc)
            if isinstance(values, dict):
                reports.setdefault(trial_id, []).append((batches, values, reported_at))
    out: dict[int, dict[str, M4Series]] = {}
    for trial_id, trial_reports in reports.items():
        out[trial_id] = {}
        for name, (xs, ys) in _report_points(trial_reports)[1].items():
            out[trial_id][name] = M4Series()
            out[trial_id][name].extend(xs, ys)
    return out


def _folded_times(s: Session, trial_id: int, group: str, skip_batches: frozenset[int]) -> M4Series:
    """The :data:`TIME_SERIES` summary of a (trial, group)'s folded reports (those with
    no pending row), rows at ``skip_batches`` left out: what a summary of report times
    starts from when its reports were folded before such summaries were kept (an
    upgraded database; once per trial and group)."""
    m = _METRICS.c
    rows = [
        (b, at)
        for b, at in s.execute(
            select(m.total_batches, m.reported_at).where(
                m.trial_id == trial_id, m.kind == group, _FOLDED
            )
        )
        if b not in skip_batches and at is not None and math.isfinite(at)
    ]
    series = M4Series()
    if rows:
        rows.sort()
        series.extend([b for b, _ in rows], [float(at) for _, at in rows])
    return series


def _load_values(doc: str | bytes | None) -> Any:
    """A stored ``metrics.values`` document parsed (:func:`db.engine.loads_json`), or
    None when it is missing or not JSON."""
    if doc is None:
        return None
    try:
        return loads_json(doc)
    except ValueError:
        return None
