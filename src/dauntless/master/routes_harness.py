"""REST routes the trial harness reports to under ``/api/v1``: searcher operations,
metrics, progress, early exits and checkpoints (docs/protocol.md).

Split out of :mod:`dauntless.master.routes`, which keeps the error handlers and the
JSON view helpers the route modules share."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request

from . import responses as R
from .api_spec import DbId
from .auth import require_own_trial
from .body_limits import ParsedJSONRoute
from .models import checkpoints, metrics, search, trials
from .models.metrics import MetricsIn
from .routes import _ctx, _write
from .schemas import (
    CheckpointReport,
    CompletedOperation,
    EarlyExit,
    MetricsReport,
    MetricsReportBatch,
    ProgressReport,
)

# Reports arrive hundreds a second: their bodies are parsed once, by the body limits'
# middleware (issue 37).
router = APIRouter(prefix="/api/v1", route_class=ParsedJSONRoute)


@router.get("/trials/{trial_id}/searcher/operation", response_model=R.SearcherOperation)
def get_searcher_operation(trial_id: DbId, request: Request) -> dict[str, Any]:
    """The trial's next searcher operation."""
    with _ctx(request).db.read() as s:
        return trials.searcher_operation(s, trial_id)


@router.post("/trials/{trial_id}/searcher/completed_operation", response_model=R.SearcherOperation)
def complete_searcher_operation(trial_id: DbId, body: CompletedOperation, request: Request) -> dict:
    """The trial finished an operation and reports the searcher metric; the answer is
    its next operation, as the GET above would give it."""
    return _write(
        request, search.complete_operation, trial_id, body.op.length, body.searcher_metric
    )


@router.post("/trials/{trial_id}/metrics", response_model=R.Stored)
def post_trial_metrics(trial_id: DbId, body: MetricsReport, request: Request) -> dict:
    """Training or validation metrics at a batch count (idempotent)."""
    started = time.perf_counter()
    stored = metrics.report_metrics(
        _ctx(request),
        trial_id,
        body.group,
        body.steps_completed,
        body.trial_run_id,
        body.metrics,
        body.batch_metrics,
    )
    _ingested(request, started, [body.group])
    return {"stored": stored}


@router.post("/trials/{trial_id}/metrics/batch", response_model=R.StoredMany)
def post_trial_metrics_batch(trial_id: DbId, body: MetricsReportBatch, request: Request) -> dict:
    """Several metrics reports of one trial, stored in one transaction, each as
    ``POST /trials/{id}/metrics`` would store it (idempotent per report)."""
    started = time.perf_counter()
    stored = metrics.report_metrics_batch(
        _ctx(request),
        trial_id,
        [
            MetricsIn(r.group, r.steps_completed, r.trial_run_id, r.metrics, r.batch_metrics)
            for r in body.reports
        ],
    )
    _ingested(request, started, [r.group for r in body.reports])
    return {"stored": stored}


def _ingested(request: Request, started: float, groups: list[str]) -> None:
    """Count acknowledged reports and their time to acknowledgement (Prometheus)."""
    prom = _ctx(request).prom
    if prom is None:
        return
    prom.metric_ack.observe(time.perf_counter() - started)
    for group in groups:
        prom.metric_reports.labels(group).inc()


@router.post("/trials/{trial_id}/progress", response_model=R.Empty)
def post_trial_progress(trial_id: DbId, body: ProgressReport, request: Request) -> dict:
    """The trial's own progress estimate (0..1)."""
    _write(request, metrics.report_progress, trial_id, body.progress)
    return {}


@router.post("/trials/{trial_id}/early_exit", response_model=R.Empty)
def post_early_exit(trial_id: DbId, body: EarlyExit, request: Request) -> dict:
    """The trial will exit early (invalid hyperparameters)."""
    with _ctx(request).db.write() as s:
        trials.report_early_exit(s, trial_id, body.reason)
    return {}


@router.post("/checkpoints", response_model=R.Empty)
def post_checkpoint(body: CheckpointReport, request: Request) -> dict:
    """A completed checkpoint written by a trial (a trial's token: its own trial only)."""
    require_own_trial(request, body.trial_id)
    _write(
        request,
        checkpoints.report_checkpoint,
        body.uuid,
        body.trial_id,
        body.allocation_id,
        body.steps_completed,
        body.resources,
        body.metadata,
        body.state,
    )
    return {}
