"""The scheduler's side of generic tasks (:mod:`dauntless.master.models.tasks`): which
tasks wait, their scheduler requests, the allocation of a placed task, its hand-over to
an agent (the task spec), its end when its process exits, and the idle timeout of
TensorBoards.

Session-first model functions like the rest of :mod:`dauntless.master.models`: each
takes the caller's session (and the master's context where it needs the clock, the
config or the proxy's activity map) and opens no transaction of its own; the control
loop (:mod:`dauntless.master.loop`), the placement pass
(:mod:`dauntless.master.scheduling`), the autoscaler and the run functions of
:mod:`dauntless.master.models.runs` call them in their transactions.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from dauntless.config._task import TaskConfig
from dauntless.scheduler import Allocation, Request

from .. import shell_ssh
from ..auth import hash_token, new_token
from ..context import MasterContext
from ..db import AllocationRow, TaskRow, UserSessionRow
from ..task_states import REQUEST_PREFIX, TASK_TERMINAL, TaskState, check_task_transition
from .users import task_identity

log = logging.getLogger("dauntless.master.tasks")


def pending_tasks(s: Session) -> list[TaskRow]:
    """Queued tasks, oldest first (a queued task has no live allocation)."""
    return list(
        s.scalars(
            select(TaskRow)
            .where(TaskRow.state == TaskState.QUEUED.value)
            .order_by(TaskRow.created_at, TaskRow.id)
        )
    )


def task_requests(pending: list[TaskRow], pool_name: str) -> list[Request]:
    """Scheduler requests of the queued tasks of one pool (never preemptible: a notebook
    or command cannot checkpoint).

    Args:
        pending: queued task rows (:func:`pending_tasks`), any pool.
        pool_name: the pool whose tasks are wanted.

    Returns:
        One request per task of the pool, asking ``resources.slots`` slots.
    """
    out = []
    for row in pending:
        res = row.config["resources"]
        if (res.get("resource_pool") or "default") != pool_name:
            continue
        out.append(
            Request(
                id=REQUEST_PREFIX + row.id,
                group_id=REQUEST_PREFIX + row.id,
                slots_needed=int(res["slots"]),
                priority=res.get("priority"),
                weight=float(res.get("weight", 1.0)),
                submitted_at=row.created_at,
                preemptible=False,
            )
        )
    return out


def task_allocation(alloc: AllocationRow, config: dict[str, Any]) -> Allocation:
    """The scheduler's view of a live task allocation.

    Args:
        alloc: the task's live allocation row.
        config: the task's config (JSON form, ``tasks.config``).
    """
    return Allocation(
        id=REQUEST_PREFIX + str(alloc.task_id),
        group_id=REQUEST_PREFIX + str(alloc.task_id),
        slots={alloc.agent_id: tuple(str(x) for x in alloc.slot_ids)},
        priority=config["resources"].get("priority"),
        weight=float(config["resources"].get("weight", 1.0)),
        preemptible=False,
    )


def allocate_task(
    s: Session, ctx: MasterContext, task_id: str, parts: dict[str, tuple[str, ...]]
) -> bool:
    """Create the allocation of placed task ``task_id`` (the task becomes ASSIGNED). A
    task runs on one agent: a placement over several agents is declined (the task stays
    queued).

    Args:
        task_id: the placed task.
        parts: agent id -> slot ids the scheduler assigned.

    Returns:
        Whether an allocation was made.
    """
    row = s.get(TaskRow, task_id)
    if row is None or row.state != TaskState.QUEUED.value:
        return False
    if len(parts) != 1:
        log.info("task %s needs its %d slots on one agent; it waits", row.id, len(parts))
        return False
    ((agent_id, slot_ids),) = parts.items()
    row.run_id += 1
    check_task_transition(row.state, TaskState.ASSIGNED)
    row.state = TaskState.ASSIGNED.value
    s.add(
        AllocationRow(
            id=f"{row.id}.{row.run_id}",
            group_id=f"{row.id}.{row.run_id}",
            part_index=0,
            num_parts=1,
            rank_offset=0,
            world_size=1,
            trial_id=None,
            task_id=row.id,
            agent_id=agent_id,
            slot_ids=list(slot_ids),
            state="ASSIGNED",
            run_id=row.run_id,
            kill_requested=False,
            preempt_requested=False,
            created_at=ctx.clock(),
        )
    )
    return True


def task_spec(s: Session, ctx: MasterContext, alloc: AllocationRow) -> dict[str, Any]:
    """The TaskSpec handing a task's allocation to its agent (docs/protocol.md); the task
    becomes RUNNING. The owner gets a login session for the task's processes
    (``DET_USER_TOKEN``), revoked when the task ends (:func:`end_task`).

    Args:
        alloc: the task's allocation being handed over.

    Returns:
        The TaskSpec (JSON form).
    """
    row = s.get(TaskRow, alloc.task_id)
    assert row is not None
    cfg = TaskConfig.model_validate(row.config)
    now = ctx.clock()
    env = dict(cfg.environment.variables_for("cpu"))
    env.update(
        {
            "DET_MASTER": ctx.public_url(),
            "DET_TASK_ID": row.id,
            "DET_TASK_TYPE": row.type,
            "DET_ALLOCATION_ID": alloc.id,
            "DET_AGENT_ID": alloc.agent_id,
            "DET_SLOT_IDS": ",".join(str(x) for x in alloc.slot_ids),
            "DET_USER": row.owner,
            "DAUNTLESS_PROXY_PREFIX": f"/proxy/{row.id}/",
        }
    )
    if row.owner_id is not None:
        token = new_token()
        session = UserSessionRow(
            user_id=row.owner_id,
            token_hash=hash_token(token),
            created_at=now,
            expires_at=now + ctx.config.security.token.max_lifespan,
        )
        s.add(session)
        s.flush()
        row.user_session_id = session.id
        env["DET_USER_TOKEN"] = token
    if row.service_token:
        env["DAUNTLESS_SERVICE_TOKEN"] = row.service_token
    if cfg.idle_timeout is not None:
        env["DAUNTLESS_IDLE_TIMEOUT"] = str(cfg.idle_timeout)
    if cfg.debug:
        env["DAUNTLESS_DEBUG"] = "1"
    if row.type == "SHELL" and (key := shell_ssh.public_key(row.meta)):
        env["DAUNTLESS_SSH_PUBLIC_KEY"] = key  # the one key its sshd lets in (issue 34)
    if row.type == "TENSORBOARD":
        env["DAUNTLESS_TENSORBOARD_LOGDIRS"] = ",".join(
            f"{k}:{v}" for k, v in sorted(row.meta.get("logdirs", {}).items())
        )
    check_task_transition(row.state, TaskState.RUNNING)
    row.state = TaskState.RUNNING.value
    row.start_time = now
    has_context = s.scalar(
        select(TaskRow.id).where(TaskRow.id == row.id, TaskRow.context.is_not(None))
    )
    return {
        "allocation_id": alloc.id,
        "task_id": row.id,
        "task_type": row.type,
        "trial_id": None,
        "experiment_id": None,
        "slot_ids": list(alloc.slot_ids),
        "entrypoint": row.entrypoint,
        "env": env,
        "context_url": f"/api/v1/tasks/{row.id}/context" if has_context else None,
        "work_dir": cfg.work_dir,
        "bind_mounts": [b.model_dump(mode="json") for b in cfg.bind_mounts],
        # The Unix identity the task's processes run as (issue 29).
        "identity": task_identity(
            s, row.owner_id, ctx.config.security.default_task, row.workspace_id
        ).to_json(),
    }


def task_exited(s: Session, ctx: MasterContext, alloc: AllocationRow) -> None:
    """A task's allocation ended (exit reported, kill, or its agent lost): the task ends
    CANCELED after a kill, COMPLETED on exit code 0, ERROR otherwise."""
    row = s.get(TaskRow, alloc.task_id)
    if row is None or TaskState(row.state) in TASK_TERMINAL:
        return
    code, message = alloc.exit_code, alloc.exit_message
    if row.kill_requested:
        end_task(s, ctx, row, TaskState.CANCELED, code, row.exit_message or "killed")
    elif code == 0:
        end_task(s, ctx, row, TaskState.COMPLETED, 0, None)
    else:
        # A service's own reason (e.g. a missing extra) beats "exit code 3".
        why = row.exit_message or message or f"exit code {code}"
        end_task(s, ctx, row, TaskState.ERROR, code, why)


def end_task(
    s: Session,
    ctx: MasterContext,
    row: TaskRow,
    state: TaskState,
    code: int | None,
    message: str | None,
) -> None:
    """End a task in ``state`` with its exit code and reason; its login session is
    revoked and its proxy activity forgotten.

    Raises:
        TaskConflict: the task's state does not allow ``state``.
    """
    check_task_transition(row.state, state)
    row.state = state.value
    row.exit_code = code
    row.exit_message = message
    row.end_time = ctx.clock()
    row.service_addr = row.service_port = None
    if row.user_session_id is not None:
        s.execute(delete(UserSessionRow).where(UserSessionRow.id == row.user_session_id))
        row.user_session_id = None
    ctx.task_activity.pop(row.id, None)
    log.info("task %s is %s (%s)", row.id, state.value, message or f"exit code {code}")


def kill_idle_tensorboards(s: Session, ctx: MasterContext, now: float) -> None:
    """Kill TensorBoards nobody reached through the proxy for their ``idle_timeout``
    (notebooks and shells watch their own activity, see
    :mod:`dauntless.exec.task_service`).

    Args:
        now: the current time (seconds since the epoch).
    """
    for row in s.scalars(
        select(TaskRow).where(
            TaskRow.type == "TENSORBOARD", TaskRow.state == TaskState.RUNNING.value
        )
    ):
        timeout = row.config.get("idle_timeout")
        if timeout is None or row.ready_time is None:
            continue
        last = max(ctx.task_activity.get(row.id, 0.0), row.ready_time)
        if now - last > timeout:
            row.kill_requested = True
            row.exit_message = f"idle for {now - last:.0f} s (idle_timeout {timeout:g} s)"
            row.state = TaskState.TERMINATING.value
            for a in s.scalars(
                select(AllocationRow).where(
                    AllocationRow.task_id == row.id, AllocationRow.state != "TERMINATED"
                )
            ):
                a.kill_requested = True
