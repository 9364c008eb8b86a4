"""What the master's ASGI short cuts share (:mod:`.heartbeat_asgi`, :mod:`.metrics_asgi`):
answering as the route's ``JSONResponse`` would, handing a request whose body was
already received on to FastAPI, and learning a route from FastAPI's own matching.

Each short cut answers a request of one route before FastAPI's routing when it can
(issue 37: the routing, the dependencies and the worker thread cost most of the
master's CPU for such requests), and otherwise hands it on unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from .auth_access import route_rule


def json_bytes(value: Any) -> bytes:
    """``value`` rendered exactly as starlette's ``JSONResponse.render`` renders it
    (compact separators, UTF-8, no NaN).

    Raises:
        ValueError: ``value`` holds NaN or an infinity.
        TypeError: ``value`` is not JSON-serialisable.
    """
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


async def send_json(send: Send, body: bytes) -> None:
    """Send a 200 answer of the JSON ``body`` (bytes) with the headers a
    ``JSONResponse`` sends (``content-length``, ``content-type``)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-length", str(len(body)).encode("latin-1")),
                (b"content-type", b"application/json"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def hand_on(
    app: Any, scope: Scope, receive: Receive, send: Send, messages: list[Message]
) -> None:
    """Run the request through ``app`` (FastAPI's stack), giving it first the
    ``messages`` already received from ``receive`` (in order), then the rest."""
    if not messages:
        await app(scope, receive, send)
        return
    replay = list(messages)

    async def receive_again() -> Message:
        if replay:
            return replay.pop(0)
        return await receive()

    await app(scope, receive_again, send)


def learnt_post_route(scope: Scope, path: str) -> tuple[Any, Any] | None:
    """``(route, rule)`` when FastAPI matched this request (its scope after the app ran)
    to the ``POST`` route of template ``path``: the route object and its permission
    rule (:func:`~dauntless.master.auth_access.route_rule`), else None."""
    route = scope.get("route")
    if getattr(route, "path", None) != path:
        return None
    endpoint = getattr(route, "endpoint", None)
    if endpoint is None or "POST" not in (getattr(route, "methods", None) or ()):
        return None
    return route, route_rule("POST", path, endpoint)


__all__ = ["hand_on", "json_bytes", "learnt_post_route", "send_json"]
