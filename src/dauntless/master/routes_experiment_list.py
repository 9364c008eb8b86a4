"""``GET /api/v1/experiments``: search across experiments on the server (issue 31
scope 7, issue 37 scope 5), shared with ``GET /stream/experiments`` (the WebUI's list),
``det experiment list`` and the SDK.

The query parameters (docs/protocol.md, "Searching experiments") filter by workspace,
project, state, owner, label, searcher, name, time range, hyperparameter values and
ranges and best-metric ranges; ``sort_by``/``order_by`` sort by any of them;
``limit``/``offset`` page; ``fields`` projects the page to the named columns, reading only
what they need. Only experiments in workspaces where the caller holds
``VIEW_EXPERIMENT_METADATA`` are searched, in SQL, so counts leak nothing.

The page is answered as JSON encoded by orjson without re-validating it through the
response model (declared for the API spec): a page of 1,000 full experiments spent most
of its time in that validation (issue 37).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from . import authz
from . import responses as R
from . import routes_det_experiments as det_views
from .api_spec import INT32_MAX
from .db.engine import dumps_json
from .det_dialect import speaks_determined
from .errors import BadRequest
from .models import experiment_reads
from .models.experiment_search import (
    MAX_CONDITIONS,
    ExperimentQuery,
    check_fields,
    check_sort,
    experiment_columns,
    parse_condition,
    search_experiments,
)
from .rbac import Perm
from .routes import _ctx, _experiment_views

router = APIRouter(prefix="/api/v1")

DEFAULT_LIMIT = 100
"""The page size of ``GET /experiments`` when ``limit`` is not given."""
MAX_FIELDS = 64
"""The most ``fields`` one request may name."""


def _time_query() -> Any:
    return Query(None, ge=0.0, le=1e11, description="seconds since the epoch")


@dataclass(frozen=True)
class ListRequest:
    """A parsed experiment search: the query and the projection (None: full views)."""

    query: ExperimentQuery
    fields: tuple[str, ...] | None
    limit_given: bool = True


def list_request(
    archived: str = Query(
        "false",
        pattern="^(true|false|all)$",
        description="false (default): hide archived; true: only archived; all: both",
    ),
    limit: int | None = Query(None, ge=1, le=10_000, description="page size (default 100)"),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    id: list[int] = Query([], max_length=100, description="only these experiments (any)"),  # noqa: A002
    workspace_id: int | None = Query(None, ge=0, le=INT32_MAX, description="only this one's"),
    project_id: int | None = Query(None, ge=0, le=INT32_MAX, description="only this one's"),
    state: list[str] = Query([], max_length=16, description="experiment states (any)"),
    owner: list[str] = Query([], max_length=64, description="owners' usernames (any)"),
    label: list[str] = Query([], max_length=16, description="labels (all of them)"),
    searcher: list[str] = Query([], max_length=16, description="searcher names (any)"),
    name: str | None = Query(None, max_length=512, description="part of the name"),
    start_after: float | None = _time_query(),
    start_before: float | None = _time_query(),
    end_after: float | None = _time_query(),
    end_before: float | None = _time_query(),
    hp: list[str] = Query(
        [],
        max_length=MAX_CONDITIONS,
        description="hyperparameter conditions NAME OP VALUE (lr>=0.001, optimizer=adam)",
    ),
    best_metric: list[str] = Query(
        [],
        max_length=MAX_CONDITIONS,
        description="best searcher-metric conditions NAME OP NUMBER (validation_loss<0.3)",
    ),
    sort_by: str = Query(
        "id",
        max_length=300,
        description="id, name, state, owner, start_time, end_time, progress, num_trials, "
        "searcher, best_searcher_metric, project_id, description or hp.<name>",
    ),
    order_by: str = Query("desc", pattern="^(asc|desc)$"),
    fields: str | None = Query(
        None,
        max_length=4096,
        description="comma-separated columns to answer (default: the full experiment), "
        "e.g. id,name,state,best_searcher_metric,hp.lr",
    ),
) -> ListRequest:
    """The query parameters of an experiment search, checked.

    Raises:
        BadRequest: a malformed condition, an unknown state, sort key or field (each
            naming its parameter), or more than :data:`MAX_CONDITIONS` conditions.
    """
    from .states import State

    known = {s.value for s in State}
    for value in state:
        if value not in known:
            raise BadRequest(
                f"invalid state: {value!r}", [("state", f"one of {', '.join(sorted(known))}")]
            )
    if any(not 0 <= i <= INT32_MAX for i in id):
        raise BadRequest("invalid id", [("id", "experiment ids (0 .. 2**31 - 1)")])
    if len(hp) + len(best_metric) > MAX_CONDITIONS:
        raise BadRequest(
            "too many conditions", [("hp", f"at most {MAX_CONDITIONS} hp and best_metric")]
        )
    check_sort(sort_by)
    projection = None
    if fields is not None:
        projection = tuple(f.strip() for f in fields.split(",") if f.strip())
        if len(projection) > MAX_FIELDS:
            raise BadRequest("too many fields", [("fields", f"at most {MAX_FIELDS}")])
        check_fields(projection)
    query = ExperimentQuery(
        archived={"true": True, "false": False, "all": None}[archived],
        ids=tuple(id),
        workspace_id=workspace_id,
        project_id=project_id,
        states=tuple(state),
        owners=tuple(owner),
        searchers=tuple(searcher),
        labels=tuple(label),
        name=name or None,
        start_after=start_after,
        start_before=start_before,
        end_after=end_after,
        end_before=end_before,
        hparams=tuple(parse_condition(c, "hp") for c in hp),
        metrics=tuple(parse_condition(c, "best_metric", numeric=True) for c in best_metric),
        sort_by=sort_by,
        descending=order_by == "desc",
        limit=limit or DEFAULT_LIMIT,
        offset=offset,
    )
    return ListRequest(query, projection, limit is not None)


def with_limit(search: ListRequest, default: int) -> ListRequest:
    """``search`` with a page of ``default`` experiments when it named no ``limit``."""
    if search.limit_given:
        return search
    return replace(search, query=replace(search.query, limit=default))


def experiment_list_page(request: Request, search: ListRequest) -> dict[str, Any]:
    """The body of ``GET /experiments``: ``{"experiments": [...], "total": n}``, only
    what the caller may view; each experiment projected to ``search.fields`` (``id``
    always included) or, without fields, the full experiment view."""
    scope = authz.visible(request, Perm.VIEW_EXPERIMENT_METADATA)
    with _ctx(request).db.read() as s:
        ids, total = search_experiments(s, search.query, scope)
        if search.fields is None:
            rows = experiment_reads.experiments_by_ids(s, ids)
            return {"experiments": _experiment_views(s, rows), "total": total}
        return {"experiments": experiment_columns(s, ids, search.fields), "total": total}


_LIST_SPEC: dict[int | str, dict[str, Any]] = {
    200: {"model": R.ExperimentListPage, "description": "one page of experiments"}
}


@router.get("/experiments", response_model=None, responses=_LIST_SPEC)
def list_experiments(request: Request, search: ListRequest = Depends(list_request)) -> Response:
    """Search experiments (only those the caller may view with
    ``VIEW_EXPERIMENT_METADATA``): filtered, sorted, paged and projected as the query
    parameters say (docs/protocol.md, "Searching experiments"), as
    ``{"experiments": [...], "total": N}``; to Determined's client, its
    ``GetExperimentsResponse`` (its own query parameters: ``users``, ``projectId``)."""
    if speaks_determined(request):
        return det_views.experiments_page(request)
    body = experiment_list_page(request, search)
    return Response(dumps_json(body), media_type="application/json")
