"""Answers of the access-token, single sign-on and audit routes (issue 30)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open
from .users import UserOut


class TokenCreated(BaseModel):
    """A new access token: shown once."""

    token: str
    token_id: int


class TokenInfo(_Open):
    """A token (never the token itself); times are RFC 3339, UTC."""

    id: int
    user_id: int
    username: str
    expiry: str
    created_at: str
    token_type: str
    revoked: bool
    description: str


class Pagination(BaseModel):
    """Determined's pagination: the page asked for and where it lies in ``total``."""

    offset: int
    limit: int
    start_index: int
    end_index: int
    total: int


class TokensOut(BaseModel):
    token_info: list[TokenInfo]
    pagination: Pagination


class TokenInfoBody(BaseModel):
    token_info: TokenInfo


class SsoProvider(BaseModel):
    """A single sign-on provider of ``GET /master``'s ``sso_providers``."""

    name: str
    sso_url: str
    type: str
    always_redirect: bool


class SsoExchangeOut(BaseModel):
    """A login session made by single sign-on for the CLI."""

    token: str
    user: UserOut


class SsoGroupsOut(BaseModel):
    """The groups the identity provider named at a user's latest single sign-on."""

    groups: list[str]


class AuditEntryOut(_Open):
    """One row of the audit trail; ``at`` in seconds since the epoch."""

    id: int
    at: float
    user_id: int | None
    username: str | None
    token_kind: str
    token_id: int | None
    method: str
    route: str
    action: str
    target: str | None
    status: int
    result: str
    client: str | None
    prev_hash: str
    hash: str


class AuditOut(BaseModel):
    entries: list[AuditEntryOut]
    pagination: Pagination


class AuditBreak(BaseModel):
    id: int
    problem: str


class AuditVerifyOut(BaseModel):
    """What ``GET /audit/verify`` found."""

    ok: bool
    rows: int
    first_id: int | None
    last_id: int | None
    checkpoint: dict[str, Any] | None
    breaks: list[AuditBreak]
    break_count: int
