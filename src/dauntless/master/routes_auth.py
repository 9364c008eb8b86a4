"""Login, logout and users under ``/api/v1`` (docs/protocol.md, "Authentication").

| route | who | body | answer |
|---|---|---|---|
| ``POST /auth/login`` | anyone | ``{username, password}`` | ``{"token", "user": User, "csrf_token"}`` and the ``dauntless_token`` cookie; 401 ``invalid username or password``; 403 deactivated; 429 after repeated failures |
| ``GET /auth/csrf`` | a user | | ``{"csrf_token"}``: the presented session's ``X-CSRF-Token`` |
| ``POST /auth/logout`` | a user | | ``{}``; the presented login session is revoked (an access token is not: ``PATCH /tokens/{id}``), the cookie cleared |
| ``GET /auth/user``, ``GET /me`` | a user | | ``{"user": User}`` |
| ``GET /users`` | a user | | ``{"users": [User]}`` |
| ``POST /users`` | ``ADMINISTRATE_USER`` (admins) | ``{username, password ("" allowed), admin, display_name?, remote?}`` | 201 ``{"user"}``; 409 if the name is taken; ``remote``: single sign-on only, no password |
| ``PATCH /users/{id}`` | ``ADMINISTRATE_USER``; the user itself for ``display_name`` | ``{active?, admin?, display_name?, agent_user_group?}`` | ``{"user"}``; ``agent_user_group`` (``ADMINISTRATE_USER`` only) links the user to a Unix identity, ``null`` unlinks |
| ``POST /users/{id}/password`` | the user itself, or ``ADMINISTRATE_USER`` | ``{password, old_password?}`` | ``{"user"}``; every login session of the user is revoked (access tokens stay); 400 for a remote user |

``User = {id, username, admin, active, display_name, modified_at, remote, agent_user_group}``. Passwords are taken
as :class:`pydantic.SecretStr`, so they never appear in a repr, a log line or an error.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from dauntless._auth import COOKIE_NAME
from dauntless.config import AgentUserGroup

from . import det_shapes
from . import responses as R
from .api_spec import DbId
from .audit_http import audit_note
from .auth import (
    AuthService,
    forbidden,
    hash_password,
    principal,
    unauthorized,
    verify_password,
)
from .auth_csrf import csrf_token
from .auth_secrets import needs_rehash
from .authz import may
from .db import ACCESS_TOKEN, UserRow
from .errors import BadRequest
from .models import users
from .rbac import Perm

router = APIRouter(prefix="/api/v1")

USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@+-]*$"
"""Usernames: letters, digits and ``_.@+-``, starting with a letter or digit."""

MAX_PASSWORD_LENGTH = 1024


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoginBody(_Body):
    """Determined's ``LoginRequest``: with ``isHashed`` the password is its client's
    pre-hash (:func:`dauntless.master.auth_secrets.det_prehash`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    username: str = Field(max_length=256)
    password: SecretStr = Field(max_length=MAX_PASSWORD_LENGTH)
    is_hashed: bool = Field(default=False, alias="isHashed")


class CreateUserBody(_Body):
    username: str = Field(min_length=1, max_length=128, pattern=USERNAME_PATTERN)
    password: SecretStr = Field(default=SecretStr(""), max_length=MAX_PASSWORD_LENGTH)
    admin: bool = False
    display_name: str | None = Field(default=None, max_length=256)
    remote: bool = False


class PatchUserBody(_Body):
    active: bool | None = None
    admin: bool | None = None
    display_name: str | None = Field(default=None, max_length=256)
    agent_user_group: AgentUserGroup | None = None
    """The user's Unix identity for tasks (Determined's field); ``null`` or ``{}`` unlinks."""


class PasswordBody(_Body):
    password: SecretStr = Field(max_length=MAX_PASSWORD_LENGTH)
    old_password: SecretStr | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)


def user_view(user: UserRow) -> dict[str, Any]:
    """The JSON of a user (never its password hash), with Determined's names of its
    fields beside Dauntless's (:func:`dauntless.master.det_shapes.user_fields`)."""
    link = users.agent_link(user)
    view = {
        "id": user.id,
        "username": user.username,
        "admin": user.admin,
        "active": user.active,
        "display_name": user.display_name,
        "modified_at": user.modified_at,
        "remote": user.remote,
        "agent_user_group": None if link is None else link.model_dump(),
    }
    # Determined's names of the same fields, for its own client (issue 33).
    return view | det_shapes.user_fields(view)


def _auth(request: Request) -> AuthService:
    return request.app.state.auth


# ---------------------------------------------------------------------- sessions


@router.post("/auth/login", response_model=R.LoginOut)
def login(body: LoginBody, request: Request) -> JSONResponse:
    """Sign in: a bearer token (also set as the ``dauntless_token`` cookie)."""
    auth = _auth(request)
    name = body.username
    wait = auth.throttle.wait_seconds(name)
    if wait > 0:
        seconds = int(wait) + 1
        return JSONResponse(
            status_code=429,
            headers={"Retry-After": str(seconds)},
            content={"detail": f"too many failed logins for {name!r}; try again in {seconds} s"},
        )
    audit_note(request, username=name[:256], target="password sign-in")
    with auth.db.read() as s:
        user = users.read_user_by_name(s, name)
    stored = user.password_hash if user else None
    password = body.password.get_secret_value()
    ok = verify_password(stored, password, is_hashed=body.is_hashed)
    if ok and user is not None and not body.is_hashed and needs_rehash(stored):
        # Re-hashed over Determined's pre-hash, so that its clients can sign in too.
        with auth.db.write() as s:
            users.upgrade_password_hash(s, user.id, stored or "", hash_password(password))
    if user is not None:
        audit_note(request, user_id=user.id)
    if user is None or not ok:
        auth.throttle.failed(name)
        raise unauthorized("invalid username or password")
    auth.throttle.succeeded(name)
    if not user.active:
        raise forbidden(f"user {name} is deactivated; an admin may activate it")
    token = auth.create_session(user.id)
    resp = JSONResponse({"token": token, "user": user_view(user), "csrf_token": csrf_token(token)})
    resp.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(auth.token_lifespan),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return resp


@router.post("/auth/logout", response_model=R.Empty)
def logout(request: Request) -> JSONResponse:
    """Revoke the presented token and clear the cookie."""
    who = principal(request)
    # An access token is revoked with `det token revoke`, not by signing out with it.
    if who.session_id is not None and who.token_kind != ACCESS_TOKEN:
        _auth(request).revoke_session(who.session_id)
    resp = JSONResponse({})
    resp.delete_cookie(
        COOKIE_NAME,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return resp


@router.get("/auth/csrf", response_model=R.CsrfOut)
def get_csrf(request: Request) -> dict[str, Any]:
    """The CSRF token of the presented session: what a state-changing request signed in
    by the session cookie sends as ``X-CSRF-Token`` (:mod:`dauntless.master.auth_csrf`).
    Pages of other origins cannot read it (the master answers no CORS request)."""
    who = principal(request)
    if who.kind != "user":
        raise forbidden("only a signed-in user's session has a CSRF token")
    return {"csrf_token": csrf_token(AuthService._token(request))}


def _me(request: Request) -> dict[str, Any]:
    who = principal(request)
    with _auth(request).db.read() as s:
        return {"user": user_view(users.read_user(s, who.user_id or 0))}


@router.get("/auth/user", response_model=R.UserBody)
def get_auth_user(request: Request) -> dict[str, Any]:
    """The signed-in user."""
    return _me(request)


@router.get("/me", response_model=R.UserBody)
def get_me(request: Request) -> dict[str, Any]:
    """The signed-in user (Determined's ``GET /api/v1/me``)."""
    return _me(request)


# ---------------------------------------------------------------------- users


@router.get("/users", response_model=R.UsersOut)
def list_users(request: Request) -> dict[str, Any]:
    """Every user, by id."""
    with _auth(request).db.read() as s:
        views = [user_view(u) for u in users.read_users(s)]
    # Determined's GetUsersResponse pages (its client requires ``pagination``): all in one.
    n = len(views)
    page = {"offset": 0, "limit": 0, "startIndex": 0, "endIndex": n, "total": n}
    return {"users": views, "pagination": page}


@router.post("/users", status_code=201, response_model=R.UserBody)
def create_user(body: CreateUserBody, request: Request) -> dict[str, Any]:
    """Create a user (admins only); 409 when the name is taken."""
    auth = _auth(request)
    if body.remote and body.password.get_secret_value():
        raise BadRequest(
            "a remote user signs in through single sign-on only and has no password",
            [("password", "must be empty for a remote user")],
        )
    hashed = None if body.remote else hash_password(body.password.get_secret_value())
    audit_note(request, target=f"user {body.username}")
    with auth.db.write() as s:
        user = users.create_user(
            s, body.username, hashed, body.admin, body.display_name, auth.clock(), body.remote
        )
        return {"user": user_view(user)}


@router.patch("/users/{user_id}", response_model=R.UserBody)
def patch_user(user_id: DbId, body: PatchUserBody, request: Request) -> dict[str, Any]:
    """Activate, deactivate, make or unmake admin (admins), link the user to a Unix
    identity for its tasks (admins), or set the display name (admins, or the user
    itself). Deactivating a user revokes its tokens; the last active admin cannot be
    deactivated or demoted (409)."""
    administrator = may(request, Perm.ADMINISTRATE_USER, [None])[0]
    # The table lets users edit themselves; these fields are for administrators.
    if not administrator and (body.active is not None or body.admin is not None):
        raise forbidden("only an admin may activate, deactivate or change admin rights")
    if not administrator and "agent_user_group" in body.model_fields_set:
        raise forbidden("only an admin may link a user to a Unix identity (agent_user_group)")
    auth = _auth(request)
    with auth.db.write() as s:
        user = users.update_user(
            s,
            user_id,
            auth.clock(),
            active=body.active,
            admin=body.admin,
            display_name=body.display_name,
            set_display_name="display_name" in body.model_fields_set,
            agent_user_group=body.agent_user_group,
            set_agent_user_group="agent_user_group" in body.model_fields_set,
        )
        view = user_view(user)
    if body.active is False:
        auth.note_revoked()  # open streams of the user end at once
    return {"user": view}


@router.post("/users/{user_id}/password", response_model=R.UserBody)
def set_password(user_id: DbId, body: PasswordBody, request: Request) -> dict[str, Any]:
    """Set a user's password (the user itself, or an admin for anyone) and revoke every
    login session of that user (the caller signs in again); access tokens stay.

    ``old_password`` is optional; when given it must be the current password (403),
    so a client can make a user confirm who they are.
    """
    auth = _auth(request)
    with auth.db.read() as s:
        target = users.read_user(s, user_id)
        current = target.password_hash
    if target.remote:
        raise BadRequest(
            f"user {target.username} signs in through single sign-on (remote) and has no password",
            [("password", "remote users have none")],
        )
    if body.old_password is not None and not verify_password(
        current, body.old_password.get_secret_value()
    ):
        raise forbidden("the old password is wrong")
    hashed = hash_password(body.password.get_secret_value())
    with auth.db.write() as s:
        user = users.set_password(s, user_id, hashed, auth.clock())
        view = user_view(user)
    auth.note_revoked()
    return {"user": view}


__all__ = ["router", "user_view"]
