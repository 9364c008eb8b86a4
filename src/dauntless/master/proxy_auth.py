"""Who may use a task service on the proxy origin (docs/protocol.md, "Proxy").

Task services (notebooks, TensorBoards, shells) are served from an origin other than
the master's (:class:`~dauntless.config.TaskProxyConfig`): a second port, or a host
name per task. The master's ``dauntless_token`` cookie is never used there; instead:

1. A signed-in browser opens ``/proxy/<task id>/...`` on the **master's** origin (the
   WebUI's Open button, ``det notebook open``). The master checks the caller (owner or
   admin) and answers ``303`` to ``<proxy origin>/proxy-auth?ticket=T``, where ``T`` is
   a one-time *ticket* (256 random bits, valid :data:`TICKET_SECONDS`, for that task,
   user, login session and path).
2. The proxy origin redeems the ticket once and sets its own cookie,
   ``dauntless_proxy`` (HttpOnly, SameSite=Strict, ``Path=/proxy/<task id>/``, a
   browser-session cookie), then answers ``303`` to the path (or, for a navigation
   that began on another site, a page that moves on to it: a SameSite=Strict cookie is
   not sent on the redirects of a cross-site navigation).
3. Requests to ``/proxy/<task id>/...`` there present that cookie; its *proxy session*
   is valid for that one task only, while it is used at least every
   :data:`IDLE_SECONDS`, while the master login session it came from lives (a logout,
   a password change or a deactivation ends it) and while the master runs (sessions
   live in the master's memory).

Tickets and proxy sessions are stored as the SHA-256 of their value, at most
:data:`MAX_ENTRIES` each (the oldest are dropped first).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from .auth_access import Principal

PROXY_COOKIE = "dauntless_proxy"
"""The proxy origin's cookie (one per task: its path is the task's prefix)."""

TICKET_PATH = "/proxy-auth"
"""Where the proxy origin redeems a ticket (``?ticket=...``)."""

TICKET_SECONDS = 60.0
"""How long a ticket may wait to be redeemed (seconds)."""

IDLE_SECONDS = 3600.0
"""How long a proxy session lives without a request (seconds)."""

MAX_ENTRIES = 10_000
"""Tickets, and proxy sessions, kept at most."""

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:\d{1,5})?$")


@dataclass
class _Grant:
    task_id: str
    user_id: int
    session_id: int
    path: str
    expires: float  # time.monotonic()


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class ProxyAuth:
    """The tickets and proxy sessions of the proxy origin (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tickets: OrderedDict[str, _Grant] = OrderedDict()
        self._sessions: OrderedDict[str, _Grant] = OrderedDict()

    def issue_ticket(self, who: Principal, task_id: str, path: str) -> str:
        """A one-time ticket for user ``who`` (a user, signed in) to open ``path``, a
        path under ``/proxy/<task_id>/``.

        Raises:
            ValueError: ``who`` is not a signed-in user, or ``path`` lies outside the
                task's prefix.
        """
        if who.kind != "user" or who.user_id is None or who.session_id is None:
            raise ValueError("only a signed-in user gets a proxy ticket")
        if not path.startswith(f"/proxy/{task_id}/") or "//" in path:
            raise ValueError(f"{path!r} is not a path of task {task_id}")
        ticket = secrets.token_urlsafe(32)
        grant = _Grant(
            task_id, who.user_id, who.session_id, path, time.monotonic() + TICKET_SECONDS
        )
        with self._lock:
            self._put(self._tickets, _digest(ticket), grant)
        return ticket

    def redeem(self, ticket: str) -> tuple[str, _Grant] | None:
        """Use a ticket: a new proxy session's cookie value and its grant (task, user,
        session and the path to go to), or None for an unknown, used or stale ticket."""
        now = time.monotonic()
        with self._lock:
            grant = self._tickets.pop(_digest(ticket), None)
            if grant is None or grant.expires < now:
                return None
            value = secrets.token_urlsafe(32)
            grant.expires = now + IDLE_SECONDS
            self._put(self._sessions, _digest(value), grant)
        return value, grant

    def session(self, value: str, task_id: str) -> _Grant | None:
        """The proxy session of cookie ``value`` when it is for ``task_id`` and not
        idle past :data:`IDLE_SECONDS` (using it keeps it alive); else None."""
        now = time.monotonic()
        key = _digest(value)
        with self._lock:
            grant = self._sessions.get(key)
            if grant is None or grant.task_id != task_id:
                return None
            if grant.expires < now:
                del self._sessions[key]
                return None
            grant.expires = now + IDLE_SECONDS
            self._sessions.move_to_end(key)
            return grant

    def end(self, value: str) -> None:
        """Forget the proxy session of cookie ``value`` (its login session ended)."""
        with self._lock:
            self._sessions.pop(_digest(value), None)

    @staticmethod
    def _put(store: OrderedDict[str, _Grant], key: str, grant: _Grant) -> None:
        now = time.monotonic()
        while store:
            oldest_key, oldest = next(iter(store.items()))
            if oldest.expires >= now and len(store) < MAX_ENTRIES:
                break
            del store[oldest_key]
        store[key] = grant


def proxy_origin(scheme: str, host_header: str, port: int, task_id: str, domain: str | None) -> str:
    """The origin a task's service is served at, as the browser reaches it.

    Args:
        scheme: ``http`` or ``https`` (the master's own).
        host_header: the ``Host`` the browser sent to the master (its port is dropped).
        port: the proxy origin's port.
        task_id: the task.
        domain: ``task_proxy.domain``: the host is ``<task_id>.<domain>``; None: the
            host name the browser used for the master.

    Raises:
        ValueError: a ``Host`` header that is not a host name or address.
    """
    if not _HOST.match(host_header):
        raise ValueError(f"the Host header {host_header!r} is not a host name")
    if domain:
        host = f"{task_id}.{domain}"
    elif host_header.startswith("["):
        host = host_header.split("]", 1)[0] + "]"
    else:
        host = host_header.rsplit(":", 1)[0]
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")


__all__ = [
    "IDLE_SECONDS",
    "MAX_ENTRIES",
    "PROXY_COOKIE",
    "TICKET_PATH",
    "TICKET_SECONDS",
    "ProxyAuth",
    "proxy_origin",
]
