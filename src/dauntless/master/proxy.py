"""The master's proxy to task services: ``/proxy/<task id>/...`` (HTTP and WebSocket).

A notebook, shell or TensorBoard listens on a port of its agent; users reach it through
the master's one address (and its TLS), signed in: only the task's owner or a user with
``UPDATE_NSC`` on its workspace passes (the ``PROXY`` row of
:mod:`dauntless.master.permissions`; a trial's or task's session token, or another user,
gets 403; no credential 401). The service gets the path unchanged (notebooks and TensorBoards are started with
``/proxy/<task id>/`` as their base URL), and the proxy adds the service's own secret
(``Authorization: token ...``, Jupyter's token), so the service cannot be used by
going around the master. The master's ``dauntless_token`` cookie and the caller's
``Authorization`` header are not passed on.

What is hand-written and why: the transport is libraries: httpx streams HTTP requests
and answers both ways (bodies are never held whole), Starlette's WebSocket accepts the
browser's side and the ``websockets`` client opens the service's side. What is ours is
the glue no library offers for an ASGI app: choosing the target from the task's row,
the owner check, which headers cross (hop-by-hop headers dropped, RFC 9110 §7.6.1),
and the two pumps copying WebSocket messages until either side closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import websockets
from fastapi import HTTPException
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from dauntless._auth import COOKIE_NAME

from .authz import may_open
from .tasks import NotFound

log = logging.getLogger("dauntless.master.proxy")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that describe one connection, not the message (never forwarded)."""

_WS_SKIP = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
)


class _CookieOnly:
    """A connection's credentials without its Authorization header (for identify)."""

    def __init__(self, conn: HTTPConnection) -> None:
        self.headers = {k: v for k, v in conn.headers.items() if k.lower() != "authorization"}
        self.cookies = conn.cookies


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def _target(conn: HTTPConnection, task_id: str) -> tuple[Any, str]:
    """The task's service URL once the caller may reach it.

    Raises:
        _Refused: 401/403 for the caller, 404 unknown task, 503 not ready.
    """
    app = conn.app
    auth = app.state.auth
    caller: Any = conn
    header = conn.headers.get("authorization", "")
    if header and not header.lower().startswith("bearer "):
        # The service's own scheme (JupyterLab sends "token ..."): the user is known by
        # the master's cookie, and the header is the service's business.
        caller = _CookieOnly(conn)
    try:
        who = await run_in_threadpool(auth.identify, caller)
    except HTTPException as exc:
        raise _Refused(exc.status_code, str(exc.detail)) from None
    ctx = app.state.ctx
    try:
        row, base = await run_in_threadpool(ctx.tasks.target, task_id)
    except NotFound as exc:
        raise _Refused(404, str(exc)) from None
    if who.kind != "user":
        raise _Refused(
            403, f"only users may open task services; a {who.kind}'s token may not reach {task_id}"
        )
    refused = await run_in_threadpool(may_open, app.state.authz, who, task_id)
    if refused is not None:
        raise _Refused(403, refused)
    if base is None:
        if row.state in ("COMPLETED", "ERROR", "CANCELED"):
            raise _Refused(410, f"task {task_id} has ended ({row.state}): {row.exit_message}")
        raise _Refused(503, f"task {task_id} is {row.state}; its service is not ready yet")
    ctx.tasks.proxy_activity[task_id] = time.time()
    return row, base


def _forward_headers(conn: HTTPConnection, row: Any, skip: frozenset[str]) -> list[tuple[str, str]]:
    out = []
    for name, value in conn.headers.items():
        low = name.lower()
        if low in skip or low == "authorization":
            continue
        if low == "cookie":
            kept = [c for c in value.split(";") if c.strip().split("=", 1)[0] != COOKIE_NAME]
            if not kept:
                continue
            value = ";".join(kept).strip()
        out.append((name, value))
    if row.service_token:
        out.append(("Authorization", f"token {row.service_token}"))
    return out


def _raw_path(conn: HTTPConnection) -> str:
    """The path as the client sent it (still percent-encoded, the mount prefix kept)."""
    raw = conn.scope.get("raw_path")
    if raw:
        return raw.decode("latin-1").split("?", 1)[0]
    return conn.scope.get("root_path", "") + conn.scope["path"]


async def _http(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        row, base = await _target(request, task_id)
    except _Refused as exc:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)
    path = _raw_path(request)
    if path == f"/proxy/{task_id}":
        return RedirectResponse(f"/proxy/{task_id}/", status_code=307)
    client: httpx.AsyncClient = request.app.state.proxy_client
    url = base + path + (f"?{request.url.query}" if request.url.query else "")
    upstream = client.build_request(
        request.method,
        url,
        headers=_forward_headers(request, row, HOP_BY_HOP),
        content=request.stream(),
    )
    try:
        answer = await client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        return JSONResponse(
            {"detail": f"task {task_id}'s service did not answer: {exc}"}, status_code=502
        )
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP]
    response = StreamingResponse(
        answer.aiter_raw(), status_code=answer.status_code, background=BackgroundTask(answer.aclose)
    )
    response.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return response


async def _websocket(ws: WebSocket) -> None:
    task_id = ws.path_params["task_id"]
    try:
        row, base = await _target(ws, task_id)
    except _Refused as exc:
        await ws.close(code=4000 + exc.status, reason=exc.detail[:120])
        return
    path = _raw_path(ws)
    url = "ws" + base[len("http") :] + path + (f"?{ws.url.query}" if ws.url.query else "")
    protocols = [
        p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
    ]
    try:
        upstream = await websockets.connect(
            url,
            additional_headers=_forward_headers(ws, row, HOP_BY_HOP | _WS_SKIP),
            subprotocols=protocols or None,  # type: ignore[arg-type]
            max_size=None,
            open_timeout=10,
        )
    except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as exc:
        log.warning("proxy: task %s refused a WebSocket: %s", task_id, exc)
        await ws.close(code=1011, reason="the task's service refused the connection")
        return
    await ws.accept(subprotocol=upstream.subprotocol)

    async def client_to_service() -> None:
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                if msg.get("bytes") is not None:
                    await upstream.send(msg["bytes"])
                elif msg.get("text") is not None:
                    await upstream.send(msg["text"])
        except (WebSocketDisconnect, websockets.ConnectionClosed):
            return

    async def service_to_client() -> None:
        try:
            async for data in upstream:
                ctx = ws.app.state.ctx
                ctx.tasks.proxy_activity[task_id] = time.time()
                if isinstance(data, bytes):
                    await ws.send_bytes(data)
                else:
                    await ws.send_text(data)
        except (WebSocketDisconnect, websockets.ConnectionClosed, RuntimeError):
            return

    pumps = [
        asyncio.ensure_future(client_to_service()),
        asyncio.ensure_future(service_to_client()),
    ]
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for p in pumps:
            p.cancel()
        await upstream.close()
        try:
            await ws.close()
        except (RuntimeError, WebSocketDisconnect):
            pass  # already closed by the client


def make_proxy_app(state: Any) -> Starlette:
    """The ASGI app mounted at ``/proxy`` (sharing the master app's ``state``: its
    AuthService and MasterContext). Its httpx client is made on first use."""
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    app = Starlette(
        routes=[
            WebSocketRoute("/{task_id}/{path:path}", _websocket),
            Route("/{task_id}", _http, methods=methods),
            Route("/{task_id}/{path:path}", _http, methods=methods),
        ]
    )
    app.state = state
    return app


def proxy_client() -> httpx.AsyncClient:
    """The proxy's client: no overall timeout (a long poll or a big download may take
    as long as it takes), 10 s to connect, redirects passed to the browser as they are."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False, trust_env=False
    )
