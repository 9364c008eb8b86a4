"""Users' tokens the master has read, remembered so that their next requests need no
database read (issue 34: a Prometheus scraper's requests authenticate on the event loop).

Used by :class:`dauntless.master.auth.AuthService`; what the route's rule checks still
runs on every request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .auth_access import Principal
from .db import Database, UserRow, UserSessionRow

USER_TOKEN_REREAD_SECONDS = 60.0
"""Seconds a remembered user token (login session or access token) is trusted without a
database read: the bound for changes no session of this master makes; the master's own
changes to users and tokens void it at once."""

MAX_REMEMBERED_USER_TOKENS = 10_000
"""User tokens remembered at most; past that the memory is cleared."""

Stamp = tuple[int, int]
"""(version of the users' change flag, count of revocations), read before a read."""


class RememberedUsers:
    """Principals of user tokens read from the database, by token digest.

    One is given back while the change flag over users and their tokens (ORM changes and
    bulk statements of this master: a logout, a revocation, a deactivated user, a new
    password or admin flag, an ended task's session) and the caller's count of
    revocations (``AuthService.note_revoked``) are as they were before its read, the
    token has not expired, and :data:`USER_TOKEN_REREAD_SECONDS` have not passed.

    Args:
        db: the master database.
        clock: seconds since the epoch (tokens' expiry).
    """

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self._changes = db.change_flag((UserRow, UserSessionRow), bulk=True)
        self._clock = clock
        self._lock = threading.Lock()
        # token digest -> (principal, stamp before its read, monotonic time of the read)
        self._tokens: dict[str, tuple[Principal, Stamp, float]] = {}

    def stamp(self, revocations: int) -> Stamp:
        """What to pass to :meth:`remember`: read it *before* reading the token's rows,
        so that a change committed during the read voids what is remembered."""
        return self._changes.version(), revocations

    def get(self, digest: str, revocations: int) -> Principal | None:
        """The principal remembered for ``digest`` while still valid (see the class)."""
        with self._lock:
            kept = self._tokens.get(digest)
        if kept is None:
            return None
        who, stamp, read_at = kept
        if (
            stamp == self.stamp(revocations)
            and time.monotonic() - read_at < USER_TOKEN_REREAD_SECONDS
            and (who.expires_at is None or who.expires_at > self._clock())
        ):
            return who
        with self._lock:
            self._tokens.pop(digest, None)
        return None

    def remember(self, digest: str, who: Principal, stamp: Stamp) -> None:
        """Remember ``who`` for the token of ``digest``, read after :meth:`stamp`."""
        with self._lock:
            if len(self._tokens) >= MAX_REMEMBERED_USER_TOKENS:
                self._tokens.clear()
            self._tokens[digest] = (who, stamp, time.monotonic())
