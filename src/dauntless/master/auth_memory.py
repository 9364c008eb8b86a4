"""Users' tokens the master has read, remembered so that their next requests need no
database read (issue 34: a Prometheus scraper's requests authenticate on the event loop).

Used by :class:`dauntless.master.auth.AuthService`; what the route's rule checks still
runs on every request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from .auth_access import Principal
from .db import AllocationRow, Database, UserRow, UserSessionRow
from .db.changes import RowVersions

USER_TOKEN_REREAD_SECONDS = 60.0
"""Seconds a remembered user token (login session or access token) is trusted without a
database read: the bound for changes no session of this master makes; the master's own
changes to users and tokens void it at once."""

TRIAL_TOKEN_REREAD_SECONDS = 5.0
"""Seconds a remembered trial token is trusted without a database read (see
:class:`~dauntless.master.auth.AuthService`)."""

MAX_REMEMBERED_TRIAL_TOKENS = 2_048
"""Trial tokens remembered at most; past that the memory is cleared (live allocations'
tokens are the ones presented often; issue 37: 10,000 kept a large search in memory)."""

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


TRIAL_TOKENS_KEPT_STALE = 256
"""Remembered trial tokens above which :func:`drop_stale_trial_tokens` runs."""


def drop_stale_trial_tokens(
    tokens: dict[str, tuple[Any, ...]], now: float, max_age: float, max_items: int
) -> None:
    """Make room in the remembered trial tokens before one more is stored: when there
    are :data:`TRIAL_TOKENS_KEPT_STALE` or more, drop those remembered ``max_age``
    seconds or more before ``now`` (an entry's last item is when it was read, by
    ``time.monotonic()``), which the next use would read again from the database
    anyway; then clear them all if ``max_items`` are still kept.

    Why: the entries of ended trials stayed until the memory held ``max_items`` (issue
    37: 2,048 entries, 1.3 MB, nearly all of trials that had ended). Safe beside threads
    that store or drop entries: the entries are read from a copy, and an entry dropped
    by mistake is only read again.
    """
    if len(tokens) < TRIAL_TOKENS_KEPT_STALE:
        return
    for digest, entry in list(tokens.items()):
        if now - entry[-1] >= max_age:
            tokens.pop(digest, None)
    if len(tokens) >= max_items:
        tokens.clear()


def reread_trial_tokens(
    db: Database,
    tokens: dict[str, tuple[Any, ...]],
    versions: RowVersions,
    digest: str,
    lock: threading.Lock,
    max_age: float = TRIAL_TOKEN_REREAD_SECONDS,
) -> bool:
    """Read again, in one query, the remembered trial token ``digest`` and every other
    remembered trial token read ``max_age`` / 2 seconds ago or more.

    Why: trials started together are remembered together and come due together. Read
    one by one, 32 trials reporting metrics made 32 database reads (a thread hop and two
    queries each) in the same tenth of a second every 5 s, and the acknowledgements of
    that moment waited behind them (issue 37: the clusters of slow acknowledgements at
    100,000 metric values/s on PostgreSQL).

    An entry (``(principal, allocation group id, its version, read time)``, the read
    time by ``time.monotonic()``) is renewed, its read time set to this read's start,
    when its token still belongs to the same allocation part, that part has not ended,
    and the allocation's version is still the entry's after this read (a commit this
    read did not see is published after it, and voids the entry then). Every other
    entry read is dropped: its next request is read alone, which gives the exact
    refusal. No token is trusted longer than before: each entry still counts from a read
    that saw its allocation not ended, made less than ``max_age`` seconds ago.

    Args:
        db: the master database.
        tokens: the remembered trial tokens by :func:`~.auth_secrets.hash_token` digest.
        versions: the change counters of allocation rows by group id.
        digest: the digest of the token presented.
        lock: held for the reread: a request due meanwhile waits, then finds its
            entry renewed.
        max_age: seconds an entry is trusted without a read.

    Returns:
        Whether ``digest`` was remembered (the caller then looks at its entry again).
    """
    if digest not in tokens:
        return False
    with lock:
        started = time.monotonic()
        mine = tokens.get(digest)
        if mine is None or started - mine[-1] < max_age:
            return True  # dropped, or renewed by the reread this one waited for
        due = {d: entry for d, entry in list(tokens.items()) if started - entry[-1] >= max_age / 2}

        with db.read() as s:
            rows = s.execute(
                select(AllocationRow.token_hash, AllocationRow.id, AllocationRow.state).where(
                    AllocationRow.token_hash.in_(list(due))
                )
            ).all()
        found = {d: (part, state) for d, part, state in rows}
        for d, (who, group, version, _) in due.items():
            part, state = found.get(d, (None, None))
            if part != who.part_id or state == "TERMINATED" or versions.version(group) != version:
                tokens.pop(d, None)
            else:
                tokens[d] = (who, group, version, started)
    return True
