"""Experiment, trial and checkpoint states, and the transitions between them.

Transitions are declarative FROM -> TO sets (Determined's state machines, reference §7.1);
:func:`check_transition` accepts or rejects a change with a reason and does no I/O.
"""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    """States shared by experiments and trials (trials never use the DELETE* states)."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    DELETING = "DELETING"
    DELETED = "DELETED"
    DELETE_FAILED = "DELETE_FAILED"


class CheckpointState(str, Enum):
    """States of a checkpoint record."""

    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    DELETED = "DELETED"


TERMINAL = frozenset({State.COMPLETED, State.CANCELED, State.ERROR})
STOPPING = frozenset(
    {
        State.STOPPING_COMPLETED,
        State.STOPPING_CANCELED,
        State.STOPPING_KILLED,
        State.STOPPING_ERROR,
    }
)
_RUNNABLE = frozenset({State.ACTIVE, State.PAUSED})
_ANY_STOP = STOPPING | {State.ERROR}

EXPERIMENT_TRANSITIONS: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.PAUSED, State.COMPLETED}) | _ANY_STOP,
    State.PAUSED: frozenset({State.ACTIVE}) | _ANY_STOP,
    State.STOPPING_CANCELED: frozenset(
        {State.CANCELED, State.STOPPING_KILLED, State.STOPPING_ERROR, State.ERROR}
    ),
    State.STOPPING_KILLED: frozenset({State.CANCELED, State.STOPPING_ERROR, State.ERROR}),
    State.STOPPING_COMPLETED: frozenset({State.COMPLETED, State.STOPPING_ERROR, State.ERROR}),
    State.STOPPING_ERROR: frozenset({State.ACTIVE, State.ERROR}),
    State.COMPLETED: frozenset({State.DELETING}),
    State.CANCELED: frozenset({State.DELETING}),
    State.ERROR: frozenset({State.DELETING}),
    State.DELETING: frozenset({State.DELETED, State.DELETE_FAILED}),
    State.DELETE_FAILED: frozenset({State.DELETING}),
    State.DELETED: frozenset(),
}

TRIAL_TRANSITIONS: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.PAUSED, State.COMPLETED}) | _ANY_STOP,
    State.PAUSED: frozenset({State.ACTIVE}) | _ANY_STOP,
    State.STOPPING_CANCELED: frozenset(
        {State.CANCELED, State.STOPPING_KILLED, State.STOPPING_ERROR, State.ERROR}
    ),
    State.STOPPING_KILLED: frozenset({State.CANCELED, State.STOPPING_ERROR, State.ERROR}),
    State.STOPPING_COMPLETED: frozenset(
        {State.COMPLETED, State.STOPPING_KILLED, State.STOPPING_ERROR, State.ERROR}
    ),
    State.STOPPING_ERROR: frozenset({State.ERROR}),
    State.COMPLETED: frozenset({State.ACTIVE}),
    State.CANCELED: frozenset({State.ACTIVE}),
    State.ERROR: frozenset({State.ACTIVE}),
}


class IllegalTransition(Exception):
    """A state change the rules forbid. The API answers it with 409.

    Attributes:
        current: the state the object is in.
        requested: the state that was asked for.
        allowed: the states reachable from ``current``.
    """

    def __init__(self, kind: str, current: State, requested: State, allowed: frozenset[State]):
        self.kind = kind
        self.current = current
        self.requested = requested
        self.allowed = allowed
        allowed_txt = ", ".join(sorted(s.value for s in allowed)) or "none (final state)"
        super().__init__(
            f"{kind} is {current.value}; it cannot become {requested.value} "
            f"(allowed from {current.value}: {allowed_txt})"
        )


def check_transition(kind: str, current: State | str, requested: State | str) -> None:
    """Accept a transition or raise :class:`IllegalTransition`.

    Args:
        kind: ``"experiment"`` or ``"trial"``.
        current: the present state.
        requested: the wanted state; staying in the same state is always accepted.

    Raises:
        IllegalTransition: when ``requested`` is not reachable from ``current``.
        ValueError: for an unknown ``kind`` or state name.
    """
    table = {"experiment": EXPERIMENT_TRANSITIONS, "trial": TRIAL_TRANSITIONS}.get(kind)
    if table is None:
        raise ValueError(f"kind must be 'experiment' or 'trial', got {kind!r}")
    cur, req = State(current), State(requested)
    if cur == req:
        return
    allowed = table.get(cur, frozenset())
    if req not in allowed:
        raise IllegalTransition(kind, cur, req, allowed)


def is_terminal(state: State | str) -> bool:
    """True for COMPLETED, CANCELED and ERROR (and the deleting states)."""
    s = State(state)
    return s in TERMINAL or s in (State.DELETING, State.DELETED, State.DELETE_FAILED)
