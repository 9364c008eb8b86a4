"""The transport of the master's proxy to task services (:mod:`dauntless.master.proxy`
decides who may pass): forwarding an HTTP request or a WebSocket to the service, with
the headers that may cross.

Libraries do the transport: httpx streams HTTP requests and answers both ways (bodies
are never held whole), Starlette's WebSocket accepts the browser's side and the
``websockets`` client opens the service's side. What is ours is which headers cross
(hop-by-hop headers dropped, RFC 9110 §7.6.1; no ``dauntless_*`` cookie either way; the
service's own token and origin added) and the two pumps copying WebSocket messages
until either side closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import websockets
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from dauntless._tls import default_ssl_context

if TYPE_CHECKING:
    import httpx

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
        "origin",
    }
)

_OWN_COOKIES = "dauntless_"
"""The prefix of the master's and the proxy origin's cookies."""


def forward_headers(
    conn: HTTPConnection, row: Any, base: str, skip: frozenset[str]
) -> list[tuple[str, str]]:
    out = []
    for name, value in conn.headers.items():
        low = name.lower()
        if low in skip or low == "authorization":
            continue
        if low == "cookie":
            kept = [
                c
                for c in value.split(";")
                if not c.strip().split("=", 1)[0].lower().startswith(_OWN_COOKIES)
            ]
            if not kept:
                continue
            value = ";".join(kept).strip()
        if low == "origin":
            value = origin_of(base)  # checked by the proxy origin: the service's own
        out.append((name, value))
    if row.service_token:
        out.append(("Authorization", f"token {row.service_token}"))
    return out


def origin_of(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def raw_path(conn: HTTPConnection) -> str:
    """The path as the client sent it (still percent-encoded, the mount prefix kept)."""
    raw = conn.scope.get("raw_path")
    if raw:
        return raw.decode("latin-1").split("?", 1)[0]
    return conn.scope.get("root_path", "") + conn.scope["path"]


def _has_body(request: Request) -> bool:
    """Whether the request carries a body (RFC 9112 6.3: framed by Transfer-Encoding or
    a non-zero Content-Length)."""
    if "transfer-encoding" in request.headers:
        return True
    return request.headers.get("content-length", "0").strip() not in ("", "0")


async def forward_http(request: Request, row: Any, base: str) -> Response:
    """Forward an HTTP request to the task's service at ``base`` and stream its answer
    back (502 when the service does not answer).

    The request's body is forwarded framed as it came: with its ``Content-Length``, or
    chunked when it came chunked, and a request without a body is sent without one. (A
    body-less GET sent chunked, as a stream forwarded without its length is, leaves the
    chunked terminator unread by servers that ignore GET bodies; Werkzeug's, under
    TensorBoard, then closes the connection with unread data, which resets it and cut
    TensorBoard's scripts short behind the proxy.)
    """
    task_id = row.id
    path = raw_path(request)
    import httpx  # imported by the first proxied request (see app_proxy_client)

    client = app_proxy_client(request.app.state)
    url = base + path + (f"?{request.url.query}" if request.url.query else "")
    body = _has_body(request)
    upstream = client.build_request(
        request.method,
        url,
        headers=forward_headers(
            request, row, base, HOP_BY_HOP - {"content-length"} if body else HOP_BY_HOP
        ),
        content=request.stream() if body else None,
    )
    try:
        answer = await client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        return JSONResponse(
            {"detail": f"task {task_id}'s service did not answer: {exc}"}, status_code=502
        )
    headers = [
        (k, v)
        for k, v in answer.headers.multi_items()
        if k.lower() not in HOP_BY_HOP
        and not (k.lower() == "set-cookie" and v.strip().lower().startswith(_OWN_COOKIES))
    ]
    response = StreamingResponse(
        answer.aiter_raw(), status_code=answer.status_code, background=BackgroundTask(answer.aclose)
    )
    response.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return response


async def forward_ws(ws: WebSocket, row: Any, base: str) -> None:
    task_id = row.id
    path = raw_path(ws)
    url = "ws" + base[len("http") :] + path + (f"?{ws.url.query}" if ws.url.query else "")
    protocols = [
        p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
    ]
    try:
        upstream = await websockets.connect(
            url,
            additional_headers=forward_headers(ws, row, base, HOP_BY_HOP | _WS_SKIP),
            subprotocols=protocols or None,  # type: ignore[arg-type]
            origin=origin_of(base) if ws.headers.get("origin") else None,  # type: ignore[arg-type]
            max_size=None,
            open_timeout=10,
            # no permessage-deflate to the service (agent's LAN): it cost CPU on both
            # ends for an SSH tunnel's incompressible bytes (issue 34)
            compression=None,
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
                ws.app.state.ctx.task_activity[task_id] = time.time()
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


def proxy_client() -> httpx.AsyncClient:
    """The proxy's client: no overall timeout (a long poll or a big download may take
    as long as it takes), 10 s to connect, redirects passed to the browser as they are.

    Certificates are checked with the process's one default context, httpx's (certifi,
    or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` where set)
    (:func:`dauntless._tls.default_ssl_context`): building one per client cost each
    master application about 25–50 ms of CPU, which the tests, building hundreds of
    applications in one process, paid every time."""
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=10.0),
        follow_redirects=False,
        trust_env=False,
        verify=default_ssl_context(),
    )


def app_proxy_client(state: Any) -> httpx.AsyncClient:
    """The application's proxy client (``state.proxy_client``), made by the first
    request that needs it (:func:`proxy_client`).

    Why not at start: a master that never proxies then never imports httpx (and the
    ``rich`` and ``pygments`` its command-line module pulls in) nor loads the CA bundle,
    4.5 MB of its resident memory (issue 37). It runs on the event loop, without an
    ``await`` between the check and the store, so one client is made."""
    client = state.proxy_client
    if client is None:
        client = state.proxy_client = proxy_client()
    return client  # type: ignore[no-any-return]


__all__ = [
    "HOP_BY_HOP",
    "app_proxy_client",
    "forward_headers",
    "forward_http",
    "forward_ws",
    "origin_of",
    "proxy_client",
    "raw_path",
]
