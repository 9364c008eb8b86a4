"""Training metrics stored before FastAPI's routing, without a worker thread (issue 37:
100,000 metric values a second offered on PostgreSQL, acknowledged at p99 <= 50 ms).

At 390 metrics requests a second the master's event loop was nearly saturated, and the
latency was queueing behind it: per request, FastAPI's dependency solving and the
body's validation (149 of 676 busy samples of a py-spy of the loop), the anyio hop to
a worker thread and back (113: each a hand-over of the interpreter lock that the loop
and the other requests wait for), and the worker thread's own wait for the group
commit's leader. :class:`FastMetricReports` is an ASGI middleware placed innermost
among the application's middleware (inside the request metrics, the cluster message
header, the JSON body limits and the audit trail, which all see the request as before)
that stores a trial's training reports itself: it validates the body that
:class:`~dauntless.master.body_limits.JSONBodyLimits` parsed already, makes the rows on
the event loop and awaits the group commit's future
(:meth:`~dauntless.master.group_commit.GroupCommit.submit_batched`), which the thread
that committed the rows settles. It answers only after that commit, so what it
acknowledges is durable, as through the route.

It answers only when all of these hold, else the request takes the route unchanged
(with the body it read given back), and the route answers as before (401, 403, 404,
422, a validation report, a stored or failed transaction):

* ``POST /api/v1/trials/{trial_id}/metrics`` or ``.../metrics/batch`` (no
  ``root_path``), ``trial_id`` written as the route's ``int`` would read it back (the
  decimal digits of 0 .. 2**31 - 1, no sign or leading zero), after that route was
  matched once by FastAPI in this application (the route object, which the request
  metrics name and :meth:`~dauntless.master.auth.AuthService.authorize` reads, is
  learnt from that request: a trial's first report, whose token is read from the
  database, takes the route anyway);
* the caller presents ``Authorization: Bearer`` and neither an agent credential nor the
  cluster secret, and :meth:`~dauntless.master.auth.AuthService.identify_without_db`
  knows it in memory as a trial's session token bound to this very ``trial_id``; the
  CSRF check and the route's rule pass
  (:func:`~dauntless.master.auth_csrf.check_csrf`,
  :meth:`~dauntless.master.auth.AuthService.authorize`: the same code as the
  dependency :func:`~dauntless.master.auth.authenticate`);
* :class:`~dauntless.master.body_limits.JSONBodyLimits` parsed the body (so it is JSON
  within the limits), the one body message received is that body, and the value
  validates as :class:`~dauntless.master.schemas.MetricsReport` (or
  :class:`~dauntless.master.schemas.MetricsReportBatch`) through a pydantic
  ``TypeAdapter``, as FastAPI validates a body parameter
  (``validate_python(value, from_attributes=True)``);
* every report is a training report (a validation report feeds the searcher, in a
  transaction of its own: the route);
* the group commit stores the rows. Should it fail (no such trial, a database error),
  the request is handed to the route, which stores it in a transaction of its own and
  answers with the route's outcome: nothing of the failed transaction was committed,
  and storing is idempotent, so the route's try is the same as a first try.

Its answer is the bytes and headers the route would send (``{"stored": ...}`` rendered
as :class:`~starlette.responses.JSONResponse` does). What the route does besides
storing is done here too: :attr:`~dauntless.master.context.MasterContext.experiment_changes`
is set when a report was new, and the Prometheus ``metric_ack`` and
``metric_reports`` count the request. The request's scope gets what the route's
matching and the dependency would have put there (``route``, ``endpoint``,
``path_params``, the ``principal``), so the request metrics count it under the route's
template and the audit trail judges it as it would the route's (trials' requests are
not audited).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import HTTPException
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_HEADER

from .asgi_answers import hand_on, json_bytes, learnt_post_route, send_json
from .auth_csrf import check_csrf
from .body_limits import PARSED_JSON
from .metric_store import store_training_rows, training_rows
from .models.metrics import MetricsIn
from .schemas import INT32_MAX, MetricsReport, MetricsReportBatch

METRICS_PATH = "/api/v1/trials/{trial_id}/metrics"
"""The template of the route of one report."""

BATCH_PATH = "/api/v1/trials/{trial_id}/metrics/batch"
"""The template of the route of several reports."""

_PREFIX = "/api/v1/trials/"
_ONE = "/metrics"
_MANY = "/metrics/batch"
_AGENT_TOKEN = AGENT_TOKEN_HEADER.lower().encode("latin-1")
_CLUSTER_SECRET = CLUSTER_SECRET_HEADER.lower().encode("latin-1")

_ONE_REPORT: TypeAdapter[MetricsReport] = TypeAdapter(MetricsReport)
_MANY_REPORTS: TypeAdapter[MetricsReportBatch] = TypeAdapter(MetricsReportBatch)


def metrics_target(scope: Scope) -> tuple[str, bool] | None:
    """``(trial_id, batch)`` of a ``POST /api/v1/trials/{trial_id}/metrics`` (batch
    False) or ``.../metrics/batch`` (True) request whose ``trial_id`` is the canonical
    decimal of an id (0 .. 2**31 - 1), None for any other request."""
    if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("root_path"):
        return None
    path: str = scope.get("path", "")
    if not path.startswith(_PREFIX):
        return None
    if path.endswith(_MANY):
        trial, batch = path[len(_PREFIX) : -len(_MANY)], True
    elif path.endswith(_ONE):
        trial, batch = path[len(_PREFIX) : -len(_ONE)], False
    else:
        return None
    if not (trial.isascii() and trial.isdigit()) or len(trial) > 10:
        return None
    if (trial[0] == "0" and trial != "0") or int(trial) > INT32_MAX:
        return None
    return trial, batch


class FastMetricReports:
    """ASGI middleware: store trials' training reports without FastAPI's routing or a
    worker thread (see the module for exactly when; every other request passes
    unchanged).

    The instance is left in ``state.fast_metric_reports``; :attr:`answered` counts the
    requests it answered and :attr:`handed_on` those it began and handed to the route
    after the group commit failed.

    Args:
        app: the application it wraps (FastAPI's inner stack).
        state: the master application's ``app.state`` (its ``ctx`` and ``auth``), read
            at each request.
    """

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state
        self.answered = 0
        self.handed_on = 0
        state.fast_metric_reports = self
        # batch -> (the route, its rule), once FastAPI matched it
        self._routes: dict[bool, tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = metrics_target(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        trial, batch = target
        learnt = self._routes.get(batch)
        parsed = scope.get(PARSED_JSON)
        if learnt is None or parsed is None or not _bearer_only(scope):
            await self._route_it(scope, receive, send, [])
            return
        message = await receive()
        messages = [message]
        body = message.get("body", b"")
        if (
            message["type"] != "http.request"
            or message.get("more_body", False)
            or not (body is parsed[0] or body == parsed[0])
        ):
            await self._route_it(scope, receive, send, messages)
            return
        route, rule = learnt
        matched = {"route": route, "endpoint": route.endpoint, "path_params": {"trial_id": trial}}
        reports = self._reports(scope, matched, rule, int(trial), batch, parsed[1])
        if reports is None:
            await self._route_it(scope, receive, send, messages)
            return
        who, items = reports
        ctx = self.state.ctx
        started = time.perf_counter()
        trial_id = int(trial)
        try:
            rows = training_rows(trial_id, items, ctx.clock())
            flags = await ctx.metric_commits.submit_batched(store_training_rows, (trial_id, rows))
        except Exception:  # the route stores it alone and answers its own outcome
            self.handed_on += 1
            await self._route_it(scope, receive, send, messages)
            return
        if any(flags):  # on PostgreSQL stored by statements the ORM does not see
            ctx.experiment_changes.set()
        prom = ctx.prom
        if prom is not None:
            prom.metric_ack.observe(time.perf_counter() - started)
            for item in items:
                prom.metric_reports.labels(item.group).inc()
        scope.update(matched)
        scope.setdefault("state", {})["principal"] = who  # what the dependency leaves
        self.answered += 1  # the bytes the route's JSONResponse would send
        await send_json(send, json_bytes({"stored": flags if batch else flags[0]}))

    def _reports(
        self,
        scope: Scope,
        matched: dict[str, Any],
        rule: Any,
        trial_id: int,
        batch: bool,
        value: Any,
    ) -> tuple[Any, list[MetricsIn]] | None:
        """The caller and its training reports when this request may be stored here
        (the caller known in memory, bound to ``trial_id`` and allowed by ``rule``; the
        body valid; training reports only), else None (the route decides)."""
        request = Request({**scope, **matched})
        try:
            who = self.state.auth.identify_without_db(request)
            if who is None or who.kind != "trial" or who.trial_id != trial_id or who.task_id:
                return None
            check_csrf(request, "POST")
            self.state.auth.authorize(who, rule, request)
        except HTTPException:
            return None
        try:
            if batch:
                bodies = _MANY_REPORTS.validate_python(value, from_attributes=True).reports
            else:
                bodies = [_ONE_REPORT.validate_python(value, from_attributes=True)]
        except (ValidationError, ValueError, RecursionError):
            return None
        if any(b.group != "training" for b in bodies):
            return None
        items = [
            MetricsIn(b.group, b.steps_completed, b.trial_run_id, b.metrics, b.batch_metrics)
            for b in bodies
        ]
        return who, items

    async def _route_it(
        self, scope: Scope, receive: Receive, send: Send, messages: list[Message]
    ) -> None:
        """Hand the request to FastAPI, replaying the ``messages`` already received;
        learn the metrics routes from its matching."""
        try:
            await hand_on(self.app, scope, receive, send, messages)
        finally:
            for path in (METRICS_PATH, BATCH_PATH):
                if (path == BATCH_PATH) not in self._routes:
                    learnt = learnt_post_route(scope, path)
                    if learnt is not None:
                        self._routes[path == BATCH_PATH] = learnt


def _bearer_only(scope: Scope) -> bool:
    """An ``Authorization`` header is presented, no agent credential or cluster secret
    (which the dependency would check first), and the body is declared JSON."""
    bearer = other = json_body = False
    for key, value in scope.get("headers") or ():
        if key == b"authorization":
            bearer = True
        elif key == _AGENT_TOKEN or key == _CLUSTER_SECRET:
            other = True
        elif key == b"content-type":
            json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
    return bearer and not other and json_body


__all__ = ["BATCH_PATH", "METRICS_PATH", "FastMetricReports", "metrics_target"]
