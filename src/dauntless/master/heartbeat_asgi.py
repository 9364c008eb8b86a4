"""Quiet heartbeats answered before FastAPI's routing (issue 37: 1,000 agents beating
every 5 s must cost the master at most a quarter of a core).

A heartbeat that changes nothing is answered from memory
(:meth:`dauntless.master.heartbeats.Heartbeats.answer`). Through FastAPI that answer
still cost the route matching, the application dependency
(:func:`dauntless.master.auth.authenticate`), the body's parsing and validation, the
endpoint's call and a :class:`~starlette.responses.JSONResponse`: most of the master's
CPU per quiet beat besides the HTTP server's own. :class:`QuietHeartbeats` is an ASGI
middleware placed innermost among the application's middleware (inside the request
metrics, the cluster message header, the JSON body limits and the audit trail, which
all see the request as before) that answers such a beat itself, and hands every other
request to FastAPI unchanged, with the body it read given back message for message.

It answers only when all of these hold, else the request takes the route as before:

* ``POST /api/v1/agents/{agent_id}/heartbeat`` (no ``root_path``), after that route was
  matched once by FastAPI in this application (the route object, which the request
  metrics name and :meth:`~dauntless.master.auth.AuthService.authorize` reads, is
  learnt from that request; a remembered answer exists only after a beat took the full
  path, so in practice every quiet beat qualifies);
* the caller presents an agent credential (``X-Dauntless-Agent-Token``, and no cluster
  secret) that :meth:`~dauntless.master.auth.AuthService.identify_without_db` knows
  in memory, bound to that very ``agent_id``, and the route's rule passes
  :meth:`~dauntless.master.auth.AuthService.authorize` (the same code as the
  dependency; a refusal is left to the route, which answers 401 or 403);
* the body is ``application/json``, at most :data:`MAX_QUIET_BODY_BYTES`, parses with
  ``json.loads`` and validates as :class:`~dauntless.master.schemas.Heartbeat` (as
  FastAPI parses it), and carries no exit;
* :meth:`~dauntless.master.heartbeats.Heartbeats.answer` gives a remembered answer
  (which also records the beat in memory);
* a ``wait_seconds`` query parameter, if any, is a number from 0 to
  :data:`~dauntless.master.heartbeats.MAX_HOLD_SECONDS`; above 0 the beat is held
  (:meth:`~dauntless.master.heartbeats.Heartbeats.hold`) and, if something changed
  for the agent meanwhile, handed to the route after all.

Its answer is the bytes and headers the route would send (``JSONResponse``'s
rendering). The request's scope gets what the route's matching and the dependency would
have put there (``route``, ``endpoint``, ``path_params``, the ``principal``), so the
request metrics count it under the route's template and the audit trail judges it as
it would the route's (agents' requests are not audited).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from fastapi import HTTPException
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_HEADER

from .asgi_answers import hand_on, json_bytes, learnt_post_route, send_json
from .heartbeats import MAX_HOLD_SECONDS, Stamp
from .schemas import Heartbeat

HEARTBEAT_PATH = "/api/v1/agents/{agent_id}/heartbeat"
"""The heartbeat route's template."""

MAX_QUIET_BODY_BYTES = 1024 * 1024
"""The largest body (bytes) a beat answered here may have; a larger one takes the route
(whose limits are :mod:`dauntless.master.body_limits`'). An agent listing 1,000 parts
of 36-character ids sends about 40 KB."""

_PREFIX = "/api/v1/agents/"
_SUFFIX = "/heartbeat"
_AGENT_TOKEN = AGENT_TOKEN_HEADER.lower().encode("latin-1")
_CLUSTER_SECRET = CLUSTER_SECRET_HEADER.lower().encode("latin-1")


def heartbeat_agent(scope: Scope) -> str | None:
    """The ``agent_id`` of a ``POST /api/v1/agents/{agent_id}/heartbeat`` request (as
    the route's path parameter would be: one non-empty path segment), None for any
    other request."""
    if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("root_path"):
        return None
    path: str = scope.get("path", "")
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    agent_id = path[len(_PREFIX) : -len(_SUFFIX)]
    return agent_id if agent_id and "/" not in agent_id else None


def _wait_seconds(scope: Scope) -> float | None:
    """The beat's ``wait_seconds`` query parameter (0.0 when absent), or None when it is
    not a number from 0 to :data:`MAX_HOLD_SECONDS` or is given twice (the route then
    answers 400 naming it)."""
    query = scope.get("query_string") or b""
    if not query:
        return 0.0
    try:
        values = parse_qs(query.decode("latin-1"), keep_blank_values=True, strict_parsing=True)
        given = values.get("wait_seconds", ["0"])
        wait = float(given[0]) if len(given) == 1 else None
    except ValueError:
        return None
    if wait is None or not 0 <= wait <= MAX_HOLD_SECONDS:
        return None
    return wait


class QuietHeartbeats:
    """ASGI middleware: answer quiet agent heartbeats from memory before FastAPI's
    routing (see the module for exactly when; every other request passes unchanged).

    The instance is left in ``state.quiet_heartbeats``; :attr:`answered` counts the
    beats it answered.

    Args:
        app: the application it wraps (FastAPI's inner stack).
        state: the master application's ``app.state`` (its ``ctx`` and ``auth``), read
            at each request.
    """

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state
        self.answered = 0
        state.quiet_heartbeats = self
        self._route: Any = None  # the heartbeat route, once FastAPI matched it
        self._rule: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent_id = heartbeat_agent(scope)
        if agent_id is None:
            await self.app(scope, receive, send)
            return
        if self._route is None or not self._credential_only(scope):
            await self._route_it(scope, receive, send, [])
            return
        wait = _wait_seconds(scope)
        if wait is None:  # a malformed or out-of-range wait_seconds: the route says why
            await self._route_it(scope, receive, send, [])
            return
        messages, body = await _read_body(receive)
        quiet = None if body is None else self._quiet_answer(scope, agent_id, body)
        if quiet is not None and wait > 0:
            beats = self.state.ctx.heartbeats
            if await beats.hold(agent_id, quiet[1], wait):  # work came: the route answers
                quiet = None
        if quiet is None:
            await self._route_it(scope, receive, send, messages)
            return
        self.answered += 1
        await send_json(send, quiet[0])

    @staticmethod
    def _credential_only(scope: Scope) -> bool:
        """An agent credential is presented, and no cluster secret (which the
        dependency would check first) and a JSON body is declared."""
        token = secret = False
        json_body = False
        for key, value in scope.get("headers") or ():
            if key == _AGENT_TOKEN:
                token = True
            elif key == _CLUSTER_SECRET:
                secret = True
            elif key == b"content-type":
                json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
        return token and not secret and json_body

    def _quiet_answer(self, scope: Scope, agent_id: str, body: bytes) -> tuple[bytes, Stamp] | None:
        """The rendered answer to a quiet beat and the change counts it was given under
        (for :meth:`Heartbeats.hold`), or None (nothing is recorded then)."""
        # What the route's matching would add to the scope; the scope itself gets it
        # only when this answers (the route's matching adds it otherwise).
        matched = {
            "route": self._route,
            "endpoint": self._route.endpoint,
            "path_params": {"agent_id": agent_id},
        }
        request = Request({**scope, **matched})
        try:
            who = self.state.auth.identify_without_db(request)
            if who is None or who.kind != "agent" or who.agent_id != agent_id or who.part_id:
                return None
            self.state.auth.authorize(who, self._rule, request)
        except HTTPException:
            return None
        try:
            beat = Heartbeat.model_validate(json.loads(body))
        except (ValueError, ValidationError, RecursionError):
            return None
        if beat.exited:
            return None
        ctx = self.state.ctx
        sampled = [x.allocation_id for x in beat.resources]
        stamp = ctx.heartbeats.stamp(agent_id)
        kept = ctx.heartbeats.answer(agent_id, beat.running, sampled, ctx.clock())
        if kept is None:
            return None
        scope.update(matched)
        scope.setdefault("state", {})["principal"] = who  # what the dependency leaves
        # As the route's JSONResponse renders it (starlette.responses.JSONResponse).
        answer = {**kept, "agent_timeout": float(ctx.config.agent_timeout)}
        rendered = json_bytes(answer)
        return rendered, stamp

    async def _route_it(
        self, scope: Scope, receive: Receive, send: Send, messages: list[Message]
    ) -> None:
        """Hand the request to FastAPI, replaying the ``messages`` already received;
        learn the heartbeat route from its matching."""
        try:
            await hand_on(self.app, scope, receive, send, messages)
        finally:
            if self._route is None:
                learnt = learnt_post_route(scope, HEARTBEAT_PATH)
                if learnt is not None:
                    self._route, self._rule = learnt


async def _read_body(receive: Receive) -> tuple[list[Message], bytes | None]:
    """Receive a request's body: (the messages received, the body), the body None when
    it is over :data:`MAX_QUIET_BODY_BYTES` or the client left (the messages are then
    replayed to the route, which reads the rest)."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > MAX_QUIET_BODY_BYTES:
            return messages, None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return messages, b"".join(chunks)


__all__ = ["HEARTBEAT_PATH", "MAX_QUIET_BODY_BYTES", "QuietHeartbeats", "heartbeat_agent"]
