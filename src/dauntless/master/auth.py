"""Authentication and authorization of every master route (docs/protocol.md,
"Authentication").

**Who calls.** Three kinds of callers (:class:`Principal`):

* *users*, with a bearer token from ``POST /api/v1/auth/login``, sent as
  ``Authorization: Bearer <token>`` or in the ``dauntless_token`` cookie (the WebUI and its
  ``EventSource`` streams, which cannot set headers);
* *agents*, with the cluster secret in the ``X-Dauntless-Cluster-Secret`` header (one
  secret for the cluster: agents are trusted machines, as in Determined, and an agent id
  proves nothing more);
* *trials*, with the session token their agent put in ``DET_SESSION_TOKEN``: one random
  token per allocation part, made when the part is handed to its agent.

**Where it is enforced.** :func:`authenticate` is a dependency of the whole application
(``FastAPI(dependencies=...)``), so every route, present or future, passes through it; a
route cannot be forgotten. Routes outside ``/api/`` (the WebUI's pages and files, which
hold no data) and the open rows of the permission table (login, ``GET /master``) need no
credential; FastAPI's own ``/docs`` and ``/openapi.json`` are not API routes and stay open,
as Determined's are (the API's shape is no secret). Everything else needs a credential
(401 otherwise, with ``WWW-Authenticate: Bearer``) and then passes the route's row of
:data:`dauntless.master.permissions.ROUTES` (403 naming what is needed otherwise; users'
permissions are :mod:`dauntless.master.authz`'s). A route without a row falls back on an
old-style ``@access(...)`` rule (:func:`legacy_rule`), else admits admins only
(:data:`UNDECLARED`).

**Storage.** Passwords are hashed with argon2id (argon2-cffi's defaults, RFC 9106's
low-memory profile; the encoded hash carries salt and parameters). Tokens are 256 random
bits (``secrets.token_urlsafe(32)``) stored only as their SHA-256: a slow, salted hash
exists to make *guessable* secrets costly to try, and a 256-bit random token cannot be
guessed, so one fast unsalted hash loses nothing, keeps a database leak from yielding
usable tokens, and lets a request find its session with one indexed lookup.

**Abuse.** :class:`LoginThrottle` slows repeated failed logins per username.

The hashes and tokens live in :mod:`dauntless.master.auth_secrets`, the principals and
access rules in :mod:`dauntless.master.auth_access`, the throttle in
:mod:`dauntless.master.auth_throttle`; this module imports them all, so they may still be
imported from here.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request
from sqlalchemy import delete, select
from starlette.concurrency import run_in_threadpool

from dauntless._auth import CLUSTER_SECRET_HEADER, COOKIE_NAME
from dauntless.config import MasterConfig

from .auth_access import ACCESS_ATTR as ACCESS_ATTR
from .auth_access import DEFAULT_ACCESS as DEFAULT_ACCESS
from .auth_access import Access, Principal, forbidden, route_access, unauthorized
from .auth_access import access as access
from .auth_secrets import CLUSTER_SECRET_FILE as CLUSTER_SECRET_FILE
from .auth_secrets import hash_password, hash_token, load_cluster_secret, new_token
from .auth_secrets import verify_password as verify_password
from .auth_throttle import LoginThrottle
from .authz import Authorizer
from .db import (
    AllocationRow,
    CheckpointRow,
    Database,
    TrialRow,
    UserRow,
    UserSessionRow,
)
from .db.changes import RowVersions, Version
from .models import users
from .permissions import Rule, rule_for

log = logging.getLogger("dauntless.master.auth")

TRIAL_TOKEN_REREAD_SECONDS = 5.0
"""Seconds a remembered trial token is trusted without a database read (see
:class:`AuthService`)."""

MAX_REMEMBERED_TRIAL_TOKENS = 10_000
"""Trial tokens remembered at most; past that the memory is cleared."""

BUILTIN_USERS = (("admin", True), ("determined", False))
"""The users every cluster starts with: (username, admin)."""

# ---------------------------------------------------------------------- the service


class AuthService:
    """Users, sessions and the checks behind :func:`authenticate`.

    A trial's session token, once looked up, is remembered with the version of its
    allocation's rows (``allocation_versions``, when given): its next requests need no
    database read until those rows change (an end voids the token at once) or
    :data:`TRIAL_TOKEN_REREAD_SECONDS` pass (changes the ORM does not see). A trivial
    trial makes about 6 requests (issue 19).

    Args:
        db: the master database (migrated before :meth:`bootstrap`).
        config: the master config (``security``).
        clock: seconds since the epoch (session expiry); tests may pass their own.
        allocation_versions: change counters of allocation rows by group id
            (``MasterContext.allocation_versions``); None: no remembering.
        authz: the permission checks of users (:mod:`dauntless.master.authz`); one of
            its own when None.
    """

    def __init__(
        self,
        db: Database,
        config: MasterConfig,
        clock: Callable[[], float] = time.time,
        allocation_versions: RowVersions | None = None,
        authz: Authorizer | None = None,
    ):
        self.db = db
        self.authz = authz or Authorizer(db, config)
        self.config = config
        self.clock = clock
        self.cluster_secret = load_cluster_secret(config)
        self.throttle = LoginThrottle()
        self._allocation_versions = allocation_versions
        # token digest -> (principal, allocation group id, its version, monotonic time)
        self._trial_tokens: dict[str, tuple[Principal, str, Version, float]] = {}

    @property
    def token_lifespan(self) -> float:
        """Seconds a login token is valid."""
        return self.config.security.token.max_lifespan

    def bootstrap(self) -> None:
        """Give the built-in users their first password (``initial_user_password``,
        else empty) where they have none yet, creating them if missing."""
        initial = self.config.security.initial_user_password
        password = initial.get_secret_value() if initial is not None else ""
        hashed: str | None = None
        with self.db.write() as s:
            for name, admin in BUILTIN_USERS:
                user = s.scalar(select(UserRow).where(UserRow.username == name))
                if user is None:
                    user = UserRow(
                        username=name, admin=admin, active=True, modified_at=self.clock()
                    )
                    s.add(user)
                if user.password_hash is None:
                    hashed = hashed or hash_password(password)
                    user.password_hash, user.modified_at = hashed, self.clock()
                    log.info(
                        "set the first password of built-in user %s (%s)",
                        name,
                        "from security.initial_user_password" if password else "empty",
                    )

    # ------------------------------------------------------------------ sessions

    def create_session(self, user_id: int) -> str:
        """A new login token for ``user_id`` (expired sessions are purged on the way)."""
        token = new_token()
        now = self.clock()
        with self.db.write() as s:
            s.execute(delete(UserSessionRow).where(UserSessionRow.expires_at <= now))
            s.add(
                UserSessionRow(
                    user_id=user_id,
                    token_hash=hash_token(token),
                    created_at=now,
                    expires_at=now + self.token_lifespan,
                )
            )
        return token

    def revoke_session(self, session_id: int) -> None:
        """End one login session (logout)."""
        with self.db.write() as s:
            s.execute(delete(UserSessionRow).where(UserSessionRow.id == session_id))

    def revoke_user_sessions(self, s: Any, user_id: int) -> None:
        """End every session of a user, inside the caller's write session ``s``."""
        users.revoke_sessions(s, user_id)

    # ------------------------------------------------------------------ identify

    def identify_without_db(self, request: Request) -> Principal | None:
        """The caller of ``request`` when no database read is needed to know it: an
        agent (the cluster secret) or a trial whose session token is remembered (see
        the class); None otherwise (:meth:`identify` reads the database).

        Raises:
            HTTPException: 401 for a wrong cluster secret, a malformed Authorization
                header or no credential at all.
        """
        secret = request.headers.get(CLUSTER_SECRET_HEADER)
        if secret is not None:
            if hmac.compare_digest(secret.encode(), self.cluster_secret.encode()):
                return Principal(kind="agent")
            raise unauthorized("the cluster secret is wrong (agents: check --cluster-secret-file)")
        digest = hash_token(self._token(request))
        remembered = self._trial_tokens.get(digest)
        versions = self._allocation_versions
        if remembered is not None and versions is not None:
            who, group, version, read_at = remembered
            if (
                versions.version(group) == version
                and time.monotonic() - read_at < TRIAL_TOKEN_REREAD_SECONDS
            ):
                return who
            self._trial_tokens.pop(digest, None)
        return None

    @staticmethod
    def _token(request: Request) -> str:
        """The bearer token (header, else cookie) of ``request``.

        Raises:
            HTTPException: 401 for a malformed Authorization header or no token.
        """
        token = None
        header = request.headers.get("authorization")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise unauthorized("the Authorization header must be 'Bearer <token>'")
            token = value.strip()
        else:
            token = request.cookies.get(COOKIE_NAME) or None
        if token is None:
            raise unauthorized(
                "authentication required: sign in (POST /api/v1/auth/login, or `det user "
                "login`) and send the token as 'Authorization: Bearer <token>'"
            )
        return token

    def identify(self, request: Request) -> Principal:
        """The caller of ``request``.

        Raises:
            HTTPException: 401 for no credential or an invalid, expired or revoked one.
        """
        who = self.identify_without_db(request)
        if who is not None:
            return who
        digest = hash_token(self._token(request))
        versions = self._allocation_versions
        changes_before = versions.total() if versions is not None else None
        with self.db.read() as s:
            row = s.execute(
                select(UserSessionRow, UserRow)
                .join(UserRow, UserRow.id == UserSessionRow.user_id)
                .where(UserSessionRow.token_hash == digest)
            ).first()
            if row is not None:
                session, user = row
                if session.expires_at <= self.clock():
                    raise unauthorized("the token has expired; sign in again")
                if not user.active:
                    raise unauthorized(f"user {user.username} is deactivated")
                return Principal(
                    kind="user",
                    user_id=user.id,
                    username=user.username,
                    admin=user.admin,
                    session_id=session.id,
                )
            part = s.execute(
                select(AllocationRow, TrialRow.experiment_id)
                .join(TrialRow, TrialRow.id == AllocationRow.trial_id)
                .where(AllocationRow.token_hash == digest)
            ).first()
            if part is not None:
                alloc, exp_id = part
                if alloc.state == "TERMINATED":
                    raise unauthorized(f"allocation {alloc.id} has ended; its token is void")
                who = Principal(
                    kind="trial",
                    trial_id=alloc.trial_id,
                    experiment_id=exp_id,
                    allocation_id=alloc.group_id,
                    part_id=alloc.id,
                )
                if versions is not None:
                    # Remembered only when no allocation commit was published during
                    # the read: the version read now is then the one the read saw.
                    version = versions.version(alloc.group_id)
                    if versions.total() == changes_before:
                        if len(self._trial_tokens) >= MAX_REMEMBERED_TRIAL_TOKENS:
                            self._trial_tokens.clear()
                        self._trial_tokens[digest] = (
                            who,
                            alloc.group_id,
                            version,
                            time.monotonic(),
                        )
                return who
            task_alloc = s.scalar(
                select(AllocationRow).where(
                    AllocationRow.token_hash == digest, AllocationRow.task_id.is_not(None)
                )
            )
            if task_alloc is not None:  # a command's, notebook's ... own token
                if task_alloc.state == "TERMINATED":
                    raise unauthorized(f"allocation {task_alloc.id} has ended; its token is void")
                return Principal(
                    kind="trial",
                    allocation_id=task_alloc.group_id,
                    part_id=task_alloc.id,
                    task_id=task_alloc.task_id,
                )
        raise unauthorized("the token is invalid, expired or revoked; sign in again")

    # ------------------------------------------------------------------ authorize

    def authorize(self, who: Principal, rule: Rule, request: Request) -> None:
        """Check ``rule`` (the route's row of :data:`dauntless.master.permissions.ROUTES`)
        for ``who`` calling ``request``'s route; users' permissions are
        :class:`~dauntless.master.authz.Authorizer`'s.

        Raises:
            HTTPException: 403 naming what is needed.
        """
        route = request.scope.get("route")
        target = f"{request.method} {getattr(route, 'path', request.url.path)}"
        params = {k: str(v) for k, v in request.path_params.items()}
        if who.kind == "agent":
            if rule.agent:
                return
            raise forbidden(
                f"agents (the cluster secret) may not call {target}; users sign in instead"
            )
        if who.kind == "trial":
            if rule.trial == "route":
                return
            if rule.trial == "own":
                self._check_own(who, params, target)
                return
            raise forbidden(
                f"a trial's session token may call only its own trial's routes, not {target}"
            )
        self.authz.check(who, rule, request)

    def _check_own(self, who: Principal, params: dict[str, str], target: str) -> None:
        refuse = forbidden(
            f"a trial's session token may reach only its own trial (trial {who.trial_id}, "
            f"allocation {who.allocation_id}, experiment {who.experiment_id}), not {target}"
        )
        checked = False
        if "trial_id" in params:
            checked = True
            if _int(params["trial_id"]) != who.trial_id:
                raise refuse
        if "allocation_id" in params:
            checked = True
            if params["allocation_id"] not in (who.allocation_id, who.part_id):
                raise refuse
        if "exp_id" in params:
            checked = True
            if _int(params["exp_id"]) != who.experiment_id:
                raise refuse
        if "uuid" in params:
            checked = True
            with self.db.read() as s:
                ckpt = s.get(CheckpointRow, params["uuid"])
            if ckpt is not None and ckpt.experiment_id != who.experiment_id:
                raise refuse
        if not checked:
            raise refuse


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# ---------------------------------------------------------------------- dependencies


async def authenticate(request: Request) -> Principal | None:
    """The application-wide dependency: identify the caller and apply the route's rule.

    Returns:
        The caller (also left in ``request.state.principal``), or None for a route that
        needs no credential (an open route, the WebUI's pages and files).

    Raises:
        HTTPException: 401 without a valid credential, 403 when the rule refuses.
    """
    route = request.scope.get("route")
    path = getattr(route, "path", "") or ""
    rule = route_rule(request.method, path, getattr(route, "endpoint", None))
    if rule.open or not path.startswith("/api/"):
        request.state.principal = None
        return None
    service: AuthService = request.app.state.auth
    # Agents and trials whose token is remembered pass here, on the event loop; only
    # what needs the database (users, a first trial request, a checkpoint's owner)
    # goes to a worker thread: one thread hop per request fewer (issue 19).
    who = service.identify_without_db(request)
    if who is None or "uuid" in request.path_params:
        return await run_in_threadpool(_identify_and_authorize, service, rule, request)
    request.state.principal = who
    service.authorize(who, rule, request)
    return who


def route_rule(method: str, path: str, endpoint: Any) -> Rule:
    """The rule of a route: its row of the permission table; else, for a route not yet
    moved there, its old ``@access(...)`` rule (:func:`legacy_rule`); else a rule no
    user passes (a route nobody declared is refused, never open)."""
    rule = rule_for(method, path)
    if rule is not None:
        return rule
    if hasattr(endpoint, ACCESS_ATTR):
        return legacy_rule(route_access(endpoint))
    return UNDECLARED


UNDECLARED = Rule(on="admin", what="call a route that declares no permission")
"""The rule of a route in neither the table nor ``@access``: admins only."""


def legacy_rule(old: Access) -> Rule:
    """An ``@access(...)`` rule as a table :class:`Rule`: ``users="any"`` is any signed-in
    user; ``admin``, ``none`` and ``owner`` (which names no permission) are admins
    only."""
    return Rule(
        on="any" if old.users == "any" else "admin",
        open=old.open,
        agent=old.agent,
        trial=old.trial,
        what=old.what,
    )


def _identify_and_authorize(service: AuthService, rule: Rule, request: Request) -> Principal:
    who = service.identify(request)
    request.state.principal = who
    service.authorize(who, rule, request)
    return who


def principal(request: Request) -> Principal:
    """The caller :func:`authenticate` found (for routes that need more than the rule).

    Raises:
        HTTPException: 401 if the route was reached without a credential.
    """
    who = getattr(request.state, "principal", None)
    if who is None:
        raise unauthorized("authentication required")
    return who


def require_own_trial(request: Request, trial_id: int) -> None:
    """For routes with ``trial="route"``: a trial's token may name only its own trial
    (in the body); users pass only as admins.

    Raises:
        HTTPException: 403 otherwise.
    """
    who = principal(request)
    if who.kind == "trial":
        if who.trial_id != trial_id:
            raise forbidden(
                f"a trial's session token may report only for its own trial "
                f"({who.trial_id}), not trial {trial_id}"
            )
        return
    if who.kind == "user" and who.admin:
        return
    raise forbidden(
        f"only trial {trial_id}'s own task (its session token) or an admin may report for it"
    )
