"""What the REST route modules under ``/api/v1`` share (docs/protocol.md): the mapping of
domain errors to HTTP statuses (:func:`install_error_handlers`) and the read helpers that
build JSON views of experiments, trials and checkpoints.

The routes themselves live in one module per aggregate, registered by
:func:`dauntless.master.app.create_app` in this order: :mod:`.routes_cluster` (master,
agents, resource pools, allocations, task logs), :mod:`.routes_experiments`,
:mod:`.routes_trials`, :mod:`.routes_checkpoints` and :mod:`.routes_harness` (what the
trial harness reports). They are thin: they parse the request, call a model function of
:mod:`.models` in a transaction they open (:func:`_read`, :func:`_write`; view builders
below call read model functions in the route's read session), and return JSON views.
Domain errors map to HTTP statuses once, here.

Who may call each route is its row of the one permission table
(:data:`dauntless.master.permissions.ROUTES`; a route without a row is refused to all but
admins), checked by the application-wide dependency before the route runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from .context import MasterContext
from .db import CheckpointRow, ExperimentRow, TrialRow
from .errors import BadRequest, Conflict, Forbidden, NotFound, TooLarge
from .models import checkpoints, experiment_reads, trials
from .responses.experiments import ExperimentOut
from .responses.trials import TrialOut
from .schemas import checkpoint_view, experiment_view, trial_view
from .states import IllegalTransition


class StoreUnavailable(Exception):
    """The checkpoint store refused a request or could not be reached (HTTP 502)."""


def _ctx(request: Request) -> MasterContext:
    return request.app.state.ctx


_T = TypeVar("_T")
_P = ParamSpec("_P")


def _read(request: Request, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(session, *args)``, a session-first model function (:mod:`.models`), called in
    a read session of the master's database (for async routes, through a thread)."""
    with _ctx(request).db.read() as s:
        return fn(s, *args)


def _write(
    request: Request,
    fn: Callable[Concatenate[Session, MasterContext, _P], _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """``fn(session, ctx, *args, **kwargs)``, a session-first model function
    (:mod:`.models`), called in one write transaction of the master's database
    (committed when it returns); ``ctx`` is the master's
    :class:`~.context.MasterContext`."""
    return _ctx(request).write(fn, *args, **kwargs)


def _error(status: int, detail: str, errors: list[tuple[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"detail": detail}
    if errors:
        body["errors"] = [{"field": f, "message": m} for f, m in errors]
    return JSONResponse(status_code=status, content=body)


def install_error_handlers(app: FastAPI) -> None:
    """Map domain errors to statuses: NotFound 404, BadRequest 400, Forbidden 403,
    TooLarge 413, IllegalTransition 409, request validation 400 (with the field path of
    each problem)."""

    @app.exception_handler(NotFound)
    async def _not_found(_req: Request, exc: NotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(BadRequest)
    async def _bad(_req: Request, exc: BadRequest) -> JSONResponse:
        return _error(400, str(exc), exc.errors)

    @app.exception_handler(TooLarge)
    async def _too_large(_req: Request, exc: TooLarge) -> JSONResponse:
        return _error(413, str(exc), exc.errors)

    @app.exception_handler(StoreUnavailable)
    async def _store_error(_req: Request, exc: StoreUnavailable) -> JSONResponse:
        return _error(502, str(exc))

    @app.exception_handler(Conflict)
    async def _conflict_state(_req: Request, exc: Conflict) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(Forbidden)
    async def _forbidden(_req: Request, exc: Forbidden) -> JSONResponse:
        return _error(403, str(exc))

    @app.exception_handler(IllegalTransition)
    async def _conflict(_req: Request, exc: IllegalTransition) -> JSONResponse:
        resp = _error(409, str(exc))
        return resp

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
            msg = err.get("msg", "invalid")
            if err.get("type") == "extra_forbidden":
                msg = "unknown field"
            errors.append((".".join(loc), msg))
        return _error(400, "invalid request: " + "; ".join(f"{f}: {m}" for f, m in errors), errors)


# ---------------------------------------------------------------------- helpers


def _storage_dir(config: dict[str, Any], uuid: str) -> str | None:
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "shared_fs":
        return os.path.join(storage["host_path"], storage.get("storage_path") or "", uuid)
    if storage.get("type") == "directory":
        return os.path.join(storage["container_path"], uuid)
    return None


def _storage_url(config: dict[str, Any], uuid: str) -> str | None:
    storage = config.get("checkpoint_storage") or {}
    kind = storage.get("type")
    prefix = (storage.get("prefix") or "").strip("/")
    key = f"{prefix}/{uuid}" if prefix else uuid
    if kind == "s3":
        return f"s3://{storage.get('bucket')}/{key}"
    if kind == "gcs":
        return f"gs://{storage.get('bucket')}/{key}"
    if kind == "azure":
        return f"azure://{storage.get('container')}/{uuid}"
    return _storage_dir(config, uuid)


def _experiment_views(s: Session, exps: list[ExperimentRow]) -> list[dict[str, Any]]:
    stats = trials.trial_counts_and_bests(s, [e.id for e in exps])
    places = experiment_reads.project_places(s, {e.project_id for e in exps})
    out = []
    for e in exps:
        count, lowest, highest = stats.get(e.id, (0, None, None))
        smaller = e.config.get("searcher", {}).get("smaller_is_better", True)
        view = experiment_view(e, count, lowest if smaller else highest)
        view.update(places.get(e.project_id, {}))
        out.append(view)
    return out


_get_experiment = experiment_reads.read_experiment
_get_trial = trials.read_trial


def _checkpoint_views(
    s: Session, exp: ExperimentRow, rows: list[CheckpointRow]
) -> list[dict[str, Any]]:
    """Checkpoint JSON with ``searcher_metric``: the validation value at the same batches."""
    metric = exp.config.get("searcher", {}).get("metric")
    values = (
        checkpoints.validation_values(s, [(c.trial_id, c.total_batches) for c in rows], metric)
        if metric
        else {}
    )
    out = []
    for c in rows:
        view = checkpoint_view(c, _storage_url(exp.config, c.uuid))
        view["searcher_metric"] = values.get((c.trial_id, c.total_batches))
        out.append(view)
    return out


def _trial_views(s: Session, rows: list[TrialRow]) -> list[dict[str, Any]]:
    latest = trials.latest_validations(s, [t.id for t in rows])
    return [trial_view(t, latest.get(t.id)) for t in rows]


TRIAL_PAGE = 500
"""Trials read, viewed and written per step of :func:`trial_list_response`."""

_TRIAL_LIST = TypeAdapter(list[TrialOut])


def trial_list_response(
    ctx: MasterContext,
    exp_id: int,
    experiment: dict[str, Any] | None = None,
    page: int | None = None,
) -> StreamingResponse:
    """The JSON ``{"experiment": experiment, "trials": [...]}`` (without
    ``experiment`` when None) with every trial of experiment ``exp_id`` by id
    (:func:`dauntless.master.schemas.trial_view`; each validated as
    :class:`~dauntless.master.responses.trials.TrialOut`, the experiment as
    :class:`~dauntless.master.responses.experiments.ExperimentOut`), written ``page``
    trials at a time (None: :data:`TRIAL_PAGE`), each page read in a read session of
    its own.

    Issue 37: built whole, the answer for a 10,000-trial experiment (5 MB of JSON)
    held every row, view and validated model at once, and the master's resident size
    grew by 26 MB that it kept after the answer was sent; page by page the peak is
    one page's. Each trial is as it was when its page was read (a trial that changes
    meanwhile shows its state at that moment; one created meanwhile may be listed).
    The caller checks that the experiment exists and may be read before calling: once
    the status is sent, an error while reading (the database gone) cuts the answer
    short.

    Raises:
        ValueError: ``page`` < 1.
    """
    size = TRIAL_PAGE if page is None else page
    if size < 1:
        raise ValueError(f"page must be >= 1, got {size}")
    start = b"{"
    if experiment is not None:
        start += (
            b'"experiment":' + ExperimentOut.model_validate(experiment).model_dump_json().encode()
        )
        start += b","

    def body() -> Iterator[bytes]:
        yield start + b'"trials":['
        sep = b""
        for views in trial_view_pages(ctx, exp_id, page=size):
            yield sep + _TRIAL_LIST.dump_json(_TRIAL_LIST.validate_python(views))[1:-1]
            sep = b","
        yield b"]}"

    return StreamingResponse(body(), media_type="application/json")


def trial_view_pages(
    ctx: MasterContext,
    exp_id: int,
    *,
    skip: int = 0,
    limit: int | None = None,
    page: int | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """The views (:func:`_trial_views`) of experiment ``exp_id``'s trials by id, a
    non-empty list of at most ``page`` of them (None: :data:`TRIAL_PAGE`) at a time,
    each page read in a read session of its own (issue 37: a list answer's memory is a
    page's, not the experiment's): the first ``skip`` trials left out, at most
    ``limit`` in all (None: every one). The master's writes are serialised, so trials
    are committed in the order of their ids: a trial created while the pages are read
    comes after every trial that existed before it.

    Raises:
        ValueError: ``page`` < 1.
    """
    size = TRIAL_PAGE if page is None else page
    if size < 1:
        raise ValueError(f"page must be >= 1, got {size}")
    after, left = 0, limit
    while left is None or left > 0:
        want = size if left is None else min(size, left)
        with ctx.db.read() as s:
            rows = trials.experiment_trials(s, exp_id, after, want, skip=0 if after else skip)
            views = _trial_views(s, rows)
        if views:
            yield views
            after = views[-1]["id"]
            left = None if left is None else left - len(views)
        if len(views) < want:
            return
