"""REST routes of an experiment's searcher under ``/api/v1`` (issue 35; docs/protocol.md,
"Custom searchers"): the remote search runner's events and operations (Determined
≤0.37's ``searcher_events`` / ``searcher_operations``), and the search summary
(objectives, Pareto front, trial lineage, a custom method's error).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from . import responses as R
from .api_spec import DbId
from .models import search_views
from .routes import _ctx, _write

router = APIRouter(prefix="/api/v1")


class TriggeringEvent(BaseModel):
    """The event a post of operations answers (only its id is read)."""

    model_config = ConfigDict(extra="allow")

    id: int = Field(ge=1, le=2**62)


class SearcherOperationsBody(BaseModel):
    """Body of ``POST /experiments/{id}/searcher_operations``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    searcher_operations: list[dict[str, Any]] = Field(alias="searcherOperations", max_length=10_000)
    triggered_by_event: TriggeringEvent = Field(alias="triggeredByEvent")


@router.get("/experiments/{exp_id}/searcher_events", response_model=R.SearcherEventsOut)
def get_searcher_events(exp_id: DbId, request: Request) -> dict[str, Any]:
    """The events of a remote custom search not yet answered, oldest first."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        return search_views.searcher_events(s, ctx, exp_id)


@router.post("/experiments/{exp_id}/searcher_operations", response_model=R.Empty)
def post_searcher_operations(
    exp_id: DbId, body: SearcherOperationsBody, request: Request
) -> dict[str, Any]:
    """Apply the operations a remote runner answered to an event."""
    return _write(
        request,
        search_views.post_searcher_operations,
        exp_id,
        body.searcher_operations,
        body.triggered_by_event.id,
    )


@router.get("/experiments/{exp_id}/searcher", response_model=R.SearchSummaryOut)
def get_search_summary(exp_id: DbId, request: Request) -> dict[str, Any]:
    """The experiment's objectives, Pareto front (several objectives), trial lineage and
    a custom search method's error."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        return search_views.search_summary(s, ctx, exp_id)
