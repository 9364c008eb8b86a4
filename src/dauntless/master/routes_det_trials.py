"""Routes Determined's client calls that Dauntless had no path for (issue 33): a
trial's workloads (``det e describe``, ``det t describe``) and the metrics stream of
several trials (the SDK's ``Trial.iter_metrics``, ``iter_trials_metrics``).

Both read through the model functions of Dauntless's own trial routes
(:func:`dauntless.master.models.trials.metrics_page`, ``trial_checkpoints``) and
answer in Determined's shapes (:mod:`dauntless.master.det_shapes`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from . import authz, det_shapes
from .api_spec import INT32_MAX, DbId
from .errors import BadRequest
from .models import trials
from .rbac import Perm
from .routes import _ctx
from .routes_det_experiments import page

router = APIRouter(prefix="/api/v1")

MAX_TRIALS = 1000
"""The most trials one metrics stream may name."""


def _report(row: Any) -> dict[str, Any]:
    """Determined's ``MetricsReport`` of one stored report (its SDK reads validation
    values under ``validation_metrics``, the others under ``avg_metrics``)."""
    key = "validation_metrics" if row.kind == "validation" else "avg_metrics"
    return {
        "id": str(row.id),
        "trialId": row.trial_id,
        "endTime": det_shapes.timestamp(row.reported_at),
        "metrics": {key: row.values, "batch_metrics": None},
        "totalBatches": row.total_batches,
        "archived": False,
        "trialRunId": row.trial_run_id or 0,
        "group": row.kind,
    }


def _workload(row: Any) -> dict[str, Any]:
    return {
        "totalBatches": row.total_batches,
        "endTime": det_shapes.timestamp(row.reported_at),
        "metrics": {"avgMetrics": row.values},
        "numInputs": 0,
    }


class DetMetricsLine(BaseModel):
    """One line of Determined's ``GetMetrics`` stream (a trial's reports)."""

    result: dict[str, Any] = Field(description="``{metrics: [report, ...]}`` of one trial")


class DetWorkloads(BaseModel):
    """Determined's ``GetTrialWorkloadsResponse``."""

    workloads: list[dict[str, Any]] = Field(description="training, validation, checkpoint")
    pagination: dict[str, Any] = Field(description="offset, limit, startIndex, endIndex, total")


@router.get(
    "/trials/metrics/trial_metrics",
    response_model=None,
    responses={200: {"model": DetMetricsLine, "description": "one JSON line per trial"}},
)
def trial_metrics(
    request: Request,
    trial_ids: list[DbId] = Query(alias="trialIds", max_length=MAX_TRIALS),
    group: str = Query(max_length=256),
) -> StreamingResponse:
    """Determined's ``GetMetrics``: the reports of ``group`` (``training``,
    ``validation``) of each trial, as one ``{"result": {"metrics": [...]}}`` line per
    trial. Every trial must be viewable (``VIEW_EXPERIMENT_METADATA``; 403 naming it,
    404 for an unknown trial) before anything is sent."""
    if group not in ("training", "validation"):
        raise BadRequest(
            f"invalid request: group: {group!r} is not stored here (training, validation)",
            [("group", "training or validation")],
        )
    ctx = _ctx(request)
    with ctx.db.read() as s:
        targets = [
            authz.experiment_target(s, trials.read_trial(s, t).experiment_id) for t in trial_ids
        ]
    for target in targets:
        authz.require(request, target, perm=Perm.VIEW_EXPERIMENT_METADATA)
    with ctx.db.read() as s:
        pages = [
            [_report(r) for r in trials.metrics_page(s, t, group, None, None)[0]] for t in trial_ids
        ]
    lines = [json.dumps({"result": {"metrics": reports}}) + "\n" for reports in pages]
    return StreamingResponse(iter(lines), media_type="application/json")


@router.get(
    "/trials/{trial_id}/workloads",
    response_model=None,
    responses={200: {"model": DetWorkloads, "description": "the trial's workloads"}},
)
def trial_workloads(
    trial_id: DbId,
    request: Request,
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=INT32_MAX),
    filter: str = Query("FILTER_OPTION_UNSPECIFIED", max_length=64),
) -> JSONResponse:
    """Determined's ``GetTrialWorkloads``: the trial's training and validation reports
    and checkpoints, by batch count (``filter``: ``FILTER_OPTION_CHECKPOINT``,
    ``..._VALIDATION``, ``..._CHECKPOINT_OR_VALIDATION`` or all)."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        trials.read_trial(s, trial_id)
        reports = trials.metrics_page(s, trial_id, None, None, None)[0]
        stored = trials.trial_checkpoints(s, trial_id)
    want_ckpt = filter != "FILTER_OPTION_VALIDATION"
    want_val = filter != "FILTER_OPTION_CHECKPOINT"
    want_train = filter in ("FILTER_OPTION_UNSPECIFIED", "")
    items: list[tuple[int, int, dict[str, Any]]] = []
    for r in reports:
        if (r.kind == "training" and want_train) or (r.kind == "validation" and want_val):
            items.append(
                (r.total_batches, 0 if r.kind == "training" else 1, {r.kind: _workload(r)})
            )
    if want_ckpt:
        for c in stored:
            items.append(
                (
                    c.total_batches,
                    2,
                    {
                        "checkpoint": {
                            "uuid": c.uuid,
                            "totalBatches": c.total_batches,
                            "state": det_shapes.state(c.state),
                            "endTime": det_shapes.timestamp(c.report_time),
                            "resources": {k: str(v) for k, v in (c.resources or {}).items()},
                            "metadata": c.meta or {},
                        }
                    },
                )
            )
    items.sort(key=lambda x: (x[0], x[1]))
    chosen = [w for _, _, w in items][offset : offset + limit if limit else None]
    return JSONResponse(
        {"workloads": chosen, "pagination": page(offset, len(chosen), len(items), limit)}
    )
