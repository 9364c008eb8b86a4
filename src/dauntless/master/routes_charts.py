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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from fastapi import APIRouter, Query, Request
from sqlalchemy import select

from .api_spec import DbId
from .auth import access
from .db import MetricRow, TrialRow
from .manager import NotFound
from .metric_series import m4
from .responses import BatchMetricsOut

router = APIRouter(prefix="/api/v1")

MAX_BATCH_POINTS = 2000
"""The most points per series a caller may ask for."""


@router.get("/trials/{trial_id}/batch-metrics", response_model=BatchMetricsOut)
@access(trial="own")
def get_batch_metrics(
    trial_id: DbId,
    request: Request,
    max_points: int = Query(500, ge=8, le=MAX_BATCH_POINTS, description="per series, at most"),
) -> dict[str, Any]:
    """One trial's per-batch training metrics, each series M4-downsampled.

    Raises:
        NotFound: no such trial (404).
    """
    with request.app.state.manager.db.read() as s:
        if s.get(TrialRow, trial_id) is None:
            raise NotFound(f"trial {trial_id} not found")
        rows = s.execute(
            select(MetricRow.total_batches, MetricRow.batch_metrics)
            .where(
                MetricRow.trial_id == trial_id,
                MetricRow.kind == "training",
                MetricRow.batch_metrics.is_not(None),
            )
            .order_by(MetricRow.total_batches)
        ).all()
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
