"""REST routes that read trials under ``/api/v1``: one trial, its metrics (pages and
downsampled series), logs and checkpoints, and killing a trial (docs/protocol.md).

Split out of :mod:`dauntless.master.routes`, which keeps the error handlers and the
JSON view helpers the route modules share."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Query, Request, Response

from . import responses as R
from . import routes_det_experiments as det_views
from .api_spec import DbId
from .det_dialect import speaks_determined
from .errors import BadRequest
from .metric_series import read_trial_series
from .models import lifecycle, trials
from .routes import _checkpoint_views, _ctx, _get_experiment, _get_trial, _trial_views
from .schemas import log_view, metric_view

router = APIRouter(prefix="/api/v1")

MAX_METRICS_PAGE = 10_000
"""The most batch counts one page of ``GET /trials/{id}/metrics`` may ask for."""


@router.post("/trials/{trial_id}/kill", response_model=R.TrialBody)
def kill_trial(trial_id: DbId, request: Request) -> dict[str, Any]:
    """Kill one trial; it ends CANCELED."""
    ctx = _ctx(request)
    ctx.write(lifecycle.kill_trial, trial_id)
    with ctx.db.read() as s:
        return {"trial": _trial_views(s, [_get_trial(s, trial_id)])[0]}


@router.get("/trials/{trial_id}", response_model=R.TrialBody)
def get_trial(trial_id: DbId, request: Request) -> dict[str, Any]:
    """One trial (Determined's shape to its client)."""
    if speaks_determined(request):
        return det_views.trial(request, trial_id)  # type: ignore[return-value]
    with _ctx(request).db.read() as s:
        return {"trial": _trial_views(s, [_get_trial(s, trial_id)])[0]}


@router.get("/trials/{trial_id}/metrics", response_model=R.MetricsOut)
def get_trial_metrics(
    trial_id: DbId,
    request: Request,
    group: str | None = Query(None, pattern="^(training|validation)$"),
    after_batches: int | None = Query(None, ge=-1, le=2**62),
    limit: int | None = Query(None, ge=1, le=MAX_METRICS_PAGE),
    downsample: int | None = Query(None),
    names: str | None = Query(None, max_length=16_384),
) -> dict[str, Any] | Response:
    """A trial's metric reports, by batch count; pages and downsampled series
    (docs/protocol.md, "Reading a trial's metrics").

    - ``after_batches`` and ``limit``: the reports with ``total_batches >
      after_batches``, at most ``limit`` batch counts' worth (every group's report at
      the last count is included); ``next_after_batches`` is the cursor of the next
      page, or null on the last one.
    - ``downsample=N``: instead of reports, ``series``: each metric's values M4
      downsampled to at most N points (8..1024), read from the stored summaries.
    - ``names=a,b``: only these metrics (in ``values`` and in ``series``).
    """
    wanted = [n for n in (names or "").split(",") if n] if names is not None else None
    ctx = _ctx(request)
    with ctx.db.read() as s:
        _get_trial(s, trial_id)
    if downsample is not None:
        if after_batches is not None or limit is not None:
            raise BadRequest(
                "invalid request: downsample: cannot be combined with after_batches/limit",
                [("downsample", "cannot be combined with after_batches/limit")],
            )
        try:
            series = read_trial_series(
                ctx.db,
                trial_id,
                [group] if group else ["training", "validation"],
                wanted,
                downsample,
            )
        except ValueError as exc:
            raise BadRequest(
                f"invalid request: downsample: {exc}", [("downsample", str(exc))]
            ) from None
        return {
            "metrics": [],
            "series": series,
            "downsampling": "M4 (Jugel et al., PVLDB 7(10), 2014)",
            "next_after_batches": None,
        }
    with ctx.db.read() as s:
        rows, cursor = trials.metrics_page(s, trial_id, group, after_batches, limit)
        views = [metric_view(m) for m in rows]
    if wanted is not None:
        keep = set(wanted)
        for v in views:
            v["values"] = {k: x for k, x in v["values"].items() if k in keep}
    body = {"metrics": views, "next_after_batches": cursor}
    # Encoded here rather than checked and dumped against ``MetricsOut`` by FastAPI: the
    # views are built from typed columns, and that pass cost as much as the page's read
    # (issue 19). orjson writes a non-finite float an older master stored as null, and
    # refuses integers beyond 64 bits, which FastAPI's path still encodes.
    try:
        return Response(orjson.dumps(body), media_type="application/json")
    except orjson.JSONEncodeError:
        return body


@router.get("/trials/{trial_id}/logs", response_model=R.LogsOut)
def get_trial_logs(
    trial_id: DbId,
    request: Request,
    after_id: int = Query(0, ge=0, le=2**63 - 1),
    limit: int = Query(1000, ge=1, le=10_000),
) -> dict[str, Any]:
    """Log lines of a trial with ids above ``after_id``; poll with the last id to follow
    (to Determined's client: its stream of ``{"result": ...}`` lines)."""
    if speaks_determined(request):
        return det_views.trial_logs(request, trial_id)  # type: ignore[return-value]
    with _ctx(request).db.read() as s:
        trial, rows = trials.trial_logs(s, trial_id, after_id, limit)
        return {"logs": [log_view(r) for r in rows], "trial_state": trial.state}


@router.get("/trials/{trial_id}/checkpoints", response_model=R.CheckpointsOut)
def get_trial_checkpoints(trial_id: DbId, request: Request) -> dict[str, Any]:
    """A trial's checkpoints, oldest first."""
    with _ctx(request).db.read() as s:
        trial = _get_trial(s, trial_id)
        exp = _get_experiment(s, trial.experiment_id)
        rows = trials.trial_checkpoints(s, trial_id)
        if speaks_determined(request):
            return det_views.checkpoints_of(request, exp, rows, s)  # type: ignore[return-value]
        return {"checkpoints": _checkpoint_views(s, exp, rows)}
