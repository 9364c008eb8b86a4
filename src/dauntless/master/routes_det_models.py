"""Determined's dialect of the model-registry routes (:mod:`dauntless.master.routes_models`,
issue 33): its camelCase query parameters, its sort keys, and its ``ModelVersion``
shape with the checkpoint's experiment config. The routes call these; the registry's
behaviour stays in :mod:`dauntless.master.models.registry`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from sqlalchemy.orm import Session

from . import det_shapes
from .api_spec import INT32_MAX
from .db import ExperimentRow
from .det_dialect import speaks_determined
from .errors import BadRequest


def det_versions(s: Session, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Determined's ``ModelVersion`` of each version view, its checkpoint rendered with
    its experiment's config (read in ``s``; None once the experiment is deleted)."""
    exp_ids = {v["checkpoint"].get("experiment_id") for v in views}
    configs = {
        e.id: e.config
        for e in s.query(ExperimentRow).filter(ExperimentRow.id.in_(exp_ids - {None, 0}))
    }
    return [
        det_shapes.model_version(v, configs.get(v["checkpoint"].get("experiment_id")))
        for v in views
    ]


def det_param(request: Request, name: str, value: Any, many: bool = False) -> Any:
    """A query parameter that Determined's client spells in camelCase (``sortBy``,
    ``orderBy``, ``workspaceNames``...): its value when a request in Determined's
    dialect gave it, else ``value`` (what FastAPI read under the snake_case name); with
    ``many`` every value given, as a list."""
    key = det_shapes.camel(name)
    q = request.query_params
    if not speaks_determined(request) or key not in q:
        return value
    return q.getlist(key) if many else q[key]


MODEL_SORTS = frozenset(
    {"unspecified", "name", "description", "creation_time", "last_updated_time"}
    | {"num_versions", "workspace"}
)
"""Sort keys of ``GET /models`` (Determined's ``SORT_BY_*`` without the prefix)."""

VERSION_SORTS = frozenset({"unspecified", "version", "creation_time"})
"""Sort keys of ``GET /models/{name}/versions``."""


def sort_key(raw: str, known: frozenset[str]) -> str:
    """``SORT_BY_NAME`` / ``name`` -> ``name``.

    Raises:
        BadRequest: not one of ``known`` (naming ``sort_by``).
    """
    key = raw.upper().removeprefix("SORT_BY_").lower()
    if key not in known:
        raise BadRequest(
            f"invalid request: sort_by: unknown key {raw!r}", [("sort_by", "a SORT_BY_ key")]
        )
    return key


def query_id(raw: str, name: str) -> int:
    """An id given in the query string. Raises BadRequest naming ``name``."""
    if raw.isdigit() and 0 < int(raw) <= INT32_MAX:
        return int(raw)
    raise BadRequest(f"invalid request: {name}: expected ids", [(name, "positive ids")])
