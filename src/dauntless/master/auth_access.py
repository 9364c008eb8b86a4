"""Who made a request (:class:`Principal`), with the 401 and 403 answers of refusals.

What each route needs is its row of :data:`dauntless.master.permissions.ROUTES` (issue
30). :class:`Access` and :func:`access` are the older per-route form: a route still
marked ``@access(...)`` and without a row is checked by it (see
:func:`legacy_rule`) until it is moved into the table. The checks
themselves are in :mod:`dauntless.master.auth` and :mod:`dauntless.master.authz`; the
rule of a route (:func:`route_rule`) and the caller a route was reached by
(:func:`principal`) are here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fastapi import HTTPException, Request

from .permissions import Rule, rule_for


@dataclass(frozen=True)
class Principal:
    """Who made a request.

    Attributes:
        kind: ``user``, ``agent`` or ``trial``.
        user_id, username, admin, session_id: for a user (``session_id`` is the row of
            the token: a login session or an access token).
        token_kind: for a user: ``USER_SESSION`` (signed in) or ``ACCESS_TOKEN``.
        expires_at: for a user: when the token expires (seconds since the epoch); open
            event streams end then.
        trial_id, experiment_id, allocation_id, part_id: for a trial: its trial and
            experiment, its allocation (``DET_ALLOCATION_ID``) and the part the token
            was made for.
        task_id: for a generic task's session token (kind ``trial``, no trial id): the
            task (commands, notebooks ...; :mod:`dauntless.master.models.tasks`).
        agent_id: for an agent: the agent its credential is bound to; None for the
            cluster secret itself, which only registers agents. A Slurm job's part
            credential also sets ``part_id``: it speaks for that part only.
    """

    kind: Literal["user", "agent", "trial"]
    user_id: int | None = None
    username: str | None = None
    admin: bool = False
    session_id: int | None = None
    token_kind: str | None = None
    expires_at: float | None = None
    trial_id: int | None = None
    experiment_id: int | None = None
    allocation_id: str | None = None
    part_id: str | None = None
    task_id: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True)
class Access:
    """Who may call a route (attach with :func:`access`).

    Attributes:
        open: no credential needed at all.
        users: which signed-in users: ``any``; ``owner`` (the owner of the experiment
            the path names, by ``exp_id``, ``trial_id`` or ``uuid``); ``admin``; or
            ``none``. Admins always pass.
        agent: whether an agent (the credential its registration returned) may call it;
            the route then checks that what it reports about is the agent's own.
        secret: whether the cluster secret itself may call it (registering an agent,
            listing agents): every other agent call needs the agent's credential.
        trial: whether a trial's session token may call it: ``none``; ``own`` (every
            one of the path's ``trial_id``, ``allocation_id``, ``exp_id`` and ``uuid``
            must be the trial's own; a path with none of them is refused); ``route``
            (the route checks the body with :func:`require_own_trial`).
        what: what the rule protects, for refusals (``"pause it"``, ``"manage
            agents"``); may name path parameters (``"{action} it"``).
    """

    open: bool = False
    users: Literal["any", "owner", "admin", "none"] = "any"
    agent: bool = False
    secret: bool = False
    trial: Literal["none", "own", "route"] = "none"
    what: str = ""


DEFAULT_ACCESS = Access()
"""The rule of a route that declares none: any signed-in user."""

ACCESS_ATTR = "__dauntless_access__"

F = TypeVar("F", bound=Callable[..., Any])


def access(**rule: Any) -> Callable[[F], F]:
    """Declare a route's :class:`Access` rule. Put it *below* the ``@router.get(...)``
    line, so that it marks the function before the router registers it."""
    value = Access(**rule)

    def mark(fn: F) -> F:
        setattr(fn, ACCESS_ATTR, value)
        return fn

    return mark


def route_access(endpoint: Any) -> Access:
    """The rule of a route's endpoint (:data:`DEFAULT_ACCESS` when it declares none)."""
    return getattr(endpoint, ACCESS_ATTR, DEFAULT_ACCESS)


def unauthorized(detail: str) -> HTTPException:
    """A 401 answer asking for a bearer token."""
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


def forbidden(detail: str) -> HTTPException:
    """A 403 answer naming the rule that refused."""
    return HTTPException(403, detail)


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
        secret=old.secret,
        trial=old.trial,
        what=old.what,
    )


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


def refusal_target(request: Request) -> str:
    """``METHOD /route/template`` of ``request`` (its path when no route matched), as
    refusals name it; built only when refusing (issue 37: the URL it may parse was a
    few percent of an agent heartbeat's CPU)."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return f"{request.method} {path if path is not None else request.url.path}"
