"""Which requests the audit trail records, and when (:mod:`dauntless.master.audit`).

**What is audited.** Every state-changing request (``POST``, ``PUT``, ``PATCH``,
``DELETE`` under ``/api/``) made by a *user* (a login session or an access token),
whatever its answer (a refusal, 403, is recorded as ``denied``), and sign-ins
(``POST /auth/login`` and single sign-on, successful or not, noted by their routes with
:func:`audit_note`).

**What is not.** Requests of agents (the cluster secret) and of trials and tasks (their
session tokens): heartbeats, metric and checkpoint reports, progress and log lines are
machine traffic, many per second, each already a row of its own table; auditing them
would put a write of the one serialised chain on the metric-ingest hot path for no
information about what a person did. A user's actions that started them (create, pause,
kill ...) are audited. Also not: reads (GET), requests without a credential that are
refused with 401 before anyone is known (a flood of them would fill the table; failed
sign-ins *are* recorded), and the task services behind ``/proxy/``.

**When.** The row is committed when the route has answered but before the answer's
first byte leaves (:class:`AuditMiddleware` holds the ``http.response.start`` message
until then): a client that saw an answer knows its request is in the trail. A failed
audit write is logged and the answer still sent (the change itself is committed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .audit import AuditEntry, AuditTrail, result_of

log = logging.getLogger("dauntless.master.audit")

CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods of state-changing requests."""

NOTE_KEY = "audit"
"""The key of a route's :func:`audit_note` in the request's state."""


def audit_note(
    request: Request,
    *,
    target: str | None = None,
    username: str | None = None,
    user_id: int | None = None,
) -> None:
    """Tell the audit trail about this request: what it acted on (``target``), and for a
    sign-in who it was (``username`` tried, ``user_id`` once known). A request with a
    note is audited whatever its method and caller."""
    # ``request.state`` keeps its attributes in ``scope["state"]``, which the middleware reads.
    note = request.scope.setdefault("state", {}).setdefault(NOTE_KEY, {})
    for key, value in (("target", target), ("username", username), ("user_id", user_id)):
        if value is not None:
            note[key] = value


def _note(scope: Scope) -> dict[str, Any] | None:
    state = scope.get("state")
    return state.get(NOTE_KEY) if isinstance(state, dict) else None


def _principal(scope: Scope) -> Any:
    state = scope.get("state")
    return state.get("principal") if isinstance(state, dict) else None


def entry_for(scope: Scope, status: int, clock: Callable[[], float]) -> AuditEntry | None:
    """The row to write for a request that was answered ``status`` (its time from
    ``clock``, seconds since the epoch), or None when the request is not audited (see
    the module)."""
    note = _note(scope)
    who = _principal(scope)
    if note is None:
        if scope.get("method") not in CHANGES or not scope.get("path", "").startswith("/api/"):
            return None
        if who is None or getattr(who, "kind", None) != "user":
            return None
    note = note or {}
    route = scope.get("route")
    params = scope.get("path_params") or {}
    target = note.get("target")
    if target is None and params:
        target = " ".join(f"{k}={v}" for k, v in sorted(params.items()))
    is_user = who is not None and getattr(who, "kind", None) == "user"
    client = scope.get("client")
    return AuditEntry(
        at=clock(),
        user_id=who.user_id if is_user else note.get("user_id"),
        username=who.username if is_user else note.get("username"),
        token_kind=(who.token_kind or "USER_SESSION") if is_user else "NONE",
        token_id=who.session_id if is_user else None,
        method=str(scope.get("method", ""))[:8],
        route=str(getattr(route, "path", None) or scope.get("path", ""))[:512],
        action=str(getattr(getattr(route, "endpoint", None), "__name__", ""))[:128],
        target=str(target)[:1024] if target is not None else None,
        status=status,
        result=result_of(status),
        client=str(client[0])[:64] if client else None,
    )


class AuditMiddleware:
    """ASGI middleware that appends a row to the audit trail for each audited request,
    before its answer is sent (see the module).

    Args:
        app: the application.
        trail: the trail to append to.
    """

    def __init__(self, app: ASGIApp, trail: AuditTrail) -> None:
        self.app = app
        self.trail = trail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_audited(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                await self._record(scope, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_audited)
        except Exception:
            if not started:  # the server answers 500
                await self._record(scope, 500)
            raise

    async def _record(self, scope: Scope, status: int) -> None:
        entry = entry_for(scope, status, self.trail.clock)
        if entry is None:
            return
        try:
            await run_in_threadpool(self.trail.append, entry)
        except Exception:
            log.exception("could not append to the audit trail: %s", entry)
