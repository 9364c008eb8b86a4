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

The code: M4 in :mod:`dauntless.master.m4_series`, the stored rows in
:mod:`dauntless.master.metric_summary_rows`, the fold in :mod:`dauntless.master.metric_fold`
and the readers here; every public name of those modules may be imported from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from .db import Database, ExperimentRow, MetricRow, TrialRow
from .errors import NotFound
from .m4_series import CAP_BUCKETS as CAP_BUCKETS
from .m4_series import M4Series
from .m4_series import m4 as m4
from .m4_series import m4_indices as m4_indices
from .metric_fold import FOLD_CHUNK as FOLD_CHUNK
from .metric_fold import FOLD_INTERVAL as FOLD_INTERVAL
from .metric_fold import FOLD_PAUSE as FOLD_PAUSE
from .metric_fold import MetricFolder as MetricFolder
from .metric_fold import build_missing_summaries, fold_pending
from .metric_fold import fold_metric_reports as fold_metric_reports
from .metric_fold import queue_metric_folds as queue_metric_folds
from .metric_fold import store_metric_rows as store_metric_rows
from .metric_summary_rows import _IN_CHUNK, _SUMMARIES, _unpack, check_metric_name
from .metric_summary_rows import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from .metric_summary_rows import TIME_SERIES as TIME_SERIES

MAX_POINTS = 1024
"""The most points per series an answer may ask for (``max_points``)."""

POINT_BUDGET = 200_000
"""The most points in one answer over all series: with many trials each series gets
``POINT_BUDGET // trials`` (at least 8)."""

X_AXES = ("batches", "epochs", "time")
"""What a chart's x axis may count: batches; epochs (the ``epochs`` the trial reports
with its metrics, else batches converted with ``records_per_epoch``); or wall time (when
each report was stored)."""

#: The summary an x axis other than batches is read from.
_AXIS_SUMMARY = {"epochs": "epochs", "time": TIME_SERIES}


def _read_summaries(
    s: Session,
    exp_id: int,
    group: str,
    name: str,
    only: Sequence[int] | None,
    axis: str | None = None,
) -> tuple[set[int], dict[int, M4Series], dict[int, M4Series]]:
    """(trials with a marker, {trial: summary of ``name``}, {trial: summary of ``axis``})
    of an experiment's trials (or of the ``only`` ones)."""
    c = _SUMMARIES.c
    names = ("", name) if axis is None else ("", name, axis)
    base = select(c.trial_id, c.name, c.width, c.raw_points, c.batches, c["values"]).where(
        c.kind == group, c.name.in_(names)
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
    axes: dict[int, M4Series] = {}
    for q in queries:
        for trial_id, row_name, width, raw_points, batches, values in s.execute(q):
            if row_name == "":
                marked.add(trial_id)
                continue
            summary = _unpack(width, raw_points, batches, values)
            if row_name == name:
                found[trial_id] = summary
            if row_name == axis:
                axes[trial_id] = summary
    return marked, found, axes


def _axis_values(
    x: np.ndarray, axis: M4Series | None, batches_per_epoch: float | None
) -> list[float] | None:
    """The x values of an axis other than batches at the batch counts ``x``: read off the
    trial's summary of that axis by linear interpolation between its stored points
    (exact at them; both epochs and report times grow with batches), or, for epochs
    without a summary, ``x / batches_per_epoch``; None when neither is known."""
    if axis is not None and axis.x.size:
        return [float(v) for v in np.interp(x, axis.x, axis.y)]
    if batches_per_epoch:
        return [float(v) for v in x / batches_per_epoch]
    return None


def _batches_per_epoch(
    s: Session, exp: ExperimentRow, trial_ids: Sequence[int]
) -> dict[int, float]:
    """{trial: batches per epoch} from the config's ``records_per_epoch`` and each trial's
    ``global_batch_size`` hyperparameter (trials lacking either are left out)."""
    records = exp.config.get("records_per_epoch") or 0
    if not isinstance(records, (int, float)) or records <= 0 or not trial_ids:
        return {}
    out: dict[int, float] = {}
    for i in range(0, len(trial_ids), _IN_CHUNK):
        chunk = list(trial_ids[i : i + _IN_CHUNK])
        for tid, hparams in s.execute(
            select(TrialRow.id, TrialRow.hparams).where(TrialRow.id.in_(chunk))
        ):
            gbs = (hparams or {}).get("global_batch_size")
            if isinstance(gbs, (int, float)) and not isinstance(gbs, bool) and gbs > 0:
                out[tid] = float(records) / float(gbs)
    return out


def read_experiment_series(
    db: Database,
    exp_id: int,
    group: str,
    name: str | None,
    max_points: int,
    trial_ids: Iterable[int] | None = None,
    x_axis: str = "batches",
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
        x_axis: one of :data:`X_AXES`: with ``epochs`` each series also has
            ``epochs`` (float epochs at its points), with ``time`` ``timestamps``
            (seconds since the epoch when each point's report was stored); None for a
            trial of which it is not known (no ``epochs`` reported and no
            ``records_per_epoch``; reports from before the report times were summarised).

    Returns:
        ``{"experiment_id", "group", "name", "max_points", "downsampling", "x_axis",
        "series": [{"trial_id", "batches", "values", "raw_points", "downsampled",
        "epochs"?, "timestamps"?}]}``: one series per trial with at least one finite
        value, by trial id.

    Raises:
        NotFound: no such experiment.
        ValueError: bad ``group``, ``name``, ``max_points`` or ``x_axis``.
    """
    if group not in ("training", "validation"):
        raise ValueError(f"group must be 'training' or 'validation', got {group!r}")
    if x_axis not in X_AXES:
        raise ValueError(f"x_axis must be one of {', '.join(X_AXES)}, got {x_axis!r}")
    axis = _AXIS_SUMMARY.get(x_axis)
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
        marked, found, axes = _read_summaries(
            s, exp_id, group, name, None if trial_ids is None else chosen, axis
        )
        per_epoch = {}
        if x_axis == "epochs" and any(t not in axes for t in found):
            per_epoch = _batches_per_epoch(s, exp, [t for t in found if t not in axes])
    missing = [t for t in chosen if t not in marked]
    if missing and build_missing_summaries(db, missing, group):
        with db.read() as s:
            _, more, more_axes = _read_summaries(s, exp_id, group, name, missing, axis)
            found.update(more)
            axes.update(more_axes)
    summaries = [(t, found[t]) for t in chosen if t in found]
    per_series = min(max_points, max(8, POINT_BUDGET // max(1, len(summaries))))
    out = []
    for trial_id, series in summaries:
        x, y = series.points(per_series)
        item: dict[str, Any] = {
            "trial_id": trial_id,
            "batches": x.tolist(),
            "values": y.tolist(),
            "raw_points": series.raw_points,
            "downsampled": int(x.size) < series.raw_points,
        }
        if x_axis != "batches":
            key = "epochs" if x_axis == "epochs" else "timestamps"
            item[key] = _axis_values(x, axes.get(trial_id), per_epoch.get(trial_id))
        out.append(item)
    return {
        "experiment_id": exp_id,
        "group": group,
        "name": name,
        "max_points": per_series,
        "downsampling": "M4 (Jugel et al., PVLDB 7(10), 2014)",
        "x_axis": x_axis,
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
            if name in ("", TIME_SERIES):
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
