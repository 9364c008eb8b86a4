"""The master's proxy to task services: ``/proxy/<task id>/...`` (HTTP and WebSocket).

A notebook, shell or TensorBoard listens on a port of its agent; users reach it through
the master (and its TLS), signed in: only the task's owner or a user with ``UPDATE_NSC``
on its workspace passes (the ``PROXY`` row of :mod:`dauntless.master.permissions`; a
trial's or task's session token, or another user, gets 403; no credential 401).

**Two origins.** A page a task serves is the task owner's code. Served on the master's
origin it could call the master's API with the cookie of whoever opened it (an admin),
so services are served on an origin of their own, the *proxy origin*
(:class:`~dauntless.config.TaskProxyConfig`: a second port of the master, or a host
name per task), by :func:`make_proxy_origin_app`:

* On the master's origin (:func:`make_master_proxy_app`, mounted at ``/proxy``), a
  request with a bearer token (the CLI: ``det shell``'s WebSocket, scripts) is
  forwarded as before; a browser signed in by the master's cookie gets, for a GET, a
  ``303`` to the proxy origin with a one-time ticket (:mod:`.proxy_auth`), and for
  anything else 403: the master's cookie opens no service.
* On the proxy origin a request presents the proxy origin's own cookie
  (``dauntless_proxy``, one per task, set when a ticket is redeemed) or a bearer token.
  A request whose ``Origin`` is another origin is refused (403), and so is, with
  ``task_proxy.domain``, a host name of another task.

A shell's browser terminal (its page at ``/proxy/<task id>/`` and two files) is
answered on the proxy origin by the master itself (:mod:`.proxy_terminal`).

The service gets the path unchanged (notebooks and TensorBoards are started with
``/proxy/<task id>/`` as their base URL), ``Origin`` rewritten to the service's own
address (so JupyterLab, which accepts only that origin, accepts the proxy's), and the
service's own secret (``Authorization: token ...``, Jupyter's token), so the service
cannot be used by going around the master. No ``dauntless_*`` cookie and no caller's
``Authorization`` header reaches the service, and a service cannot set a
``dauntless_*`` cookie (its ``Set-Cookie`` answers for them are dropped).

What is hand-written and why: the transport is libraries (:mod:`.proxy_forward`); what
is ours is the glue no library offers for an ASGI app: choosing the target from the
task's row, the owner check, the ticket hand-over and the origin checks.
"""

from __future__ import annotations

import html
import logging
import time
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from dauntless._auth import COOKIE_NAME

from .auth_access import Principal
from .authz import may_open
from .db import Database, TaskRow
from .models import task_services, users
from .proxy_auth import PROXY_COOKIE, TICKET_PATH, ProxyAuth, proxy_origin
from .proxy_forward import forward_http, forward_ws, raw_path
from .proxy_terminal import terminal_file
from .task_states import NotFound

log = logging.getLogger("dauntless.master.proxy")


class _CookieOnly:
    """A connection's credentials without its Authorization header (for identify)."""

    def __init__(self, conn: HTTPConnection) -> None:
        self.headers = {k: v for k, v in conn.headers.items() if k.lower() != "authorization"}
        self.cookies = conn.cookies


class _Refused(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse({"detail": self.detail}, status_code=self.status, headers=self.headers)


_NO_CREDENTIAL = (
    "authentication required: open the task from the WebUI or `det notebook open`, or "
    "send 'Authorization: Bearer <token>'"
)


def _bearer(conn: HTTPConnection) -> bool:
    return conn.headers.get("authorization", "").lower().startswith("bearer ")


async def _identify(conn: HTTPConnection, caller: Any) -> Principal:
    try:
        return await run_in_threadpool(conn.app.state.auth.identify, caller)
    except HTTPException as exc:
        raise _Refused(exc.status_code, str(exc.detail), {"WWW-Authenticate": "Bearer"}) from None


def _read_target(db: Database, task_id: str) -> tuple[TaskRow, str | None]:
    """The task's row (detached from its read session) and its service's base URL
    (:func:`~dauntless.master.models.task_services.service_target`).

    Raises:
        NotFound: no such task.
    """
    with db.read() as s:
        row, url = task_services.service_target(s, task_id)
        s.expunge(row)
    return row, url


async def _target(conn: HTTPConnection, who: Principal, task_id: str) -> tuple[Any, str]:
    """The task's service URL once ``who`` may reach it.

    Raises:
        _Refused: 403 for the caller, 404 unknown task, 410 ended, 503 not ready.
    """
    ctx = conn.app.state.ctx
    try:
        row, base = await run_in_threadpool(_read_target, ctx.db, task_id)
    except NotFound as exc:
        raise _Refused(404, str(exc)) from None
    if who.kind != "user":
        raise _Refused(
            403, f"only users may open task services; a {who.kind}'s token may not reach {task_id}"
        )
    refused = await run_in_threadpool(may_open, conn.app.state.authz, who, task_id)
    if refused is not None:
        raise _Refused(403, refused)
    if base is None:
        if row.state in ("COMPLETED", "ERROR", "CANCELED"):
            raise _Refused(410, f"task {task_id} has ended ({row.state}): {row.exit_message}")
        raise _Refused(503, f"task {task_id} is {row.state}; its service is not ready yet")
    ctx.task_activity[task_id] = time.time()
    return row, base


async def _deny(ws: WebSocket, refused: _Refused) -> None:
    """Refuse a WebSocket handshake with an HTTP status (401, 403 ...) where the server
    can (the ASGI WebSocket Denial Response extension; uvicorn has it), else close it
    with code 4000 + status before accepting."""
    try:
        await ws.send_denial_response(refused.response())
    except RuntimeError:
        await ws.close(code=4000 + refused.status, reason=refused.detail[:120])


# ---------------------------------------------------------------------- master origin


def _proxy_url(conn: HTTPConnection, task_id: str, path: str) -> str:
    state = conn.app.state
    origin = proxy_origin(
        conn.url.scheme,
        conn.headers.get("host", ""),
        state.proxy_port,
        task_id,
        state.config.task_proxy.domain,
    )
    return origin + path


async def _master_http(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    path = raw_path(request)
    try:
        if _bearer(request):  # the CLI and scripts: no browser, no cookie
            who = await _identify(request, request)
            row, base = await _target(request, who, task_id)
            if path == f"/proxy/{task_id}":
                return RedirectResponse(f"/proxy/{task_id}/", status_code=307)
            return await forward_http(request, row, base)
        if not request.cookies.get(COOKIE_NAME):
            raise _Refused(401, _NO_CREDENTIAL, {"WWW-Authenticate": "Bearer"})
        who = await _identify(request, _CookieOnly(request))
        row, _base = await _target(request, who, task_id)
        _check_shared_origin(request, who, row, task_id)
        if request.method not in ("GET", "HEAD"):
            raise _Refused(
                403,
                f"task services are served at their own origin; open "
                f"{_proxy_url(request, task_id, f'/proxy/{task_id}/')} (the master's "
                "cookie opens no service)",
            )
        if path == f"/proxy/{task_id}":
            path += "/"
        if request.url.query:
            path += "?" + request.url.query
        auth: ProxyAuth = request.app.state.proxy_auth
        try:
            ticket = auth.issue_ticket(who, task_id, path)
            target = _proxy_url(request, task_id, f"{TICKET_PATH}?ticket={quote(ticket)}")
        except ValueError as exc:
            raise _Refused(400, str(exc)) from None
        return RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
    except _Refused as exc:
        return exc.response()


async def _master_ws(ws: WebSocket) -> None:
    task_id = ws.path_params["task_id"]
    try:
        if not _bearer(ws):
            if ws.cookies.get(COOKIE_NAME):
                raise _Refused(
                    403,
                    "task services are served at their own origin: the master's cookie "
                    "opens no WebSocket of a task",
                )
            raise _Refused(401, _NO_CREDENTIAL, {"WWW-Authenticate": "Bearer"})
        who = await _identify(ws, ws)
        row, base = await _target(ws, who, task_id)
    except _Refused as exc:
        await _deny(ws, exc)
        return
    await forward_ws(ws, row, base)


def _check_shared_origin(conn: HTTPConnection, who: Principal, row: Any, task_id: str) -> None:
    """Without ``task_proxy.domain`` every task's service shares one proxy origin, so a
    page of one task could drive, in the browser of whoever opens it, the services of
    that person's other tasks (their proxy cookies are sent to the same origin). A
    browser may therefore open only its own user's tasks there; opening another user's
    task in a browser (an admin, a workspace's ``UPDATE_NSC`` holder) needs the origin
    per task that ``task_proxy.domain`` gives. Bearer clients (the CLI) are not browsers
    and are not limited.

    Raises:
        _Refused: 403 for another user's task on a shared origin.
    """
    if conn.app.state.config.task_proxy.domain or row.owner_id == who.user_id:
        return
    raise _Refused(
        403,
        f"task {task_id} belongs to {row.owner}: without task_proxy.domain in the master "
        "config every task shares one origin, so a browser may open only its own user's "
        "tasks (a page of this task could otherwise act in your other tasks); ask the "
        "administrator to set task_proxy.domain, or reach it with a bearer token "
        "(det shell, det notebook as its owner)",
    )


def make_master_proxy_app(state: Any) -> Starlette:
    """The ASGI app mounted at ``/proxy`` of the master's origin (sharing the master
    app's ``state``: its AuthService, MasterContext, ProxyAuth and httpx client)."""
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    app = Starlette(
        routes=[
            WebSocketRoute("/{task_id}/{path:path}", _master_ws),
            Route("/{task_id}", _master_http, methods=methods),
            Route("/{task_id}/{path:path}", _master_http, methods=methods),
        ]
    )
    app.state = state
    return app


# ---------------------------------------------------------------------- proxy origin


def _check_origin(conn: HTTPConnection, task_id: str) -> None:
    """Refuse a request made by a page of another origin, and (with a domain) one that
    reaches a task by another task's host name.

    Raises:
        _Refused: 403.
    """
    domain = conn.app.state.config.task_proxy.domain
    host = conn.headers.get("host", "").rsplit(":", 1)[0].lower()
    if domain and host != f"{task_id}.{domain}".lower():
        raise _Refused(403, f"task {task_id} is served at {task_id}.{domain}, not at {host}")
    origin = conn.headers.get("origin")
    if origin is None:
        return
    scheme = "https" if conn.url.scheme in ("https", "wss") else "http"
    if origin.rstrip("/").lower() != f"{scheme}://{conn.headers.get('host', '')}".lower():
        raise _Refused(
            403, f"a page of {origin} may not call task {task_id}'s service (another origin)"
        )


async def _proxy_user(conn: HTTPConnection, task_id: str) -> Principal:
    """The user presenting the proxy cookie of ``task_id``, or a bearer token.

    Raises:
        _Refused: 401 no valid credential.
    """
    if _bearer(conn):
        return await _identify(conn, conn)
    value = conn.cookies.get(PROXY_COOKIE)
    auth: ProxyAuth = conn.app.state.proxy_auth
    grant = auth.session(value, task_id) if value else None
    if grant is None:
        raise _Refused(401, _NO_CREDENTIAL, {"WWW-Authenticate": "Bearer"})
    state = conn.app.state

    def read() -> Any:
        with state.ctx.db.read() as s:
            return users.session_user(s, grant.session_id, state.auth.clock())

    user = await run_in_threadpool(read)
    if user is None:
        if value:
            auth.end(value)
        raise _Refused(401, "the sign-in this page was opened with has ended; open it again")
    return Principal(
        kind="user",
        user_id=user.id,
        username=user.username,
        admin=user.admin,
        session_id=grant.session_id,
    )


async def _redeem(request: Request) -> Response:
    auth: ProxyAuth = request.app.state.proxy_auth
    ticket = request.query_params.get("ticket", "")
    used = auth.redeem(ticket) if ticket else None
    if used is None:
        return JSONResponse(
            {
                "detail": "this link to a task was used already or has expired; open the "
                "task again from the WebUI or with `det notebook open`"
            },
            status_code=403,
        )
    value, grant = used
    try:
        _check_origin(request, grant.task_id)
    except _Refused as exc:
        auth.end(value)
        return exc.response()
    response = _onward(request, grant.path)
    response.set_cookie(
        PROXY_COOKIE,
        value,
        path=f"/proxy/{grant.task_id}/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _onward(request: Request, path: str) -> Response:
    """Where the redeemed ticket sends the browser: ``303`` to ``path``, except for a
    navigation that began on another site (``Sec-Fetch-Site: cross-site``: the WebUI on
    the master's origin opened the task under ``task_proxy.domain``), which gets a page
    that moves on by itself. Browsers do not send a SameSite=Strict cookie on the
    redirects of a cross-site navigation, but do on a navigation this origin's own page
    starts (Fetch Metadata, w3c.github.io/webappsec-fetch-metadata)."""
    headers = {"Cache-Control": "no-store"}
    if request.headers.get("sec-fetch-site") != "cross-site":
        return RedirectResponse(path, status_code=303, headers=headers)
    target = html.escape(path, quote=True)
    body = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='0;url={target}'><title>Opening the task</title>"
        f"</head><body><p><a href='{target}'>Open the task</a></p></body></html>"
    )
    return HTMLResponse(body, headers=headers)


async def _origin_http(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        _check_origin(request, task_id)
        who = await _proxy_user(request, task_id)
        row, base = await _target(request, who, task_id)
    except _Refused as exc:
        return exc.response()
    path = raw_path(request)
    if path == f"/proxy/{task_id}":
        return RedirectResponse(f"/proxy/{task_id}/", status_code=307)
    page = terminal_file(row, request.method, path)  # a shell's browser terminal
    if page is not None:
        return page
    return await forward_http(request, row, base)


async def _origin_ws(ws: WebSocket) -> None:
    task_id = ws.path_params["task_id"]
    try:
        _check_origin(ws, task_id)
        who = await _proxy_user(ws, task_id)
        row, base = await _target(ws, who, task_id)
    except _Refused as exc:
        await _deny(ws, exc)
        return
    await forward_ws(ws, row, base)


def make_proxy_origin_app(state: Any) -> Starlette:
    """The ASGI app of the proxy origin (``task_proxy``: the master's second port):
    ``/proxy-auth`` and ``/proxy/<task id>/...``; anything else is 404. It shares the
    master app's ``state`` and has no lifespan of its own (the master's runs first)."""
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    async def not_found(request: Request) -> Response:
        return JSONResponse(
            {"detail": "the proxy origin serves task services only (/proxy/<task id>/)"},
            status_code=404,
        )

    app = Starlette(
        routes=[
            Route(TICKET_PATH, _redeem, methods=["GET"]),
            WebSocketRoute("/proxy/{task_id}/{path:path}", _origin_ws),
            Route("/proxy/{task_id}", _origin_http, methods=methods),
            Route("/proxy/{task_id}/{path:path}", _origin_http, methods=methods),
            Route("/{path:path}", not_found, methods=methods),
        ]
    )
    app.state = state
    return app
