"""Who made a request (:class:`Principal`), with the 401 and 403 answers of refusals.

What each route needs is its row of :data:`dauntless.master.permissions.ROUTES` (issue
30). :class:`Access` and :func:`access` are the older per-route form: a route still
marked ``@access(...)`` and without a row is checked by it (see
:func:`dauntless.master.auth.legacy_rule`) until it is moved into the table. The checks
themselves are in :mod:`dauntless.master.auth` and :mod:`dauntless.master.authz`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fastapi import HTTPException


@dataclass(frozen=True)
class Principal:
    """Who made a request.

    Attributes:
        kind: ``user``, ``agent`` or ``trial``.
        user_id, username, admin, session_id: for a user (``session_id`` is the login
            session the token belongs to).
        trial_id, experiment_id, allocation_id, part_id: for a trial: its trial and
            experiment, its allocation (``DET_ALLOCATION_ID``) and the part the token
            was made for.
        task_id: for a generic task's session token (kind ``trial``, no trial id): the
            task (commands, notebooks ...; :mod:`dauntless.master.tasks`).
    """

    kind: Literal["user", "agent", "trial"]
    user_id: int | None = None
    username: str | None = None
    admin: bool = False
    session_id: int | None = None
    trial_id: int | None = None
    experiment_id: int | None = None
    allocation_id: str | None = None
    part_id: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class Access:
    """Who may call a route (attach with :func:`access`).

    Attributes:
        open: no credential needed at all.
        users: which signed-in users: ``any``; ``owner`` (the owner of the experiment
            the path names, by ``exp_id``, ``trial_id`` or ``uuid``); ``admin``; or
            ``none``. Admins always pass.
        agent: whether the cluster secret (an agent) may call it.
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
