"""What makes the REST API's OpenAPI description true: id ranges, declared error answers,
405 for a wrong method.

- **Ids.** Experiment, trial, user and log ids, batch counts and other integers are
  stored in 32-bit ``INTEGER`` columns on PostgreSQL (``SERIAL`` ids), so a path, query
  or body integer outside ``0 .. 2**31 - 1`` (or ``-2**31 ..`` where negatives mean
  something, such as exit codes) is refused with 400 naming the field, never passed to
  the database (where it would fail with a 500). :data:`DbId` is the type of an id in a
  path.
- **Error answers.** Every ``/api/v1`` route declares the error statuses it can answer,
  all with the body :class:`ErrorBody` (docs/protocol.md): 400 (invalid request), 401 and
  403 (unless the route is open), 404 (a route naming an object), 409 (state changes),
  413 (a body or upload over its limit: every POST, PUT and PATCH), 429 (login), 405
  (wrong method); see :func:`declare_errors`.
- **405.** A path the API serves with other methods answers 405 with ``Allow`` (not the
  UI's catch-all 404); see :func:`method_not_allowed`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Path
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.routing import Match
from starlette.types import Scope

from .auth import route_rule

INT32_MAX = 2**31 - 1
"""Largest value of an ``INTEGER`` column (PostgreSQL's int4; ids are ``SERIAL``)."""
INT32_MIN = -(2**31)

DbId = Annotated[int, Path(ge=0, le=INT32_MAX, description="an id (0 .. 2**31 - 1)")]
BodyId = Annotated[int, Field(ge=0, le=INT32_MAX, description="an id (0 .. 2**31 - 1)")]
"""An id in a request body or a query list."""
"""The type of an integer id in a route's path."""


class FieldError(BaseModel):
    """One problem of a request: the field (dotted path) and what was expected."""

    field: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer: a one-line ``detail`` and, for invalid requests, ``errors``."""

    detail: str
    errors: list[FieldError] | None = None


_DESCRIPTIONS = {
    400: "Invalid request: the detail and `errors` name the fields",
    401: "No valid credential",
    403: "The caller may not do this (the detail names the rule)",
    404: "No such object",
    405: "Method not allowed on this path",
    409: "The object's state forbids it, or it conflicts with another",
    413: "The body or upload is over its size limit",
    429: "Too many failed logins: retry after `Retry-After` seconds",
}

_CHANGES = ("POST", "PATCH", "DELETE", "PUT")

GZIP_ROUTES = (
    "/api/v1/experiments/{exp_id}/model_def",
    "/api/v1/checkpoints/{uuid}/download",
    "/api/v1/tasks/{task_id}/context",
)
"""Routes that answer a gzipped tar (``application/gzip``), not JSON."""

EVENT_STREAM_ROUTES = (
    "/api/v1/stream/experiments",
    "/api/v1/stream/experiments/{exp_id}",
    "/api/v1/stream/cluster",
    "/api/v1/stream/trials/{trial_id}/logs",
)
"""Routes that answer server-sent events (``text/event-stream``, docs/protocol.md), not
JSON."""


def api_routes(app: FastAPI) -> list[APIRoute]:
    """The application's ``/api/`` routes, also those of included routers (FastAPI may
    keep an included router as one entry of ``app.routes``)."""
    found: list[APIRoute] = []

    def walk(routes: Any) -> None:
        for route in routes:
            if isinstance(route, APIRoute):
                if route.path_format.startswith("/api/"):
                    found.append(route)
            elif getattr(route, "original_router", None) is not None:
                walk(route.original_router.routes)

    walk(app.routes)
    return found


def error_statuses(route: APIRoute) -> set[int]:
    """The error statuses ``route`` can answer (see the module docstring)."""
    method = sorted(route.methods or {"GET"})[0]
    rule = route_rule(method, route.path_format, route.endpoint)
    statuses = {400, 405}
    if not rule.open:
        statuses |= {401, 403}
    if route.param_convertors or "{" in route.path_format:
        statuses.add(404)
    methods = route.methods or set()
    if methods & set(_CHANGES):
        statuses |= {404, 409}
    if route.path_format.endswith("/download"):
        statuses.add(409)  # the checkpoint was deleted by GC
    if methods & {"POST", "PUT", "PATCH"}:
        statuses.add(413)  # a JSON body over its limit (body_limits), an upload
    if route.path_format == "/api/v1/auth/login":
        statuses |= {401, 403, 429}
    return statuses


def declare_errors(app: FastAPI) -> None:
    """Declare the error answers of every API route (before the spec is first built)."""
    for route in api_routes(app):
        for status in sorted(error_statuses(route)):
            route.responses.setdefault(
                status, {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
            )
        # FastAPI's own 422 never happens: validation errors are answered 400.
        route.responses.pop(422, None)
    app.openapi_schema = None
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = original()
            for path, path_item in spec.get("paths", {}).items():
                for operation in path_item.values():
                    if not isinstance(operation, dict):
                        continue
                    operation.get("responses", {}).pop("422", None)
                    ok = operation.get("responses", {}).get("200")
                    if path in GZIP_ROUTES and ok is not None:
                        binary = {"schema": {"type": "string", "format": "binary"}}
                        ok["content"] = {"application/gzip": binary}
                    if path in EVENT_STREAM_ROUTES and ok is not None:
                        ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def method_not_allowed(app: FastAPI, scope: Scope, skip: Any = None) -> JSONResponse | None:
    """The 405 answer for a request whose path an API route serves with other methods,
    or None when no API route has its path.

    Args:
        app: the application.
        scope: the request's ASGI scope.
        skip: an endpoint whose route is not counted (a catch-all that matched).
    """
    allowed: set[str] = set()
    for route in api_routes(app):
        if skip is not None and route.endpoint is skip:
            continue
        match, _ = route.matches(scope)
        if match is Match.PARTIAL:
            allowed |= route.methods or set()
        elif match is Match.FULL:
            return None
    if not allowed:
        return None
    return JSONResponse(
        {"detail": f"method {scope.get('method')} not allowed; allowed: {sorted(allowed)}"},
        status_code=405,
        headers={"Allow": ", ".join(sorted(allowed))},
    )
