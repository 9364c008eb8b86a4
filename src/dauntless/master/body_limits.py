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

The body is parsed by orjson; only a body orjson refuses (not JSON, or JSON that
``json.loads`` reads and orjson does not: ``NaN``, integers past 64 bits, lone
surrogates, UTF-16) is parsed again by :func:`dauntless.config.load_json`, so what is
accepted, refused and read is what ``json.loads`` gives. The body is handed on
unchanged, and the parsed value beside it in the ASGI scope (:data:`PARSED_JSON`): a
route of class :class:`ParsedJSONRoute` takes it instead of parsing the body again.

Why (issue 37): both parses ran on the event loop, where every request waits its turn.
``json.loads`` takes about 0.2 ms for a report of 256 metric values on the 2-core test
machine under load, orjson 0.013 ms; at 390 metric requests a second the two stdlib
parses were some 0.16 s of the event loop's every second.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dauntless.config import LimitError, check_tree, load_json, within_limits

MAX_JSON_BODY_BYTES = 32 * 1024 * 1024
"""The largest JSON request body accepted (bytes): 1,000 metrics reports of a few
hundred values each fit with room to spare."""


PARSED_JSON = "dauntless.parsed_json"
"""The ASGI scope's key of ``(body, value)``: a JSON body :class:`JSONBodyLimits` read
and the value it parsed from it."""


def parse_json(body: bytes, max_bytes: int = MAX_JSON_BODY_BYTES) -> Any:
    """``body`` parsed as ``json.loads`` would parse it, within the limits of
    :func:`dauntless.config.load_json`: by orjson (about 15 times faster), and by
    :func:`~dauntless.config.load_json` where orjson refuses it, so that ``json.loads``
    decides what orjson does not read (``NaN``, lone surrogates, UTF-16 or UTF-32 text)
    or reads otherwise (an integer past 64 bits, which orjson makes a float: any float
    of magnitude 2**63 or more sends the text there) and the refusals are its own.

    Args:
        body: the JSON text, encoded.
        max_bytes: the longest body accepted (bytes).

    Returns:
        The parsed value.

    Raises:
        LimitError: too long, not JSON, nested too deep or an integer outside a signed
            64 bits (as :func:`~dauntless.config.load_json`).
    """
    if len(body) > max_bytes:
        return load_json(body, "", max_bytes)  # its refusal
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:  # json.loads may read it, or says why not
        return load_json(body, "", max_bytes)
    if _plain(data):  # the usual case: both checks below pass, in one walk
        return data
    if _holds_huge_float(data):  # perhaps an integer past 64 bits, which orjson reads
        return load_json(body, "", max_bytes)  # as a float and json.loads as an int
    check_tree(data, "")
    return data


_HUGE = float(2**63)


def _plain(data: Any) -> bool:
    """Whether ``data`` (orjson's value: dicts, lists and scalars) holds no float of
    magnitude 2**63 or more and obeys :func:`dauntless.config.check_tree`'s rules
    (nesting, integer range): :func:`_holds_huge_float` and check_tree's fast pass in
    one walk of the tree (:func:`dauntless.config.within_limits`). False decides
    nothing: the caller then runs both as before, so a value's outcome (passed, read
    again by ``json.loads``, refused) is unchanged.

    A metrics report is a tree of some hundreds of values; this walk visits each once
    on the event loop, where the two checks walked it twice (issue 37).
    """
    return within_limits(data, _HUGE)


def _holds_huge_float(data: Any) -> bool:
    """Whether ``data`` holds a float of magnitude 2**63 or more: orjson reads an
    integer literal outside -2**63..2**64-1 as such a float (-2**63 itself when it rounds there), where ``json.loads`` reads
    an int (which the limits refuse)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            node = node.values()
        elif type(node) is not list:
            if type(node) is float and not -_HUGE < node < _HUGE:
                return True
            continue
        for value in node:
            if type(value) is float:
                if not -_HUGE < value < _HUGE:
                    return True
            elif type(value) is dict or type(value) is list:
                stack.append(value)
    return False


class ParsedJSONRequest(Request):
    """A request whose :meth:`json` is the value :class:`JSONBodyLimits` parsed from its
    body, when it parsed that body (else ``json.loads``, as Starlette's)."""

    async def json(self) -> Any:
        """The body's JSON value (parsed once, by the middleware where it could)."""
        if not hasattr(self, "_json"):
            body = await self.body()
            parsed = self.scope.get(PARSED_JSON)
            if parsed is not None and parsed[0] == body:
                self._json = parsed[1]
            else:
                self._json = json.loads(body)
        return self._json


class ParsedJSONRoute(APIRoute):
    """An API route whose body is not parsed a second time: FastAPI reads it through
    ``Request.json()``, which here gives the value :class:`JSONBodyLimits` parsed
    (FastAPI's documented custom request and route classes)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, given a :class:`ParsedJSONRequest` of each request."""
        handler = super().get_route_handler()

        async def parsed_json_handler(request: Request) -> Response:
            return await handler(ParsedJSONRequest(request.scope, request.receive))

        return parsed_json_handler


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
                scope[PARSED_JSON] = (body, parse_json(body, self.max_bytes))
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


__all__ = [
    "MAX_JSON_BODY_BYTES",
    "PARSED_JSON",
    "JSONBodyLimits",
    "ParsedJSONRequest",
    "ParsedJSONRoute",
    "parse_json",
]
