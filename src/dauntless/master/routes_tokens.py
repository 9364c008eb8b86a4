"""Access tokens under ``/api/v1`` (Determined's shapes, reference §2.7; docs/protocol.md,
"Access tokens").

| route | who | body / query | answer |
|---|---|---|---|
| ``POST /tokens`` | a signed-in user (not through an access token) for themselves; an admin for anyone | ``{user_id?, lifespan?, description?}`` | ``{"token", "token_id"}``: the token is shown once |
| ``GET /tokens`` | a user: their own; an admin: anyone's | ``sort_by, order_by, offset, limit, token_ids, username, show_inactive, token_type`` | ``{"token_info": [TokenInfo], "pagination"}`` |
| ``PATCH /tokens/{id}`` | the token's user, or an admin | ``{description?, set_revoked?}`` | ``{"token_info": TokenInfo}`` |

``TokenInfo = {id, user_id, username, expiry, created_at, token_type, revoked,
description}``; times are RFC 3339 (UTC), ``token_type`` is
``TOKEN_TYPE_ACCESS_TOKEN`` or ``TOKEN_TYPE_USER_SESSION``. ``GET /tokens`` lists access
tokens unless ``token_type`` names login sessions (``TOKEN_TYPE_USER_SESSION``) or
``TOKEN_TYPE_UNSPECIFIED`` (both), so that sessions and tokens are listed and revoked
apart. ``lifespan`` is a Go duration (``"720h"``) or ``"-1"`` for the longest allowed
(``security.token.max_lifespan_days``); without it ``default_lifespan_days``.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from dauntless.config import parse_go_duration

from . import authz
from .api_spec import INT32_MAX, DbId
from .audit_http import audit_note
from .auth import AuthService, forbidden, hash_token, principal
from .auth_secrets import new_token
from .db import ACCESS_TOKEN, USER_SESSION, UserSessionRow
from .errors import BadRequest
from .models import tokens, users
from .rbac import Perm
from .responses import tokens as R

router = APIRouter(prefix="/api/v1")

TOKEN_TYPES = {
    "TOKEN_TYPE_ACCESS_TOKEN": (ACCESS_TOKEN,),
    "TOKEN_TYPE_USER_SESSION": (USER_SESSION,),
    "TOKEN_TYPE_UNSPECIFIED": (ACCESS_TOKEN, USER_SESSION),
}


class CreateTokenBody(BaseModel):
    """Body of ``POST /tokens`` (Determined's PostAccessTokenRequest)."""

    model_config = ConfigDict(extra="forbid")

    user_id: int | None = Field(default=None, ge=1, le=INT32_MAX)
    lifespan: str | None = Field(default=None, max_length=64)
    description: str | None = Field(default=None, max_length=1024)


class PatchTokenBody(BaseModel):
    """Body of ``PATCH /tokens/{id}`` (Determined's PatchAccessTokenRequest)."""

    model_config = ConfigDict(extra="forbid")

    description: str | None = Field(default=None, max_length=1024)
    set_revoked: bool = False


def _auth(request: Request) -> AuthService:
    return request.app.state.auth


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC (``2026-11-27T09:00:00Z``)."""
    try:
        stamp = _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        stamp = _dt.datetime.max.replace(tzinfo=_dt.timezone.utc)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


def token_view(row: UserSessionRow, username: str) -> dict[str, Any]:
    """The ``TokenInfo`` of a token row (never its hash)."""
    return {
        "id": row.id,
        "user_id": row.user_id,
        "username": username,
        "expiry": rfc3339(row.expires_at),
        "created_at": rfc3339(row.created_at),
        "token_type": f"TOKEN_TYPE_{row.token_type}",
        "revoked": row.revoked,
        "description": row.description or "",
    }


def lifespan_seconds(auth: AuthService, text: str | None) -> float:
    """Seconds a new access token lives, from the request's ``lifespan``.

    Raises:
        BadRequest: not a Go duration or ``"-1"``; not positive; over the maximum.
    """
    token = auth.config.security.token
    if text is None or not text.strip():
        return token.default_access_lifespan
    if text.strip() == "-1":
        return token.max_access_lifespan
    try:
        seconds = parse_go_duration(text)
    except ValueError as exc:
        raise BadRequest(
            f"failed to parse lifespan: {exc}", [("lifespan", "a duration such as '720h'")]
        ) from None
    if seconds <= 0:
        raise BadRequest(
            f"lifespan must be positive, got {text!r}", [("lifespan", "must be positive")]
        )
    if seconds > token.max_access_lifespan:
        days = token.max_lifespan_days
        raise BadRequest(
            f"lifespan {text!r} is longer than the maximum of {days} days "
            "(security.token.max_lifespan_days)",
            [("lifespan", f"at most {days} days")],
        )
    return seconds


def _manages_users(request: Request) -> bool:
    """Whether the caller may act on other users' tokens: ADMINISTRATE_USER at cluster
    scope (what the admin role holds), as the permission table's comment says."""
    return authz.may(request, Perm.ADMINISTRATE_USER, [None])[0]


@router.post("/tokens", response_model=R.TokenCreated)
def create_token(body: CreateTokenBody, request: Request) -> dict[str, Any]:
    """Create an access token for yourself, or (admins) for ``user_id``. The token is in
    this answer only; the master keeps its SHA-256. An access token may not create
    another (sign in first), so that a leaked token cannot outlive its revocation."""
    who = principal(request)
    if who.token_kind == ACCESS_TOKEN:
        raise forbidden(
            "an access token may not create access tokens; sign in (`det user login` or "
            "single sign-on) and create it from that session"
        )
    user_id = body.user_id if body.user_id is not None else who.user_id or 0
    if user_id != who.user_id and not _manages_users(request):
        raise forbidden("only an admin may create access tokens for another user")
    auth = _auth(request)
    lifespan = lifespan_seconds(auth, body.lifespan)
    token = new_token()
    with auth.db.write() as s:
        target = users.read_user(s, user_id)
        row = tokens.create_access_token(
            s, user_id, hash_token(token), body.description or None, auth.clock(), lifespan
        )
        audit_note(request, target=f"token {row.id} of user {target.username}")
        return {"token": token, "token_id": row.id}


@router.get("/tokens", response_model=R.TokensOut)
def list_tokens(
    request: Request,
    sort_by: str = Query(
        "ID",
        max_length=40,
        description="ID, USER_ID, EXPIRY, CREATED_AT, "
        "TOKEN_TYPE, REVOKED or DESCRIPTION (a SORT_BY_ prefix is allowed)",
    ),
    order_by: str = Query("ORDER_BY_ASC", pattern="^(ORDER_BY_)?(ASC|DESC|UNSPECIFIED)$"),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: no limit"),
    token_ids: list[int] | None = Query(None, max_length=1000),
    username: str | None = Query(None, max_length=256),
    show_inactive: bool = Query(False, description="also revoked and expired tokens"),
    token_type: str = Query(
        "TOKEN_TYPE_ACCESS_TOKEN", pattern="^TOKEN_TYPE_(ACCESS_TOKEN|USER_SESSION|UNSPECIFIED)$"
    ),
) -> dict[str, Any]:
    """Tokens: your own, or (admins) everyone's or ``username``'s; access tokens unless
    ``token_type`` says otherwise."""
    who = principal(request)
    if token_ids is not None and any(not 0 <= i <= INT32_MAX for i in token_ids):
        raise BadRequest("token_ids must be ids (0 .. 2**31 - 1)", [("token_ids", "out of range")])
    key = sort_by.upper().removeprefix("SORT_BY_")
    key = "ID" if key == "UNSPECIFIED" else key
    if key not in tokens.SORT_COLUMNS:
        raise BadRequest(
            f"unknown sort_by {sort_by!r}; expected one of {', '.join(tokens.SORT_COLUMNS)}",
            [("sort_by", "unknown column")],
        )
    auth = _auth(request)
    with auth.db.read() as s:
        user_id: int | None = None
        if username is not None:  # an unknown name matches no token
            user_id = users.user_id(s, username) or -1
        if not _manages_users(request):
            if user_id is not None and user_id != who.user_id:
                raise forbidden("only an admin may list another user's tokens")
            user_id = who.user_id
        q = tokens.TokenQuery(
            token_types=TOKEN_TYPES[token_type],
            user_id=user_id,
            token_ids=token_ids,
            show_inactive=show_inactive,
            now=auth.clock(),
            sort_by=key,
            descending=order_by.endswith("DESC"),
            offset=offset,
            limit=limit,
        )
        rows, total = tokens.read_tokens(s, q)
    return {
        "token_info": [token_view(row, name) for row, name in rows],
        "pagination": {
            "offset": offset,
            "limit": limit,
            "start_index": min(offset, total),
            "end_index": min(offset + len(rows), total),
            "total": total,
        },
    }


@router.patch("/tokens/{token_id}", response_model=R.TokenInfoBody)
def patch_token(token_id: DbId, body: PatchTokenBody, request: Request) -> dict[str, Any]:
    """Set a token's description or revoke it (``set_revoked: true``; permanent): the
    token's user or an admin. A revoked token is refused at once, open event streams
    included."""
    who = principal(request)
    auth = _auth(request)
    with auth.db.write() as s:
        row, username = tokens.read_token(s, token_id)
        if row.user_id != who.user_id and not _manages_users(request):
            raise forbidden("only an admin may edit another user's token")
        row, username = tokens.update_token(
            s,
            token_id,
            body.description,
            "description" in body.model_fields_set,
            body.set_revoked,
        )
        view = token_view(row, username)
        kind = "token" if row.token_type == ACCESS_TOKEN else "login session"
        audit_note(request, target=f"{kind} {token_id} of user {username}")
    if body.set_revoked:
        auth.note_revoked()
    return {"token_info": view}


__all__ = ["router", "token_view"]
