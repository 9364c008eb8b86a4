"""Response models of the searcher routes (issue 35; :mod:`..routes_searcher`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class SearcherEventsOut(BaseModel):
    """Events a remote runner has yet to answer."""

    model_config = ConfigDict(extra="allow")

    searcherEvents: list[dict[str, Any]]
    experimentState: str


class SearchSummaryOut(BaseModel):
    """What the experiment's searcher adds to its description."""

    model_config = ConfigDict(extra="allow")

    searcher: str
    objectives: list[dict[str, Any]]
    error: str | None
    pareto_front: dict[str, Any] | None
    lineage: list[dict[str, Any]]
