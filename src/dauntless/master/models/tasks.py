"""Generic tasks: commands, notebooks, shells and TensorBoards (Determined's NTSC tasks).

A task is a row of ``tasks`` (:class:`~dauntless.master.db.TaskRow`): an id, a type, an
owner, a config (:class:`~dauntless.config._task.TaskConfig`), what to run and a state.
It runs like a trial: the scheduler of its resource pool places it (one request of
``resources.slots`` slots, 0 allowed, never preempted), an allocation row
(``allocations.task_id``) hands it to an agent in a heartbeat, its output is stored as
task logs and its exit ends it. Everything is in the database, so a master restart
finds every task as it was (queued tasks are placed again, running ones keep their
allocation).

States (declarative, :data:`~dauntless.master.task_states.TASK_TRANSITIONS`)::

    QUEUED -> ASSIGNED -> RUNNING -> COMPLETED | ERROR | CANCELED
                 \\-----------\\-> TERMINATING (a kill was ordered) -> CANCELED | ...

A kill of a queued task cancels it at once; of a running one it asks the agent to
stop the process (SIGTERM, then SIGKILL). An exit after a kill is CANCELED, exit code 0
COMPLETED, anything else (an unknown exit: the agent was lost) ERROR with the code and
message.

Notebooks, shells and TensorBoards are web services: their process
(:mod:`dauntless.exec.task_service`) starts the service on a free port of the agent
and reports its address to ``POST /tasks/{id}/service`` with the task's session token;
the master's proxy (:mod:`dauntless.master.proxy`) then forwards
``/proxy/<task id>/...`` to it.

Session-first model functions like the rest of :mod:`dauntless.master.models`: the
routes (:mod:`dauntless.master.routes_tasks`, the proxy) open the transaction and pass
its session first; nothing here opens one. This module creates, reads and kills tasks;
the scheduler's side (queued tasks, their requests, allocation, hand-over, exit, idle
timeouts) is :mod:`dauntless.master.models.task_runs`, the services' side (where a
service listens, the proxy's target, TensorBoards' sources and reuse)
:mod:`dauntless.master.models.task_services`; the states, constants and errors are
:mod:`dauntless.master.task_states`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dauntless.config import ConfigError
from dauntless.config._task import TASK_TYPES, TaskConfig, parse_task_config

from ..context import MasterContext
from ..db import (
    UNCATEGORIZED_ID,
    AllocationRow,
    TaskLogRow,
    TaskRow,
    UserRow,
)
from ..errors import MAX_CONTEXT_BYTES, BadRequest
from ..task_states import (
    DEFAULT_SLOTS,
    SERVICE_TYPES,
    TASK_TERMINAL,
    NotFound,
    TaskState,
    check_task_transition,
)
from . import pool_bindings, workspaces
from .task_runs import end_task
from .users import identity_refusals

log = logging.getLogger("dauntless.master.tasks")

_SERVICE_MODULE_ARG = {"NOTEBOOK": "notebook", "SHELL": "shell", "TENSORBOARD": "tensorboard"}


def _bad(field: str, message: str) -> BadRequest:
    return BadRequest(f"invalid task: {field}: {message}", [(field, message)])


# ---------------------------------------------------------------------- create


def create_task(
    s: Session,
    ctx: MasterContext,
    task_type: str,
    owner: str,
    config: dict[str, Any] | None,
    entrypoint: str | list[str] | None = None,
    context: bytes | None = None,
    meta: dict[str, Any] | None = None,
    workspace_id: int = UNCATEGORIZED_ID,
) -> dict[str, Any]:
    """Validate and queue a task (the loop is woken once the caller's transaction
    commits).

    Args:
        s: a write session.
        ctx: the master's context (its pools, default task identity, clock).
        task_type: COMMAND, NOTEBOOK, SHELL or TENSORBOARD.
        owner: the username of the caller (owns the task).
        config: the task config (mapping) or None for the defaults.
        entrypoint: for a COMMAND, what to run: an argv list, or a string run by
            ``sh -c``; for the services None (they run
            :mod:`dauntless.exec.task_service`).
        context: the context directory as a gzipped tar (bytes, at most 95 MiB), or
            None.
        meta: type-specific facts (a TensorBoard's ``experiment_ids``, ``trial_ids``
            and ``logdirs``; what another task covers).
        workspace_id: its workspace (not archived), whose default pools apply when the
            config names no pool; a pool bound to other workspaces is refused.

    Returns:
        ``{"task": view, "warnings": [str]}`` (view as :func:`task_view`).

    Raises:
        BadRequest: an unknown type, an invalid config (naming the field), an empty
            command, an unknown resource pool, a context over 95 MiB, or an owner no
            agent can run the task as.
    """
    if task_type not in TASK_TYPES:
        raise _bad("type", f"one of {list(TASK_TYPES)}, got {task_type!r}")
    raw = dict(config or {})
    resources = dict(raw.get("resources") or {})
    resources.setdefault("slots", DEFAULT_SLOTS[task_type])
    raw["resources"] = resources
    try:
        cfg = parse_task_config(raw, task_type)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise BadRequest("invalid task config", exc.errors) from None
    pools = [p.pool_name for p in ctx.config.resource_pools]
    ws = workspaces.read_workspace(s, workspace_id)
    workspaces.refuse_archived(ws)
    pool = cfg.resources.resource_pool or workspaces.workspace_pool(ws, cfg.resources.slots)
    if pool not in pools:
        raise _bad("resources.resource_pool", f"unknown pool {pool!r}; pools: {pools}")
    pool_bindings.check_pool_usable(s, pool, workspace_id, "resources.resource_pool")
    if context is not None and len(context) > MAX_CONTEXT_BYTES:
        raise _bad(
            "context",
            f"{len(context)} bytes compressed; the limit is {MAX_CONTEXT_BYTES} bytes (95 MiB)",
        )
    # issue 29: some agent can run it as its owner's identity
    owner_id = s.scalar(select(UserRow.id).where(UserRow.username == owner))
    errors = identity_refusals(s, owner_id, ctx.config.security.default_task, workspace_id, pool)
    if errors:
        raise BadRequest("invalid task config", errors)
    entrypoint = _entrypoint(task_type, entrypoint)
    task_id = secrets.token_hex(4)
    while s.get(TaskRow, task_id) is not None:
        task_id = secrets.token_hex(4)
    desc = cfg.description or _default_description(task_type, task_id, entrypoint)
    row = TaskRow(
        id=task_id,
        type=task_type,
        state=TaskState.QUEUED.value,
        owner=owner,
        owner_id=owner_id,
        description=desc[:512],
        config=_with_pool(cfg.to_json(), pool),
        entrypoint=entrypoint,
        workspace_id=workspace_id,
        meta=dict(meta or {}),
        context=context,
        run_id=0,
        kill_requested=False,
        service_token=secrets.token_urlsafe(24) if task_type in SERVICE_TYPES else None,
        created_at=ctx.clock(),
    )
    s.add(row)
    s.flush()
    ctx.wake_after_commit(s)
    log.info("created %s task %s for %s", task_type, task_id, owner)
    return {"task": task_view(s, row), "warnings": _warnings(cfg)}


def _entrypoint(task_type: str, entrypoint: str | list[str] | None) -> str | list[str]:
    """What the task runs: a COMMAND's own (checked), a service's task_service module.

    Raises:
        BadRequest: a COMMAND without a command, or a list that is not of strings.
    """
    if task_type != "COMMAND":
        return ["python", "-m", "dauntless.exec.task_service", _SERVICE_MODULE_ARG[task_type]]
    if entrypoint is None or (isinstance(entrypoint, str) and not entrypoint.strip()):
        raise _bad("entrypoint", "a command to run (an argv list or a string)")
    if isinstance(entrypoint, list) and (
        not entrypoint or not all(isinstance(x, str) for x in entrypoint)
    ):
        raise _bad("entrypoint", "a non-empty list of strings")
    return entrypoint


def _warnings(cfg: TaskConfig) -> list[str]:
    """Warnings about config fields that plain-process agents do not act on."""
    warnings = []
    if cfg.bind_mounts:
        warnings.append(
            "bind_mounts are mounted by container runtimes; an agent running tasks as "
            "plain processes sees the host's paths as they are"
        )
    if cfg.environment.image is not None:
        warnings.append(
            "environment.image is used by container runtimes; an agent running tasks "
            "as plain processes uses its own Python environment"
        )
    return warnings


def _default_description(task_type: str, task_id: str, entrypoint: Any) -> str:
    if task_type == "COMMAND":
        text = entrypoint if isinstance(entrypoint, str) else " ".join(entrypoint)
        return f"Command ({text})"
    return {"NOTEBOOK": "JupyterLab", "SHELL": "Shell", "TENSORBOARD": "TensorBoard"}[
        task_type
    ] + f" ({task_id})"


def _with_pool(config: dict[str, Any], pool: str) -> dict[str, Any]:
    """A task config with its pool set (the workspace's default when it named none)."""
    if pool != "default" and not config["resources"].get("resource_pool"):
        config["resources"] = {**config["resources"], "resource_pool": pool}
    return config


# ---------------------------------------------------------------------- read


def task_view(s: Session, row: TaskRow) -> dict[str, Any]:
    """The JSON view of a task (docs/protocol.md, "Generic tasks"), with its latest
    allocation's agent."""
    alloc = _latest_allocation(s, row.id)
    cfg = row.config
    return {
        "id": row.id,
        "type": row.type,
        "state": row.state,
        "owner": row.owner,
        "user_id": row.owner_id,
        "workspace_id": row.workspace_id,
        "description": row.description,
        "config": cfg,
        "entrypoint": row.entrypoint,
        "resource_pool": cfg["resources"]["resource_pool"] or "default",
        "slots": cfg["resources"]["slots"],
        "agent_id": alloc.agent_id if alloc is not None else None,
        "allocation_id": alloc.id if alloc is not None else None,
        "ready": row.ready_time is not None and row.state == TaskState.RUNNING.value,
        "service_url": f"/proxy/{row.id}/" if row.type in SERVICE_TYPES else None,
        "experiment_ids": row.meta.get("experiment_ids", []),
        "trial_ids": row.meta.get("trial_ids", []),
        "exit_code": row.exit_code,
        "exit_message": row.exit_message,
        "created_at": row.created_at,
        "start_time": row.start_time,
        "end_time": row.end_time,
    }


def _latest_allocation(s: Session, task_id: str) -> AllocationRow | None:
    return s.scalar(
        select(AllocationRow)
        .where(AllocationRow.task_id == task_id)
        .order_by(AllocationRow.created_at.desc())
        .limit(1)
    )


def read_task(s: Session, task_id: str) -> TaskRow:
    """The task's row.

    Raises:
        NotFound: no such task.
    """
    row = s.get(TaskRow, task_id)
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return row


def read_task_view(s: Session, task_id: str) -> dict[str, Any]:
    """The view of one task (:func:`task_view`).

    Raises:
        NotFound: no such task.
    """
    return task_view(s, read_task(s, task_id))


def read_tasks(
    s: Session,
    task_type: str | None = None,
    owner: str | None = None,
    visible: set[int] | None = None,
    workspace_id: int | None = None,
    offset: int = 0,
    limit: int = 0,
) -> dict[str, Any]:
    """A page of tasks, oldest first.

    Args:
        task_type: only this type (None: all).
        owner: only this user's (None: all).
        visible: only tasks of these workspaces (the caller's view; None: all).
        workspace_id: only this workspace's (None: all).
        offset: tasks to skip.
        limit: page size in tasks (0: every one).

    Returns:
        ``{"tasks": [view], "total": N}``, N the number that matched.

    Raises:
        BadRequest: an unknown type.
    """
    if task_type is not None and task_type not in TASK_TYPES:
        raise _bad("type", f"one of {list(TASK_TYPES)}, got {task_type!r}")
    q = select(TaskRow).order_by(TaskRow.created_at, TaskRow.id)
    if task_type is not None:
        q = q.where(TaskRow.type == task_type)
    if owner is not None:
        q = q.where(TaskRow.owner == owner)
    if visible is not None:
        q = q.where(TaskRow.workspace_id.in_(visible))
    if workspace_id is not None:
        q = q.where(TaskRow.workspace_id == workspace_id)
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    q = q.offset(offset).limit(limit) if limit else q.offset(offset)
    return {"tasks": [task_view(s, r) for r in s.scalars(q).all()], "total": total}


def read_task_context(s: Session, task_id: str) -> bytes | None:
    """The task's context tarball (gzipped tar bytes), or None.

    Raises:
        NotFound: no such task.
    """
    return read_task(s, task_id).context


def read_task_logs(
    s: Session, task_id: str, after_id: int = 0, limit: int = 1000
) -> dict[str, Any]:
    """Log lines of every run of a task with ids above ``after_id``.

    Args:
        after_id: the last line id the caller has.
        limit: at most this many lines.

    Returns:
        ``{"logs": [LogLine], "task_state": str}`` (LogLine as for trials, with
        ``task_id`` in place of ``trial_id``).

    Raises:
        NotFound: no such task.
    """
    row = read_task(s, task_id)
    alloc_ids = list(s.scalars(select(AllocationRow.id).where(AllocationRow.task_id == task_id)))
    lines: Sequence[TaskLogRow] = []
    if alloc_ids:
        lines = s.scalars(
            select(TaskLogRow)
            .where(TaskLogRow.allocation_id.in_(alloc_ids), TaskLogRow.id > after_id)
            .order_by(TaskLogRow.id)
            .limit(limit)
        ).all()
    return {
        "logs": [
            {
                "id": ln.id,
                "task_id": task_id,
                "allocation_id": ln.allocation_id,
                "timestamp": ln.timestamp,
                "stdtype": ln.stdtype,
                "rank_id": ln.rank_id,
                "log": ln.log,
            }
            for ln in lines
        ],
        "task_state": row.state,
    }


# ---------------------------------------------------------------------- actions


def kill_task(
    s: Session, ctx: MasterContext, task_id: str, reason: str = "killed"
) -> dict[str, Any]:
    """Stop a task: a queued or not yet started one is CANCELED at once, a running one
    becomes TERMINATING until its agent reports the exit. Killing an ended task changes
    nothing.

    Args:
        s: a write session.
        reason: kept as the task's exit message (unless it has one).

    Returns:
        The task's view (:func:`task_view`).

    Raises:
        NotFound: no such task.
    """
    row = read_task(s, task_id)
    state = TaskState(row.state)
    if state not in TASK_TERMINAL:
        row.kill_requested = True
        if row.exit_message is None:
            row.exit_message = reason
        live = s.scalars(
            select(AllocationRow).where(
                AllocationRow.task_id == task_id, AllocationRow.state != "TERMINATED"
            )
        ).all()
        if state is TaskState.QUEUED or all(a.state == "ASSIGNED" for a in live):
            for a in live:
                a.state, a.exit_message, a.ended_at = "TERMINATED", reason, ctx.clock()
            end_task(s, ctx, row, TaskState.CANCELED, None, reason)
        else:
            check_task_transition(row.state, TaskState.TERMINATING)
            row.state = TaskState.TERMINATING.value
            for a in live:
                a.kill_requested = True
        ctx.wake_after_commit(s)
    return task_view(s, row)
