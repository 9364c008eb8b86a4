"""Limits on the JSON bodies of API requests, checked before any route parses them.

Every ``/api/`` request whose body is JSON (``application/json`` or ``+json``) passes
through :class:`JSONBodyLimits`, an ASGI middleware, before authentication and before
FastAPI parses the body for the route:

* over :data:`MAX_JSON_BODY_BYTES` (by ``Content-Length``, or counted as it arrives):
  413, without reading the rest;
* nested deeper than :data:`dauntless.config.MAX_DEPTH` levels (also where
  ``json.loads`` itself would run out of stack) or holding an integer outside a signed
  64 bits: 400 naming the field (``{"detail", "errors": [{"field", "message"}]}``);
* text that is not JSON at all is left to the route (FastAPI answers it 400).

A POST, PUT or PATCH body with no ``Content-Type`` is taken as JSON (Determined's client
sends its bodies so), except on the routes that read such bodies themselves.

The body is then handed on unchanged, and the route parses it again: FastAPI offers no
hook to hand it the parsed value, and a hand-written scan of the bytes for nesting and
long digit runs measured slower than ``json.loads`` itself. The cost is about 0.085 ms
of CPU per metrics report of 256 values (6.6 ms to parse and 1.9 ms to check 100 such
reports, measured on the 2-core test machine), some 3% of the 2.4 ms the master spends
per report on SQLite (``benchmarks/metric_ingest.py``) and 1% on PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dauntless.config import LimitError, load_json

MAX_JSON_BODY_BYTES = 32 * 1024 * 1024
"""The largest JSON request body accepted (bytes): 1,000 metrics reports of a few
hundred values each fit with room to spare."""


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


UNTYPED_OWN_READER = frozenset(
    {("POST", "/api/v1/experiments")}
    | {("POST", f"/api/v1/{f}") for f in ("commands", "notebooks", "shells", "tensorboards")}
)
"""Routes that read an untyped body themselves, with limits of their own (Determined's
experiment and task launches carry their context directory:
:mod:`dauntless.master.det_create`)."""


def _untyped_json(scope: Scope) -> bool:
    """Whether a request without ``Content-Type`` is taken as JSON: a POST, PUT or PATCH
    to ``/api/`` (what Determined's client sends so), except :data:`UNTYPED_OWN_READER`."""
    method = scope.get("method", "")
    if method not in ("POST", "PUT", "PATCH"):
        return False
    return (method, scope.get("path", "").rstrip("/")) not in UNTYPED_OWN_READER


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class JSONBodyLimits:
    """ASGI middleware: bound the JSON bodies of ``/api/`` requests (see the module).

    Args:
        app: the application it wraps.
        max_bytes: the largest body accepted, in bytes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if not headers.get(b"content-type", b"").strip() and _untyped_json(scope):
            # Determined's client sends its JSON bodies with no Content-Type (issue 33):
            # read them as JSON, within the same limits.
            kept = [(k, v) for k, v in scope.get("headers", []) if k != b"content-type"]
            scope = dict(scope)
            scope["headers"] = [*kept, (b"content-type", b"application/json")]
            headers[b"content-type"] = b"application/json"
        if not _is_json(headers.get(b"content-type", b"").decode("latin-1")):
            await self.app(scope, receive, send)
            return
        too_large = {
            "detail": f"the request body is over {self.max_bytes} bytes of JSON",
            "errors": [{"field": "body", "message": f"at most {self.max_bytes} bytes"}],
        }
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            declared = 0
        if declared > self.max_bytes:
            await _answer(send, 413, too_large)
            return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await _answer(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            try:
                load_json(body, "", self.max_bytes)
            except LimitError as exc:
                if not exc.detail.startswith("not valid JSON"):
                    await _answer(
                        send,
                        400,
                        {
                            "detail": f"invalid request: {exc}",
                            "errors": [{"field": exc.field or "body", "message": exc.detail}],
                        },
                    )
                    return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


__all__ = ["MAX_JSON_BODY_BYTES", "JSONBodyLimits"]
