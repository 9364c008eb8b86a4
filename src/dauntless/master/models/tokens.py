"""Access tokens and login sessions as objects to list and edit (``/api/v1/tokens``).

Both are rows of ``user_sessions`` (:class:`~dauntless.master.db.UserSessionRow`), told
apart by ``token_type``; the tokens themselves are never stored, only their SHA-256.
Checking a presented token is :meth:`dauntless.master.auth.AuthService.identify`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from ..db import ACCESS_TOKEN, UserRow, UserSessionRow
from ..errors import NotFound

SORT_COLUMNS = {
    "ID": UserSessionRow.id,
    "USER_ID": UserSessionRow.user_id,
    "EXPIRY": UserSessionRow.expires_at,
    "CREATED_AT": UserSessionRow.created_at,
    "TOKEN_TYPE": UserSessionRow.token_type,
    "REVOKED": UserSessionRow.revoked,
    "DESCRIPTION": UserSessionRow.description,
}
"""What ``GET /tokens?sort_by=`` may name (Determined's ``SORT_BY_*`` without the
prefix; ``ID`` is the default)."""


@dataclass(frozen=True)
class TokenQuery:
    """A page of tokens to read (:func:`read_tokens`).

    Attributes:
        token_types: which kinds (``ACCESS_TOKEN``, ``USER_SESSION``).
        user_id: only this user's; None: everyone's.
        token_ids: only these ids; None: any.
        show_inactive: also revoked and expired tokens.
        now: seconds since the epoch (what "expired" means).
        sort_by: a key of :data:`SORT_COLUMNS`; ties broken by id.
        descending: newest/largest first.
        offset, limit: the page (``limit`` 0: every row from ``offset``).
    """

    token_types: Sequence[str]
    user_id: int | None
    token_ids: Sequence[int] | None
    show_inactive: bool
    now: float
    sort_by: str = "ID"
    descending: bool = False
    offset: int = 0
    limit: int = 0


def create_access_token(
    session: Session,
    user_id: int,
    token_hash: str,
    description: str | None,
    now: float,
    lifespan: float,
) -> UserSessionRow:
    """Store a new access token of ``user_id`` (its id assigned).

    Args:
        token_hash: the token's SHA-256 (:func:`dauntless.master.auth.hash_token`).
        description: free text ("CI of project X"), or None.
        now: seconds since the epoch (``created_at``).
        lifespan: seconds until it expires.

    Raises:
        NotFound: no such user.
    """
    if session.get(UserRow, user_id) is None:
        raise NotFound(f"user {user_id} not found")
    row = UserSessionRow(
        user_id=user_id,
        token_hash=token_hash,
        created_at=now,
        expires_at=now + lifespan,
        token_type=ACCESS_TOKEN,
        description=description,
        revoked=False,
    )
    session.add(row)
    session.flush()
    return row


def read_tokens(session: Session, q: TokenQuery) -> tuple[list[tuple[UserSessionRow, str]], int]:
    """A page of tokens with their users' names, and how many match in all.

    Raises:
        KeyError: ``q.sort_by`` is not in :data:`SORT_COLUMNS` (the route checks first).
    """
    where: list[ColumnElement[bool]] = [UserSessionRow.token_type.in_(list(q.token_types))]
    if q.user_id is not None:
        where.append(UserSessionRow.user_id == q.user_id)
    if q.token_ids is not None:
        where.append(UserSessionRow.id.in_(list(q.token_ids)))
    if not q.show_inactive:
        where.append(UserSessionRow.revoked.is_(False))
        where.append(UserSessionRow.expires_at > q.now)
    total = session.scalar(select(func.count()).select_from(UserSessionRow).where(*where)) or 0
    column = SORT_COLUMNS[q.sort_by]
    order = (
        [column.desc(), UserSessionRow.id.desc()] if q.descending else [column, UserSessionRow.id]
    )
    stmt = (
        select(UserSessionRow, UserRow.username)
        .join(UserRow, UserRow.id == UserSessionRow.user_id)
        .where(*where)
        .order_by(*order)
        .offset(q.offset)
    )
    if q.limit:
        stmt = stmt.limit(q.limit)
    return [(row, name) for row, name in session.execute(stmt)], total


def read_token(session: Session, token_id: int) -> tuple[UserSessionRow, str]:
    """One token (either kind) and its user's name.

    Raises:
        NotFound: no such token.
    """
    found = session.execute(
        select(UserSessionRow, UserRow.username)
        .join(UserRow, UserRow.id == UserSessionRow.user_id)
        .where(UserSessionRow.id == token_id)
    ).first()
    if found is None:
        raise NotFound(f"token with id {token_id} not found")
    return found[0], found[1]


def update_token(
    session: Session, token_id: int, description: str | None, set_description: bool, revoke: bool
) -> tuple[UserSessionRow, str]:
    """Set a token's description (with ``set_description``; "" or None clears it) and/or
    revoke it. Revocation is permanent: ``revoke`` False leaves it as it is.

    Raises:
        NotFound: no such token.
    """
    row, username = read_token(session, token_id)
    if set_description:
        row.description = description or None
    if revoke:
        row.revoked = True
    return row, username
