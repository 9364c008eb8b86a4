"""States, constants and errors of generic tasks (:mod:`dauntless.master.models.tasks`): the
declarative state machine (:data:`TASK_TRANSITIONS`, :func:`check_task_transition`), the
service types, default slots and scheduler request prefix, and the 404 and 409 errors.
"""

from __future__ import annotations

from enum import Enum


class TaskState(str, Enum):
    """States of a generic task."""

    QUEUED = "QUEUED"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    CANCELED = "CANCELED"


TASK_TERMINAL = frozenset({TaskState.COMPLETED, TaskState.ERROR, TaskState.CANCELED})

TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.QUEUED: frozenset({TaskState.ASSIGNED, TaskState.CANCELED, TaskState.ERROR}),
    TaskState.ASSIGNED: frozenset(
        {TaskState.RUNNING, TaskState.TERMINATING, TaskState.CANCELED, TaskState.ERROR}
    ),
    TaskState.RUNNING: frozenset(
        {TaskState.TERMINATING, TaskState.COMPLETED, TaskState.ERROR, TaskState.CANCELED}
    ),
    TaskState.TERMINATING: frozenset({TaskState.CANCELED, TaskState.ERROR, TaskState.COMPLETED}),
    TaskState.COMPLETED: frozenset(),
    TaskState.ERROR: frozenset(),
    TaskState.CANCELED: frozenset(),
}

SERVICE_TYPES = frozenset({"NOTEBOOK", "SHELL", "TENSORBOARD"})
"""Task types that serve HTTP/WebSocket through the proxy."""

DEFAULT_SLOTS = {"COMMAND": 1, "NOTEBOOK": 1, "SHELL": 1, "TENSORBOARD": 0}
"""``resources.slots`` when the config names none (Determined: TensorBoards take none)."""

REQUEST_PREFIX = "task:"
"""Scheduler request ids of tasks are ``task:<id>`` (trials' are their ids)."""

EXTRAS = {"NOTEBOOK": "notebook", "TENSORBOARD": "tensorboard"}
"""The optional extra of ``dauntless`` each service needs in the agent's environment."""


class NotFound(LookupError):
    """No such task (404)."""


class TaskConflict(Exception):
    """A state change the task's state forbids (409)."""


def check_task_transition(current: str, requested: TaskState) -> None:
    """Accept a task state change or raise :class:`TaskConflict` naming what is allowed."""
    cur = TaskState(current)
    if cur == requested:
        return
    allowed = TASK_TRANSITIONS[cur]
    if requested not in allowed:
        names = ", ".join(sorted(s.value for s in allowed)) or "none (final state)"
        raise TaskConflict(
            f"task is {cur.value}; it cannot become {requested.value} (allowed: {names})"
        )
