"""Prometheus endpoints (issue 34 scope 1; :mod:`dauntless.master.prom`).

| route | answer |
|---|---|
| ``GET /prom/det-state-metrics`` | the cluster's agents, slots, allocations, tasks and experiments (Prometheus text format 0.0.4) |
| ``GET /debug/prom/metrics`` | the master process: requests, metric ingest, scheduling, database, queue depth, fold backlog |
| ``GET /prom/det-http-sd-config`` | Prometheus HTTP service discovery JSON: ``[{"targets": ["host:port"], "labels": {agent_id, resource_pool}}]`` of the ACTIVE agents serving metrics |

Both need an admin's credential (``Authorization: Bearer <token>``; for a scraper, an
access token of an admin from ``det token create``, read by Prometheus from a file:
docs/prometheus.md). With ``observability.enable_prometheus: false`` both answer 404
naming that field.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from .api_spec import ErrorBody
from .models import observe
from .prom import CONTENT_TYPE, MasterMetrics, render_state

router = APIRouter()

_TEXT: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text format 0.0.4", "content": {"text/plain": {}}},
    401: {"model": ErrorBody, "description": "no valid credential"},
    403: {"model": ErrorBody, "description": "not an admin"},
    404: {"model": ErrorBody, "description": "observability.enable_prometheus is false"},
}


def _metrics(request: Request) -> MasterMetrics:
    metrics: MasterMetrics | None = request.app.state.ctx.prom
    if metrics is None:
        raise HTTPException(
            404, "Prometheus metrics are off (observability.enable_prometheus: false)"
        )
    return metrics


def _snapshot(request: Request) -> observe.StateSnapshot:
    with request.app.state.ctx.db.read() as s:
        return observe.state_snapshot(s)


@router.get("/prom/det-state-metrics", response_class=Response, responses=_TEXT)
async def det_state_metrics(request: Request) -> Response:
    """The cluster's state as Prometheus gauges (Determined's label mappings and counts)."""
    _metrics(request)
    snap = await run_in_threadpool(_snapshot, request)
    return Response(render_state(snap), media_type=CONTENT_TYPE)


@router.get("/debug/prom/metrics", response_class=Response, responses=_TEXT)
async def master_metrics(request: Request) -> Response:
    """The master process's own metrics."""
    metrics = _metrics(request)
    body = await run_in_threadpool(_render_master, request, metrics)
    return Response(body, media_type=CONTENT_TYPE)


@router.get("/prom/det-http-sd-config", responses={k: v for k, v in _TEXT.items() if k != 200})
def http_sd_config(request: Request) -> list[dict[str, Any]]:
    """Prometheus HTTP service discovery: the ACTIVE agents' own metric pages
    (``http_sd_configs`` in prometheus.yml; docs/prometheus.md)."""
    _metrics(request)
    with request.app.state.ctx.db.read() as s:
        return observe.sd_targets(s)


def _render_master(request: Request, metrics: MasterMetrics) -> bytes:
    with request.app.state.ctx.db.read() as s:
        queued, folds = observe.backlog(s)
    return metrics.render(queued, folds)
