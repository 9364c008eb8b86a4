"""Answers of the user and sign-in routes."""

from __future__ import annotations

from pydantic import BaseModel

from ._base import _Open


class AgentUserGroupOut(_Open):
    """A user's link to a Unix identity (Determined's ``agent_user_group``); a field is
    None when unset (``security.default_task`` gives it)."""

    agent_uid: int | None
    agent_gid: int | None
    agent_user: str | None
    agent_group: str | None


class UserOut(_Open):
    """A user (never its password hash); ``modified_at`` in seconds since the epoch;
    ``agent_user_group`` None when the user has no link."""

    id: int
    username: str
    admin: bool
    active: bool
    display_name: str | None
    modified_at: float
    remote: bool = False
    agent_user_group: AgentUserGroupOut | None = None


class UserBody(BaseModel):
    user: UserOut


class UsersOut(BaseModel):
    """Every user; ``pagination`` is Determined's (one page of all)."""

    users: list[UserOut]
    pagination: dict[str, int] = {}


class LoginOut(BaseModel):
    """A new session: the bearer token (also set as a cookie), its user, and the CSRF
    token a cookie-authenticated state change must send (``X-CSRF-Token``)."""

    token: str
    user: UserOut
    csrf_token: str


class CsrfOut(BaseModel):
    """The CSRF token of the presented session (``X-CSRF-Token``)."""

    csrf_token: str
