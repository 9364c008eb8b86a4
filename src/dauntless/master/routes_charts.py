"""Batch-level training metrics of one trial, for the WebUI's charts, under ``/api/v1``:

``GET /trials/{trial_id}/batch-metrics`` answers ``{"names": [...], "series": [{"name",
"batches", "values", "raw_points", "downsampled"}]}``: every numeric metric of the
per-batch lists that training reports may carry (``batch_metrics`` of ``POST
/trials/{id}/metrics``, one dict per batch), at batch ``total_batches - len(list) + i + 1``
for the list's ``i``-th entry. Series longer than ``max_points`` are downsampled with M4
(:func:`dauntless.master.metric_series.m4`; U. Jugel et al., PVLDB 7(10), 2014), which
keeps each bucket's first, last, smallest and largest point, so spikes stay visible.

Per-report averages (the ``training`` group) are charted by ``GET
/experiments/{id}/metrics``; this route reads the trial's ``metrics`` rows, which is
fine for one trial's page but is not meant for all trials of an experiment at once.

Learning curves of a whole experiment: ``GET /experiments/{id}/metrics`` and ``GET
/experiments/{id}/metrics/names`` (their answers are in the docstring of
:mod:`dauntless.master.routes_stream`), and :func:`experiment_summary`, the first event
of the experiment stream. Those series are downsampled with M4 from summaries kept in the
database as reports arrive (:mod:`dauntless.master.metric_series`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from fastapi import APIRouter, Query, Request

from . import responses as R
from .api_spec import DbId
from .errors import BadRequest
from .metric_series import MAX_POINTS, m4, read_experiment_series, read_metric_names
from .models import trials
from .responses import BatchMetricsOut
from .routes import _experiment_views, _get_experiment

router = APIRouter(prefix="/api/v1")

MAX_BATCH_POINTS = 2000
"""The most points per series a caller may ask for."""


@router.get("/trials/{trial_id}/batch-metrics", response_model=BatchMetricsOut)
def get_batch_metrics(
    trial_id: DbId,
    request: Request,
    max_points: int = Query(500, ge=8, le=MAX_BATCH_POINTS, description="per series, at most"),
) -> dict[str, Any]:
    """One trial's per-batch training metrics, each series M4-downsampled.

    Raises:
        NotFound: no such trial (404).
    """
    with request.app.state.ctx.db.read() as s:
        rows = trials.batch_metrics(s, trial_id)
    points: dict[str, tuple[list[int], list[float]]] = {}
    for total, per_batch in rows:
        if not isinstance(per_batch, list):
            continue
        first = total - len(per_batch) + 1
        for i, metrics in enumerate(per_batch):
            if not isinstance(metrics, dict):
                continue
            for name, v in metrics.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    continue
                xs, ys = points.setdefault(str(name), ([], []))
                xs.append(first + i)
                ys.append(float(v))
    series = []
    for name in sorted(points):
        xs, ys = points[name]
        x = np.asarray(xs, dtype=np.int64)
        y = np.asarray(ys, dtype=np.float64)
        raw = len(x)
        if raw > max_points:
            span = int(x.max() - x.min()) + 1
            width = 1
            while math.ceil(span / width) * 4 > max_points:
                width *= 2
            x, y = m4(x, y, width)
        series.append(
            {
                "name": name,
                "batches": x.tolist(),
                "values": y.tolist(),
                "raw_points": raw,
                "downsampled": len(x) < raw,
            }
        )
    return {"names": sorted(points), "series": series}


# ---------------------------------------------------------------------- experiments' learning curves


def experiment_summary(
    request: Request,
    exp_id: int,
    group: str,
    name: str | None,
    max_points: int,
    top: int | None = None,
    all_up_to: int = 0,
    trial_ids: list[int] | None = None,
) -> dict[str, Any]:
    """What the experiment page draws first: the experiment and its learning-curve chart,
    without the trials (issue 22: the full body of 1,000 trials is about 600 KB, the chart
    of the top 10 about 60 KB).

    The chart's trials are ``trial_ids`` when given; else the best ``top`` by the
    searcher metric (its ``smaller_is_better``; trials without a value last, ties by id:
    the order the WebUI ranks them in), or every trial when ``top`` is None or the
    experiment has at most ``all_up_to`` trials.

    Args:
        exp_id: the experiment.
        group: ``"training"`` or ``"validation"``.
        name: the metric; None: the searcher metric.
        max_points: per series (8..:data:`~dauntless.master.metric_series.MAX_POINTS`).
        top: how many of the best trials (>= 1), or None.
        all_up_to: every trial when there are at most this many.
        trial_ids: these trials only (ids of other experiments are left out).

    Returns:
        ``{"experiment": Experiment (as in ``GET /experiments/{id}``), "chart_trial_ids":
        [id] (the trials chosen, best first, or null for every trial), "chart": the body
        of ``GET /experiments/{id}/metrics`` for them}``.

    Raises:
        NotFound: no such experiment.
        BadRequest: bad ``group``, ``name`` or ``max_points`` (names the field).
    """
    db = request.app.state.ctx.db
    with db.read() as s:
        exp = _get_experiment(s, exp_id)
        view = _experiment_views(s, [exp])[0]
        ranked = [(tid, best) for _e, tid, best in trials.trial_bests(s, [exp_id])]
    chosen: list[int] | None = None
    if trial_ids is not None:
        chosen = list(dict.fromkeys(trial_ids))
    elif top is not None and len(ranked) > all_up_to:
        sign = 1.0 if view["smaller_is_better"] else -1.0
        ranked.sort(key=lambda r: (r[1] is None, sign * r[1] if r[1] is not None else 0.0, r[0]))
        chosen = [r[0] for r in ranked[:top]]
    try:
        chart = read_experiment_series(db, exp_id, group, name, max_points, chosen)
    except ValueError as exc:
        field = "chart_max_points" if "max_points" in str(exc) else "chart_name"
        raise BadRequest(str(exc), [(field, str(exc))]) from None
    if chosen is not None:
        known = {r[0] for r in ranked}
        chosen = [t for t in chosen if t in known]
    return {"experiment": view, "chart_trial_ids": chosen, "chart": chart}


# exclude_unset: a series has ``epochs`` or ``timestamps`` only when ``x_axis`` asks.
@router.get(
    "/experiments/{exp_id}/metrics",
    response_model=R.ExperimentSeriesOut,
    response_model_exclude_unset=True,
)
def get_experiment_metrics(
    exp_id: DbId,
    request: Request,
    group: str = Query("validation", pattern="^(training|validation)$"),
    name: str | None = Query(
        None,
        min_length=1,
        max_length=256,
        description="the metric (default: the experiment's searcher metric)",
    ),
    max_points: int = Query(400, ge=8, le=MAX_POINTS, description="per trial, at most"),
    trial_id: list[int] | None = Query(None, description="only these trials (repeatable)"),
    x_axis: str = Query(
        "batches",
        pattern="^(batches|epochs|time)$",
        description="epochs: each series also has `epochs`; time: `timestamps`",
    ),
) -> dict[str, Any]:
    """One metric of every trial (or of the ``trial_id`` ones), each series downsampled
    on the server to at most ``max_points`` points with M4 (extremes kept); with
    ``x_axis`` ``epochs`` or ``time`` each series carries those x values too.

    Raises:
        NotFound: no such experiment (404).
        BadRequest: the metric name cannot be looked up (400).
    """
    try:
        return read_experiment_series(
            request.app.state.ctx.db, exp_id, group, name, max_points, trial_id, x_axis
        )
    except ValueError as exc:
        raise BadRequest(str(exc), [("name", str(exc))]) from None


@router.get("/experiments/{exp_id}/metrics/names", response_model=R.MetricNamesOut)
def get_experiment_metric_names(exp_id: DbId, request: Request) -> dict[str, list[str]]:
    """The numeric metric names in each trial's latest training and validation report.

    Raises:
        NotFound: no such experiment (404).
    """
    return read_metric_names(request.app.state.ctx.db, exp_id)
