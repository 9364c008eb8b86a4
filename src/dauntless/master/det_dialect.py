"""Which answer shape a request gets where Dauntless's and Determined's shapes of one
route clash (issue 33).

Most of ``/api/v1`` answers both clients at once: Determined's field names are added
beside Dauntless's (:mod:`dauntless.master.det_shapes`). A few fields cannot be both:
an experiment's, trial's or checkpoint's ``state`` (Dauntless ``ACTIVE``, Determined
``STATE_ACTIVE``, which its client parses as a strict enum), an agent's ``slots`` (a
list here, a map keyed by slot id there) and the pages of experiments, trials and
checkpoints (Determined's client requires ``pagination``, objects of its own shape). For
those routes the answer is Determined's when the request speaks Determined's dialect:

- the ``X-Det-Dialect`` header says ``determined`` (or ``dauntless``), explicitly; else
- the request comes from Python ``requests`` (``User-Agent: python-requests/...``), which
  is what Determined's client is built on; Dauntless's own clients (CLI, SDK, Core API,
  agent) use httpx and the WebUI a browser, so they keep Dauntless's shapes.

The switch is one function so that it can go when Dauntless's CLI, SDK and WebUI read
Determined's state names and slot maps themselves (then one shape serves both).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DIALECT_HEADER = "X-Det-Dialect"
"""``determined`` or ``dauntless``: the answer shape asked for, overriding the guess."""


def speaks_determined(request: Request) -> bool:
    """Whether ``request`` gets Determined's shape where the two clash (module docs)."""
    return _speaks_determined_scope(request.scope)


def _speaks_determined_scope(scope: Scope) -> bool:
    headers = {k.lower(): v for k, v in scope.get("headers") or []}
    explicit = headers.get(DIALECT_HEADER.lower().encode())
    if explicit:
        return explicit.decode("latin-1").strip().lower() == "determined"
    return headers.get(b"user-agent", b"").startswith(b"python-requests/")


class CreatedAsOK:
    """ASGI middleware: a ``201 Created`` answer to a request in Determined's dialect is
    sent as ``200 OK``. Determined's generated client accepts exactly 200 (grpc-gateway
    answers every successful call so) and treats any other status as an error, while
    Dauntless's own clients expect 201 from a create."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _speaks_determined_scope(scope):
            await self.app(scope, receive, send)
            return

        async def send_ok(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 201:
                message = {**message, "status": 200}
            await send(message)

        await self.app(scope, receive, send_ok)
