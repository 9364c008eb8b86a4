"""Who made a request (:class:`Principal`) and who may call a route (:class:`Access`, set
with :func:`access`), with the 401 and 403 answers of refusals. The checks themselves are
in :mod:`dauntless.master.auth`.
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
        user_id, username, admin, session_id: for a user (``session_id`` is the row of
            the token: a login session or an access token).
        token_kind: for a user: ``USER_SESSION`` (signed in) or ``ACCESS_TOKEN``.
        expires_at: for a user: when the token expires (seconds since the epoch); open
            event streams end then.
        trial_id, experiment_id, allocation_id, part_id: for a trial: its trial and
            experiment, its allocation (``DET_ALLOCATION_ID``) and the part the token
            was made for.
        task_id: for a generic task's session token (kind ``trial``, no trial id): the
            task (commands, notebooks ...; :mod:`dauntless.master.tasks`).
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
