"""Determined's shapes of the experiment, trial, checkpoint and agent answers whose
Dauntless shapes clash with them (issue 33; :mod:`dauntless.master.det_dialect` says
which clash and when a request gets these).

Each function is called by the Dauntless route of the same path when the request
speaks Determined's dialect, reads through the same model functions and view helpers
that route uses, and translates with :mod:`dauntless.master.det_shapes`: one
implementation of each behaviour, two renderings.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from . import authz, det_shapes
from .api_spec import INT32_MAX
from .db import ExperimentRow
from .errors import BadRequest
from .models import agents, experiment_reads, trials
from .models.jobs import EXPERIMENT_PREFIX
from .rbac import Perm
from .routes import (
    _checkpoint_views,
    _ctx,
    _experiment_views,
    _get_experiment,
    _trial_views,
    trial_view_pages,
)
from .schemas import agent_view
from .states import is_terminal

log = logging.getLogger("dauntless.master")

MAX_PAGE = 10_000
"""The most items one page of Determined's list answers holds."""


def _int_param(request: Request, name: str, default: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= high:
        raise BadRequest(
            f"invalid request: {name}: expected an integer 0 .. {high}", [(name, "0 .. max")]
        )
    return value


def page(offset: int, count: int, total: int, limit: int) -> dict[str, int]:
    """Determined's ``Pagination`` of ``count`` items at ``offset`` of ``total``."""
    return {
        "offset": offset,
        "limit": limit,
        "startIndex": offset if count else 0,
        "endIndex": offset + count,
        "total": total,
    }


def _experiments(s: Session, rows: list[ExperimentRow]) -> list[dict[str, Any]]:
    return [
        det_shapes.experiment(view, f"{EXPERIMENT_PREFIX}{row.id}", row.original_config)
        for row, view in zip(rows, _experiment_views(s, rows), strict=True)
    ]


def experiments_page(request: Request) -> JSONResponse:
    """Determined's ``GetExperimentsResponse`` for ``GET /api/v1/experiments`` (its query
    parameters: ``offset``, ``limit``, ``archived``, ``users``, ``projectId``); only
    what the caller may view, newest first."""
    params = request.query_params
    offset = _int_param(request, "offset", 0, INT32_MAX)
    limit = _int_param(request, "limit", 100, MAX_PAGE) or 100
    archived = {"true": True, "false": False}.get((params.get("archived") or "").lower())
    project = _int_param(request, "projectId", 0, INT32_MAX) or None
    owners = params.getlist("users") or None
    scope = authz.visible(request, Perm.VIEW_EXPERIMENT_METADATA)
    with _ctx(request).db.read() as s:
        rows, total = experiment_reads.experiments_page(
            s, archived, limit, offset, scope, None, project, owners=owners
        )
        items = _experiments(s, rows)
    return JSONResponse(
        {"experiments": items, "pagination": page(offset, len(items), total, limit)}
    )


def experiment(request: Request, exp_id: int) -> JSONResponse:
    """Determined's ``GetExperimentResponse``."""
    with _ctx(request).db.read() as s:
        item = _experiments(s, [_get_experiment(s, exp_id)])[0]
    return JSONResponse({"experiment": item, "jobSummary": None})


def _json(content: Any) -> bytes:
    """``content`` as :class:`JSONResponse` renders it (compact UTF-8 JSON, NaN refused),
    for answers written piece by piece that must read as that response's bytes."""
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def experiment_trials(request: Request, exp_id: int) -> StreamingResponse:
    """Determined's ``GetExperimentTrialsResponse`` (``offset``/``limit`` pages, by id;
    ``limit`` 0, Determined's client's default: every trial from ``offset`` on).

    Written a page (:data:`dauntless.master.routes.TRIAL_PAGE` trials) at a time, each
    read in a read session of its own (issue 37: built whole, a 10,000-trial answer held
    every row and view at once); the bytes are those of the answer built whole. The
    trials are counted (``pagination.total``) before the body starts and at most that
    many are listed: trials created meanwhile have larger ids and are left out; each
    listed trial is as its page read it.

    Raises:
        NotFound: no such experiment (before the body starts).
        BadRequest: ``offset`` or ``limit`` out of range.
    """
    offset = _int_param(request, "offset", 0, INT32_MAX)
    limit = _int_param(request, "limit", 0, MAX_PAGE)
    ctx = _ctx(request)
    with ctx.db.read() as s:
        _get_experiment(s, exp_id)
        total = trials.trial_counts_and_bests(s, [exp_id]).get(exp_id, (0, None, None))[0]
    wanted = max(0, total - offset) if not limit else max(0, min(limit, total - offset))

    def body() -> Iterator[bytes]:
        yield b'{"trials":['
        sent = 0
        if wanted:
            for views in trial_view_pages(ctx, exp_id, skip=offset, limit=wanted):
                sep = b"," if sent else b""
                yield sep + b",".join(_json(det_shapes.trial(v)) for v in views)
                sent += len(views)
        yield b'],"pagination":' + _json(page(offset, sent, total, limit)) + b"}"

    return StreamingResponse(body(), media_type="application/json")


def trial(request: Request, trial_id: int) -> JSONResponse:
    """Determined's ``GetTrialResponse``."""
    with _ctx(request).db.read() as s:
        view = _trial_views(s, [trials.read_trial(s, trial_id)])[0]
    return JSONResponse({"trial": det_shapes.trial(view)})


_CHECKPOINT_SORTS = {
    "SORT_BY_UUID": "uuid",
    "SORT_BY_TRIAL_ID": "trialId",
    "SORT_BY_BATCH_NUMBER": "batches",
    "SORT_BY_END_TIME": "reportTime",
    "SORT_BY_STATE": "state",
}


def checkpoints_of(
    request: Request, exp: ExperimentRow, rows: list[Any], s: Session
) -> JSONResponse:
    """Determined's ``Get{Experiment,Trial}CheckpointsResponse`` of ``rows``.

    Query: ``states`` (e.g. ``STATE_COMPLETED``); ``sortByAttr`` (``SORT_BY_*``) or
    ``sortByMetric`` (only the experiment's searcher metric is stored with checkpoints:
    another is refused, naming it); ``orderBy`` (default: the searcher metric's better
    end first, else ascending); ``offset``, ``limit``. Checkpoints without a metric value
    sort last.

    Raises:
        BadRequest: an unknown sort, or a metric other than the searcher's.
    """
    params = request.query_params
    searcher = (exp.config.get("searcher") or {}) if isinstance(exp.config, dict) else {}
    attr = params.get("sortByAttr") or "SORT_BY_SEARCHER_METRIC"
    metric = params.get("sortByMetric")
    if metric and metric != searcher.get("metric"):
        raise BadRequest(
            f"invalid request: sortByMetric: only the searcher metric "
            f"{searcher.get('metric')!r} is stored with checkpoints",
            [("sortByMetric", "the searcher metric")],
        )
    if attr not in _CHECKPOINT_SORTS and attr not in (
        "SORT_BY_SEARCHER_METRIC",
        "SORT_BY_UNSPECIFIED",
    ):
        raise BadRequest(
            f"invalid request: sortByAttr: unknown {attr!r}", [("sortByAttr", "SORT_BY_*")]
        )
    order = params.get("orderBy") or ""
    wanted = set(params.getlist("states"))
    views = _checkpoint_views(s, exp, rows)
    items = [
        (v, det_shapes.checkpoint(v, exp.config))
        for v in views
        if not wanted or det_shapes.state(v.get("state")) in wanted
    ]
    if metric or attr in ("SORT_BY_SEARCHER_METRIC", "SORT_BY_UNSPECIFIED"):
        desc = order == "ORDER_BY_DESC" if order else not searcher.get("smaller_is_better", True)
        known = [x for x in items if x[0].get("searcher_metric") is not None]
        known.sort(key=lambda x: x[0]["searcher_metric"], reverse=desc)
        items = known + [x for x in items if x[0].get("searcher_metric") is None]
    else:
        key = _CHECKPOINT_SORTS[attr]
        items.sort(
            key=lambda x: (
                x[0].get("total_batches") or 0 if key == "batches" else x[1].get(key) or ""
            ),
            reverse=order == "ORDER_BY_DESC",
        )
    offset = _int_param(request, "offset", 0, INT32_MAX)
    limit = _int_param(request, "limit", 0, MAX_PAGE)
    chosen = [c for _, c in items][offset : offset + limit if limit else None]
    return JSONResponse(
        {"checkpoints": chosen, "pagination": page(offset, len(chosen), len(items), limit)}
    )


def agents_list(request: Request) -> JSONResponse:
    """Determined's ``GetAgentsResponse``."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        used = agents.slot_holders(s)
        rows = agents.all_agents(s)
        beats = ctx.heartbeats
        items = [
            det_shapes.agent(agent_view(a, used.get(a.id, {}), beats.latest(a.id))) for a in rows
        ]
    return JSONResponse({"agents": items, "pagination": page(0, len(items), len(items), 0)})


LOG_POLL_SECONDS = 0.5
"""How often a followed log stream looks for new lines."""

_LOG_PAGE = 1000


def _log_line(row: Any) -> dict[str, Any]:
    """Determined's ``TrialLogsResponse`` of one stored line."""
    return {
        "id": str(row.id),
        "trialId": row.trial_id,
        "timestamp": det_shapes.timestamp(row.timestamp),
        "message": det_shapes.log_message(row.log),
        "level": "LOG_LEVEL_ERROR" if row.stdtype == "stderr" else "LOG_LEVEL_INFO",
        "agentId": None,
        "containerId": row.allocation_id,
        "rankId": row.rank_id,
        "stdtype": row.stdtype,
        "source": "",
        "log": row.log,
    }


def trial_logs(request: Request, trial_id: int) -> StreamingResponse:
    """Determined's ``GET /trials/{id}/logs``: one JSON object per line,
    ``{"result": TrialLogsResponse}`` (grpc-gateway's server-streaming framing).

    Query: ``limit`` (at most this many lines; with ``orderBy=ORDER_BY_DESC`` the last
    ones, newest first, as its ``--tail``), ``follow`` (keep streaming until the trial
    is terminal and no line is left).

    Raises:
        NotFound: no such trial (before the stream starts).
    """
    ctx = _ctx(request)
    limit = _int_param(request, "limit", 0, INT32_MAX)
    desc = request.query_params.get("orderBy") == "ORDER_BY_DESC"
    follow = (request.query_params.get("follow") or "").lower() == "true"
    with ctx.db.read() as s:
        trials.read_trial(s, trial_id)  # 404 before streaming

    def read(after: int) -> tuple[str, list[Any]]:
        with ctx.db.read() as s:
            row, lines = trials.trial_logs(s, trial_id, after, _LOG_PAGE)
            s.expunge_all()
            return row.state, lines

    async def lines() -> Any:
        after, sent = 0, 0
        tail: deque[Any] = deque(maxlen=limit or None)
        while True:
            state, rows = await run_in_threadpool(read, after)
            for row in rows:
                after = row.id
                if desc:
                    tail.append(row)
                    continue
                if limit and sent >= limit:
                    return
                sent += 1
                yield json.dumps({"result": _log_line(row)}) + "\n"
            if len(rows) == _LOG_PAGE:
                continue
            if desc:
                for row in reversed(tail):
                    yield json.dumps({"result": _log_line(row)}) + "\n"
                return
            if not follow or is_terminal(state) or await request.is_disconnected():
                return
            await asyncio.sleep(LOG_POLL_SECONDS)

    return StreamingResponse(lines(), media_type="application/json")


def experiment_created(request: Request, exp_id: int, warnings: list[str]) -> JSONResponse:
    """Determined's ``CreateExperimentResponse`` (201): the experiment, its config, and
    ``warnings`` (Determined's launch-warning enum, which cannot carry Dauntless's config
    warnings: those are logged by the master, each naming the experiment)."""
    for text in warnings:
        log.warning("experiment %d: %s", exp_id, text)
    with _ctx(request).db.read() as s:
        row = _get_experiment(s, exp_id)
        item = _experiments(s, [row])[0]
        config = row.config
    return JSONResponse({"experiment": item, "config": config, "warnings": []}, status_code=201)
