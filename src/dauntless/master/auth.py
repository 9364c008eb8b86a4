"""Authentication and authorization of every master route (docs/protocol.md,
"Authentication").

**Who calls.** Three kinds of callers (:class:`Principal`):

* *users*, with a bearer token from ``POST /api/v1/auth/login``, sent as
  ``Authorization: Bearer <token>`` or in the ``dauntless_token`` cookie (the WebUI and its
  ``EventSource`` streams, which cannot set headers);
* *agents*: the cluster secret (``X-Dauntless-Cluster-Secret``) registers an agent
  and nothing else; the registration returns a credential bound to the agent's id
  (``X-Dauntless-Agent-Token``, :mod:`dauntless.master.auth_agents`), and an agent
  may report only about the allocations placed on it;
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
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request
from sqlalchemy import delete, or_, select
from starlette.concurrency import run_in_threadpool

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_HEADER, COOKIE_NAME
from dauntless.config import MasterConfig

from .auth_access import ACCESS_ATTR as ACCESS_ATTR
from .auth_access import DEFAULT_ACCESS as DEFAULT_ACCESS
from .auth_access import Principal, forbidden, refusal_target, unauthorized
from .auth_access import access as access
from .auth_access import principal as principal
from .auth_access import require_own_trial as require_own_trial
from .auth_access import route_rule as route_rule
from .auth_agents import AgentCredentials
from .auth_csrf import check_csrf
from .auth_memory import MAX_REMEMBERED_TRIAL_TOKENS as MAX_REMEMBERED_TRIAL_TOKENS
from .auth_memory import TRIAL_TOKEN_REREAD_SECONDS as TRIAL_TOKEN_REREAD_SECONDS
from .auth_memory import RememberedUsers, drop_stale_trial_tokens, reread_trial_tokens
from .auth_secrets import CLUSTER_SECRET_FILE as CLUSTER_SECRET_FILE
from .auth_secrets import (
    hash_password,
    hash_token,
    load_cluster_secret,
    new_token,
    warm_empty_password,
)
from .auth_secrets import verify_password as verify_password
from .auth_throttle import LoginThrottle
from .authz import Authorizer
from .db import (
    ACCESS_TOKEN,
    USER_SESSION,
    AllocationRow,
    CheckpointRow,
    Database,
    TrialRow,
    UserRow,
    UserSessionRow,
)
from .db.changes import RowVersions, Version
from .models import users
from .permissions import Rule

log = logging.getLogger("dauntless.master.auth")

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

    Tokens due for a reread are read again together
    (:func:`~.auth_memory.reread_trial_tokens`).

    A user's token is remembered likewise (:class:`~.auth_memory.RememberedUsers`).

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
        self.agents = AgentCredentials(self.cluster_secret)
        self.throttle = LoginThrottle()
        self._allocation_versions = allocation_versions
        #: Bumped by :meth:`note_revoked`; streams compare it between polls.
        self.revocations = 0
        self._revocation_lock = threading.Lock()
        # token digest -> (principal, allocation group id, its version, monotonic time)
        self._trial_tokens: dict[str, tuple[Principal, str, Version, float]] = {}
        self._reread_lock = threading.Lock()  # one reread of the remembered at a time
        self._users = RememberedUsers(db, lambda: self.clock())

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
        stored: list[str | None] = []
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
                stored.append(user.password_hash)

        # The WebUI's silent sign-in on a first visit tries the empty password: know the
        # answer before it comes (one argon2 verification each, off the start's path).
        def warm() -> None:
            for h in [*stored, None]:
                warm_empty_password(h)

        threading.Thread(target=warm, name="warm-empty-password", daemon=True).start()

    # ------------------------------------------------------------------ sessions

    def create_session(self, user_id: int) -> str:
        """A new login token for ``user_id`` (expired sessions are purged on the way)."""
        token = new_token()
        now = self.clock()
        with self.db.write() as s:
            s.execute(  # ended sessions; access tokens stay listed (show_inactive)
                delete(UserSessionRow).where(
                    UserSessionRow.token_type == USER_SESSION,
                    or_(UserSessionRow.expires_at <= now, UserSessionRow.revoked.is_(True)),
                )
            )
            s.add(
                UserSessionRow(
                    user_id=user_id,
                    token_hash=hash_token(token),
                    created_at=now,
                    expires_at=now + self.token_lifespan,
                    token_type=USER_SESSION,
                )
            )
        return token

    def revoke_session(self, session_id: int) -> None:
        """End one login session (logout), or revoke the access token presented to logout."""
        with self.db.write() as s:
            users.revoke_token(s, session_id)
        self.note_revoked()

    def note_revoked(self) -> None:
        """Record that credentials were revoked (a token, a user's sessions, a user
        deactivated), after the transaction committed: open event streams check their
        caller's credential again at once (:attr:`revocations`)."""
        with self._revocation_lock:
            self.revocations += 1

    def revoke_user_sessions(self, s: Any, user_id: int) -> None:
        """End every session of a user, inside the caller's write session ``s``."""
        users.revoke_sessions(s, user_id)

    # ------------------------------------------------------------------ identify

    def identify_without_db(self, request: Request) -> Principal | None:
        """The caller of ``request`` when no database read is needed to know it: the
        cluster secret, an agent whose credential is remembered, or a trial whose
        session token is remembered (see the class); None otherwise (:meth:`identify`
        reads the database).

        Raises:
            HTTPException: 401 for a wrong cluster secret, a malformed Authorization
                header or no credential at all.
        """
        secret = request.headers.get(CLUSTER_SECRET_HEADER)
        if secret is not None:
            if hmac.compare_digest(secret.encode(), self.cluster_secret.encode()):
                return Principal(kind="agent")
            raise unauthorized("the cluster secret is wrong (agents: check --cluster-secret-file)")
        agent_token = request.headers.get(AGENT_TOKEN_HEADER)
        if agent_token is not None:
            return self.agents.identify_cached(agent_token)
        digest = hash_token(self._token(request))
        remembered = self._trial_tokens.get(digest)
        versions = self._allocation_versions
        if remembered is not None and versions is not None:
            who, group, version, read_at = remembered
            if versions.version(group) != version:
                self._trial_tokens.pop(digest, None)
            elif time.monotonic() - read_at < TRIAL_TOKEN_REREAD_SECONDS:
                return who
            else:  # kept for :meth:`identify`'s reread of it and its peers
                return None
        return self._users.get(digest, self.revocations)

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
        agent_token = request.headers.get(AGENT_TOKEN_HEADER)
        if agent_token is not None:
            with self.db.read() as s:
                return self.agents.identify(s, agent_token)
        digest = hash_token(self._token(request))
        versions = self._allocation_versions
        if versions is not None and reread_trial_tokens(
            self.db, self._trial_tokens, versions, digest, self._reread_lock
        ):
            who = self.identify_without_db(request)
            if who is not None:
                return who
        changes_before = versions.total() if versions is not None else None
        # Read before the rows: a change committed during the read voids what is kept.
        stamp = self._users.stamp(self.revocations)
        with self.db.read() as s:
            row = s.execute(
                select(UserSessionRow, UserRow)
                .join(UserRow, UserRow.id == UserSessionRow.user_id)
                .where(UserSessionRow.token_hash == digest)
            ).first()
            if row is not None:
                session, user = row
                what = "access token" if session.token_type == ACCESS_TOKEN else "token"
                if session.revoked:
                    raise unauthorized(f"the {what} (id {session.id}) has been revoked")
                if session.expires_at <= self.clock():
                    raise unauthorized(f"the {what} has expired; sign in again")
                if not user.active:
                    raise unauthorized(f"user {user.username} is deactivated")
                who = Principal(
                    kind="user",
                    user_id=user.id,
                    username=user.username,
                    admin=user.admin,
                    session_id=session.id,
                    token_kind=session.token_type,
                    expires_at=session.expires_at,
                )
                self._users.remember(digest, who, stamp)
                return who
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
                        now, tokens = time.monotonic(), self._trial_tokens
                        drop_stale_trial_tokens(
                            tokens, now, TRIAL_TOKEN_REREAD_SECONDS, MAX_REMEMBERED_TRIAL_TOKENS
                        )
                        tokens[digest] = (who, alloc.group_id, version, now)
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
        if who.kind == "agent":
            if who.agent_id is None:  # the cluster secret itself
                if rule.secret:
                    return
                if rule.agent:
                    raise forbidden(
                        f"the cluster secret only registers agents; {refusal_target(request)} needs "
                        "the credential the agent's registration returned "
                        "(X-Dauntless-Agent-Token)"
                    )
            elif rule.agent:
                return
            raise forbidden(f"agents may not call {refusal_target(request)}; users sign in instead")
        if who.kind == "trial":
            if rule.trial == "route":
                return
            if rule.trial == "own":
                params = {k: str(v) for k, v in request.path_params.items()}
                self._check_own(who, params, refusal_target(request))
                return
            raise forbidden(
                "a trial's session token may call only its own trial's routes, not "
                f"{refusal_target(request)}"
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


AUTHENTICATED_PREFIXES = ("/api/", "/prom/", "/debug/")
"""Routes under these paths need a credential unless their row is open: the REST API
and the Prometheus pages (issue 34); the WebUI's pages and files need none."""


async def authenticate(request: Request) -> Principal | None:
    """The application-wide dependency: identify the caller and apply the route's rule.

    Returns:
        The caller (also left in ``request.state.principal``), or None for a route that
        needs no credential (an open route, the WebUI's pages and files).

    Raises:
        HTTPException: 401 without a valid credential, 403 when the rule refuses or a
            state-changing request authenticated by the session cookie lacks its CSRF
            token (:mod:`dauntless.master.auth_csrf`).
    """
    route = request.scope.get("route")
    path = getattr(route, "path", "") or ""
    rule = route_rule(request.method, path, getattr(route, "endpoint", None))
    if rule.open or not path.startswith(AUTHENTICATED_PREFIXES):
        request.state.principal = None
        return None
    service: AuthService = request.app.state.auth
    # Agents and trials whose token is remembered pass here, on the event loop; only
    # what needs the database (users, a first trial request, a checkpoint's owner)
    # goes to a worker thread: one thread hop per request fewer (issue 19).
    who = service.identify_without_db(request)
    if who is None or "uuid" in request.path_params or _rule_reads_db(who, rule):
        return await run_in_threadpool(_identify_and_authorize, service, rule, request)
    request.state.principal = who
    check_csrf(request, request.method)
    service.authorize(who, rule, request)
    return who


def _rule_reads_db(who: Principal, rule: Rule) -> bool:
    """Whether checking ``rule`` for ``who`` may read the database (a user's grants)."""
    return who.kind == "user" and not (who.admin or rule.on in ("any", "body", "list"))


def _identify_and_authorize(service: AuthService, rule: Rule, request: Request) -> Principal:
    who = service.identify(request)
    request.state.principal = who
    check_csrf(request, request.method)  # a cookie's state change: 403 without its token
    service.authorize(who, rule, request)
    return who
