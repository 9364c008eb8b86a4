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
from .prom import CONTENT_TYPE, MasterMetrics, ScrapeCache

router = APIRouter()

_TEXT: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text format 0.0.4", "content": {"text/plain": {}}},
    401: {"model": ErrorBody, "description": "no valid credential"},
    403: {"model": ErrorBody, "description": "not an admin"},
    404: {"model": ErrorBody, "description": "observability.enable_prometheus is false"},
}


def _metrics(request: Request) -> tuple[MasterMetrics, ScrapeCache]:
    metrics: MasterMetrics | None = request.app.state.ctx.prom
    if metrics is None or metrics.cache is None:
        raise HTTPException(
            404, "Prometheus metrics are off (observability.enable_prometheus: false)"
        )
    return metrics, metrics.cache


@router.get("/prom/det-state-metrics", response_class=Response, responses=_TEXT)
async def det_state_metrics(request: Request) -> Response:
    """The cluster's state as Prometheus gauges (Determined's label mappings and counts).

    Served from :class:`~dauntless.master.prom.ScrapeCache` on the event loop while the
    rows it reads are unchanged; read again in a worker thread otherwise."""
    _, cache = _metrics(request)
    kept = cache.state()
    page, _ = kept if kept is not None else await run_in_threadpool(cache.read_state)
    return Response(page, media_type=CONTENT_TYPE)


@router.get("/debug/prom/metrics", response_class=Response, responses=_TEXT)
async def master_metrics(request: Request) -> Response:
    """The master process's own metrics.

    The queue depth and fold backlog come from :class:`~dauntless.master.prom.ScrapeCache`
    (a worker thread reads what it does not keep); the registry is rendered on the event
    loop: CPU work of about a millisecond and reads of ``/proc/self`` (the process
    collector), no blocking I/O."""
    metrics, cache = _metrics(request)
    kept, folds = cache.state(), cache.fold_backlog()
    if kept is None or folds is None:
        queued, backlog = await run_in_threadpool(_read_backlog, cache, kept, folds)
    else:
        queued, backlog = kept[1], folds
    return Response(metrics.render(queued, backlog), media_type=CONTENT_TYPE)


@router.get("/prom/det-http-sd-config", responses={k: v for k, v in _TEXT.items() if k != 200})
def http_sd_config(request: Request) -> list[dict[str, Any]]:
    """Prometheus HTTP service discovery: the ACTIVE agents' own metric pages
    (``http_sd_configs`` in prometheus.yml; docs/prometheus.md)."""
    _metrics(request)
    with request.app.state.ctx.db.read() as s:
        return observe.sd_targets(s)


def _read_backlog(
    cache: ScrapeCache, kept: tuple[bytes, dict[str, int]] | None, folds: int | None
) -> tuple[dict[str, int], int]:
    """The queue depth and fold backlog: what ``cache`` did not keep read now."""
    queued = (kept if kept is not None else cache.read_state())[1]
    return queued, folds if folds is not None else cache.read_fold_backlog()
