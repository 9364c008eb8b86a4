"""Live streams and chart-sized metric series under ``/api/v1`` (the WebUI uses them; so
may any client).

Server-sent events (``text/event-stream``; the WHATWG HTML standard, section "Server-sent
events"). Each stream polls the database every :data:`POLL_SECONDS` on the server and
sends an event only when the JSON it would send has changed; a comment line keeps idle
connections open every :data:`KEEPALIVE_SECONDS`. The experiment streams rebuild their
body only when the master committed a change to experiments, trials, metric reports or
checkpoints since the last build (the master context's ``experiment_changes``,
:class:`~dauntless.master.db.changes.ChangeFlag`), or :data:`STALE_SECONDS` passed (a
change the master's ORM did not see: another process, a bulk statement). Every stream takes ``max_seconds``
(default: until the client leaves); a browser's ``EventSource`` reconnects by itself when
a stream ends, and the logs stream resumes from the ``Last-Event-ID`` it sends. Streams end
when the master gets SIGTERM or SIGINT, so that they never hold up its shutdown, and
when the caller's credential stops being valid (logout, password change, expiry,
deactivation, an ended allocation): the caller's token is checked again every
:data:`REAUTH_SECONDS`, and a stream whose token fails sends ``unauthorized``
(``{"detail"}``) and ends; the client's reconnection then gets 401.

| route | events |
|---|---|
| ``GET /stream/experiments?archived=false&limit=1000&offset=0`` | ``experiments``: the body of ``GET /experiments`` (``archived``: false, true or all) |
| ``GET /stream/experiments/{id}?chart_group=&chart_name=&chart_top=&chart_all_up_to=0&chart_trial_id=&chart_max_points=400`` | ``summary`` first when ``chart_group`` is given: ``{"experiment", "chart_trial_ids", "chart"}`` (see :func:`~dauntless.master.routes_charts.experiment_summary`); then ``experiment``: the body of ``GET /experiments/{id}`` (experiment and trials); ``gone`` when it is deleted |
| ``GET /stream/trials/{id}/logs?after_id=0`` | ``logs``: ``{"logs": [LogLine], "trial_state"}`` with ``id:`` the last line's id; ``state``: ``{"trial_state"}`` when only the state changed |
| ``GET /stream/cluster`` | ``cluster``: ``{"agents": [Agent], "allocations": [Allocation], "resource_pools": [...]}`` |

REST routes for charts (in :mod:`dauntless.master.routes_charts`) and the cluster view
(in :mod:`dauntless.master.routes_allocations`):

| route | answer |
|---|---|
| ``GET /experiments/{id}/metrics?group=validation&name=&max_points=400&trial_id=&x_axis=batches`` | ``{"experiment_id", "group", "name", "max_points", "downsampling", "x_axis", "series": [{"trial_id", "batches": [int], "values": [float], "raw_points", "downsampled"}]}``; with ``x_axis=epochs`` each series also has ``epochs`` ([float] or null), with ``x_axis=time`` ``timestamps`` (seconds since the epoch, or null) |
| ``GET /experiments/{id}/metrics/names`` | ``{"training": [name], "validation": [name]}``: the numeric metrics of each trial's latest report |
| ``GET /allocations?trial_id=&active=`` | ``{"allocations": [Allocation]}`` with Allocation ``{id, trial_id, experiment_id, task_id, agent_id, slot_ids, state, run_id, exit_code, exit_message, created_at, started_at, ended_at}`` (a trial's: ``task_id`` null; a command's, notebook's, shell's or TensorBoard's: ``trial_id`` and ``experiment_id`` null) |

Series are downsampled on the server with M4 from summaries kept in the database as
reports arrive (:mod:`dauntless.master.metric_series`). Events are framed by
:mod:`dauntless.master.stream_framing`.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from .api_spec import DbId
from .auth import route_rule
from .context import MasterContext
from .errors import NotFound
from .metric_series import MAX_POINTS
from .models import agents as agent_models
from .routes import _get_experiment, _read
from .routes_allocations import _allocations
from .routes_charts import experiment_summary
from .routes_cluster import list_agents
from .routes_experiment_list import ListRequest, list_request, with_limit
from .routes_experiment_list import experiment_list_page as experiments_page
from .routes_experiments import experiment_detail_json
from .routes_trials import get_trial_logs
from .stream_framing import SpooledPayload, digest, dumps_json, sse_event

POLL_SECONDS = 0.5
"""How often a stream reads the database (seconds)."""

KEEPALIVE_SECONDS = 15.0
"""Longest silence on a stream before a comment line is sent (seconds)."""

REAUTH_SECONDS = 5.0
"""How often an open stream checks its caller's credential again (seconds)."""

RETRY_MILLISECONDS = 2000
"""The reconnection delay a stream asks ``EventSource`` clients to use."""

STALE_SECONDS = 5.0
"""Longest a stream with a change version goes without rebuilding its body while the
version stays the same (seconds): changes the master's ORM did not see still show."""

router = APIRouter(prefix="/api/v1")


# ---------------------------------------------------------------------- shutdown

_stopping = threading.Event()


def _watch_for_shutdown() -> None:
    """Make SIGTERM and SIGINT end every open stream.

    A server's graceful shutdown (uvicorn's included) waits for open responses to finish,
    and an event stream never does by itself: without this a browser left on a page would
    hold the master up. The handlers the server installed are wrapped, so they still run
    (first this sets :data:`_stopping`, which every stream checks each poll). Only Python
    handlers are wrapped, and only from the main thread (where signals can be handled).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        if not callable(previous) or getattr(previous, "ends_event_streams", False):
            continue

        def hook(signum: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
            _stopping.set()
            previous(signum, frame)

        hook.ends_event_streams = True  # type: ignore[attr-defined]
        _stopping.clear()  # handlers of a new server: its streams start afresh
        signal.signal(sig, hook)


# ---------------------------------------------------------------------- credential


class _Credential:
    """The credential an open stream was started with, checked again every
    :data:`REAUTH_SECONDS`, so that a revoked token stops receiving events (a stream is
    authenticated once, when it starts, like any request). A revocation on this master
    (logout, ``PATCH /tokens/{id}``, a password change, a deactivation: the auth
    service's ``revocations`` counter) has it checked at the next poll, and a user's
    token is refused at the next poll after it expires, without waiting for the period."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.checked = time.monotonic()
        service = getattr(request.app.state, "auth", None)
        self.revocations = getattr(service, "revocations", 0)

    async def refused(self) -> str | None:
        """Why the credential no longer holds (the 401's detail), or None while it does
        (also between checks, and for streams opened without a credential)."""
        now = time.monotonic()
        service = getattr(self.request.app.state, "auth", None)
        who = getattr(self.request.state, "principal", None)
        if service is None or who is None:
            return None
        expires_at = getattr(who, "expires_at", None)
        if expires_at is not None and service.clock() >= expires_at:
            return "the token has expired; sign in again"
        revocations = getattr(service, "revocations", 0)
        if now - self.checked < REAUTH_SECONDS and revocations == self.revocations:
            return None
        self.checked, self.revocations = now, revocations
        try:
            await run_in_threadpool(self._check, service)
        except HTTPException as exc:
            if exc.status_code in (401, 403):
                return str(exc.detail)
            raise
        return None

    def _check(self, service: Any) -> None:
        """Identify the caller again and apply the route's rule again (a role taken
        back ends the stream as a revoked token does)."""
        who = service.identify(self.request)
        if getattr(self.request.state, "principal", None) is not None:
            route = self.request.scope.get("route")
            path = getattr(route, "path", "")
            rule = route_rule(self.request.method, path, getattr(route, "endpoint", None))
            service.authorize(who, rule, self.request)


async def _ended(request: Request, credential: _Credential) -> bytes | None:
    """b"" when the stream should end quietly (the master is stopping, the client left),
    an ``unauthorized`` event to send last when the credential was revoked, else None."""
    if _stopping.is_set() or await request.is_disconnected():
        return b""
    detail = await credential.refused()
    if detail is not None:
        return sse_event("unauthorized", dumps_json({"detail": detail}))
    return None


async def _poll(
    request: Request,
    read: Callable[[], tuple[str, Any] | None],
    max_seconds: float | None,
    version: Callable[[], int] | None = None,
    first: bytes = b"",
) -> AsyncIterator[bytes]:
    """Events from polling ``read`` until the client leaves, ``max_seconds`` pass, or
    ``read`` returns None (the object is gone).

    ``read`` runs in a worker thread and returns ``(event name, payload)``, the payload
    JSON-able or a :class:`~dauntless.master.stream_framing.SpooledPayload` of JSON
    text (a large body, written and sent without holding it whole); the event is sent
    when its JSON differs from the last one sent (told by digest, so that the last one
    is not kept). With ``version`` (a change counter
    of the rows ``read`` reads, e.g. :meth:`ChangeFlag.version
    <dauntless.master.db.changes.ChangeFlag.version>`), a poll calls ``read`` only when
    the version moved since the last call or :data:`STALE_SECONDS` passed, so an idle
    stream costs no database reads and no JSON encoding (issue 22: a 1,000-trial
    experiment's body took a core's tenth of a second to rebuild every poll). ``first``
    is sent right after the ``retry`` line (an event computed before the stream began).
    """
    start = last_sent = last_read = time.monotonic()
    last_digest: bytes | None = None
    read_at: int | None = None
    credential = _Credential(request)
    yield f"retry: {RETRY_MILLISECONDS}\n\n".encode()
    if first:
        yield first
    while True:
        seen = version() if version is not None else None
        now = time.monotonic()
        fresh = (
            last_digest is not None
            and seen is not None
            and seen == read_at
            and now - last_read < STALE_SECONDS
        )
        if not fresh:
            item = await run_in_threadpool(read)
            now = last_read = time.monotonic()
            read_at = seen
            if item is None:
                yield sse_event("gone", "{}")
                return
            event, payload = item
            if isinstance(payload, SpooledPayload):
                try:
                    if payload.digest != last_digest:
                        last_digest, last_sent = payload.digest, now
                        for chunk in payload.event(event):
                            yield chunk
                finally:
                    payload.close()
            else:
                text = dumps_json(payload)
                text_digest = digest(text)
                if text_digest != last_digest:
                    last_digest, last_sent = text_digest, now
                    yield sse_event(event, text)
        if now - last_sent >= KEEPALIVE_SECONDS:
            last_sent = now
            yield b": keep-alive\n\n"
        if max_seconds is not None and now - start >= max_seconds:
            return
        last = await _ended(request, credential)
        if last is not None:
            if last:
                yield last
            return
        await asyncio.sleep(POLL_SECONDS)


def _stream(gen: AsyncIterator[bytes]) -> StreamingResponse:
    _watch_for_shutdown()
    return StreamingResponse(
        gen,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


_MAX_SECONDS = Query(
    None,
    gt=0,
    le=86_400,
    description="close the stream after this many seconds (default: when the client leaves)",
)


# ---------------------------------------------------------------------- streams


@router.get("/stream/experiments")
async def stream_experiments(
    request: Request,
    search: ListRequest = Depends(list_request),
    max_seconds: float | None = _MAX_SECONDS,
) -> StreamingResponse:
    """Event ``experiments`` (the body of ``GET /experiments`` with the same query
    parameters, 1,000 experiments a page unless ``limit`` says otherwise: only what the
    caller may view, read again when their roles change) whenever it changes."""
    search = with_limit(search, 1000)

    def read() -> tuple[str, Any]:
        page = experiments_page(request, search)
        return "experiments", page

    return _stream(_poll(request, read, max_seconds, _experiment_changes(request)))


def _experiment_changes(request: Request) -> Callable[[], int] | None:
    """The change version of experiment bodies and of who may see them (None on a
    manager without one)."""
    flag = getattr(request.app.state.ctx, "experiment_changes", None)
    authz = getattr(request.app.state, "authz", None)
    if flag is None:
        return None
    if authz is None:
        return flag.version
    grants = authz.changes
    return lambda: flag.version() + grants.version()


@router.get("/stream/experiments/{exp_id}")
async def stream_experiment(
    exp_id: DbId,
    request: Request,
    max_seconds: float | None = _MAX_SECONDS,
    chart_group: str | None = Query(
        None,
        pattern="^(training|validation)$",
        description="send a summary event first, with this group's learning curves",
    ),
    chart_name: str | None = Query(
        None, min_length=1, max_length=256, description="the summary's metric (default: searcher's)"
    ),
    chart_top: int | None = Query(
        None, ge=1, le=10_000, description="the summary's chart: the best N trials (default: all)"
    ),
    chart_all_up_to: int = Query(
        0, ge=0, le=10_000, description="...but every trial when there are at most this many"
    ),
    chart_trial_id: list[int] | None = Query(
        None, description="the summary's chart: these trials (repeatable)"
    ),
    chart_max_points: int = Query(400, ge=8, le=MAX_POINTS, description="per trial, at most"),
) -> StreamingResponse:
    """Event ``experiment`` (the body of ``GET /experiments/{id}``) whenever it changes;
    ``gone`` and the end of the stream when the experiment is deleted.

    With ``chart_group``, the first event is ``summary`` (:func:`experiment_summary`,
    sent once): the page draws its header and first chart from it before the full body,
    which follows at once, arrives.

    Raises:
        NotFound: no such experiment (404 before the stream starts).
        BadRequest: a bad ``chart_*`` parameter (400 before the stream starts).
    """
    first = b""
    if chart_group is not None:
        summary = await run_in_threadpool(
            experiment_summary,
            request,
            exp_id,
            chart_group,
            chart_name,
            chart_max_points,
            chart_top,
            chart_all_up_to,
            chart_trial_id,
        )
        first = sse_event("summary", dumps_json(summary))
    else:

        def exists() -> None:
            # The row only (issue 22): the full body, with every trial, is the first event.
            with request.app.state.ctx.db.read() as s:
                _get_experiment(s, exp_id)

        await run_in_threadpool(exists)

    def read() -> tuple[str, Any] | None:
        try:
            return "experiment", SpooledPayload(experiment_detail_json(request, exp_id))
        except NotFound:
            return None

    return _stream(_poll(request, read, max_seconds, _experiment_changes(request), first))


@router.get("/stream/cluster")
async def stream_cluster(
    request: Request, max_seconds: float | None = _MAX_SECONDS
) -> StreamingResponse:
    """Event ``cluster`` whenever it changes: ``{"agents": [Agent] (without
    ``last_heartbeat``, which changes every beat), "allocations": [Allocation] (the live
    ones: trials' and tasks', whose ``task_id`` is set), "resource_pools": [ResourcePool]}`` (the body of ``GET /resource-pools``;
    absent from masters without pool summaries)."""
    ctx = request.app.state.ctx
    has_pools = isinstance(ctx, MasterContext)

    def read() -> tuple[str, Any]:
        agents = list_agents(request)["agents"]
        for agent in agents:
            agent.pop("last_heartbeat", None)
        body: dict[str, Any] = {"agents": agents, "allocations": _allocations(request, None, True)}
        if has_pools:
            body["resource_pools"] = _read(request, agent_models.resource_pools, ctx)
        return "cluster", body

    return _stream(_poll(request, read, max_seconds))


@router.get("/stream/trials/{trial_id}/logs")
async def stream_trial_logs(
    trial_id: DbId,
    request: Request,
    after_id: int = Query(0, ge=0, le=2**63 - 1, description="send lines with ids above this"),
    max_seconds: float | None = _MAX_SECONDS,
) -> StreamingResponse:
    """Events ``logs`` with each batch of new lines (``id:`` the last line's id, so a
    reconnecting ``EventSource`` resumes after it) and ``state`` when the trial's state
    changes. The stream follows the trial until the client leaves.

    Raises:
        NotFound: no such trial (404 before the stream starts).
    """
    await run_in_threadpool(get_trial_logs, trial_id, request, after_id, 1)
    header = request.headers.get("last-event-id", "")
    if header.isdigit():
        after_id = max(after_id, int(header))

    async def gen() -> AsyncIterator[bytes]:
        last_id, state = after_id, None
        start = last_sent = time.monotonic()
        credential = _Credential(request)
        yield f"retry: {RETRY_MILLISECONDS}\n\n".encode()
        while True:
            try:
                body = await run_in_threadpool(get_trial_logs, trial_id, request, last_id, 1000)
            except NotFound:
                yield sse_event("gone", "{}")
                return
            now = time.monotonic()
            lines = body["logs"]
            if lines:
                last_id, state, last_sent = lines[-1]["id"], body["trial_state"], now
                yield sse_event("logs", dumps_json(body), last_id)
                if len(lines) == 1000:
                    continue
            elif body["trial_state"] != state:
                state, last_sent = body["trial_state"], now
                yield sse_event("state", dumps_json({"trial_state": state}), last_id)
            elif now - last_sent >= KEEPALIVE_SECONDS:
                last_sent = now
                yield b": keep-alive\n\n"
            if max_seconds is not None and now - start >= max_seconds:
                return
            last = await _ended(request, credential)
            if last is not None:
                if last:
                    yield last
                return
            await asyncio.sleep(POLL_SECONDS)

    return _stream(gen())
