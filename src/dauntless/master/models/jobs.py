"""Jobs: what the job queue lists (``GET /job-queues``, :mod:`..routes_jobs`), read with
a caller's session, and the scheduling edit of a task's job. A job is an experiment
(``experiment-<id>``) or a generic task (``task-<task id>``); an experiment's scheduling
edit is :func:`.experiments.patch_experiment`'s."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..context import MasterContext
from ..db import AllocationRow, ProjectRow, TaskRow, TrialRow
from ..errors import NotFound
from ..states import State
from ..task_states import TaskState
from . import experiment_reads

EXPERIMENT_PREFIX = "experiment-"
TASK_PREFIX = "task-"
_LIVE_TASK_STATES = (TaskState.QUEUED.value, TaskState.ASSIGNED.value, TaskState.RUNNING.value)


def experiment_jobs(s: Session, ctx: MasterContext) -> list[dict[str, Any]]:
    """The jobs of ACTIVE experiments with unfinished trials: ``{job_id, type, entity_id,
    name, owner, owner_id, workspace_id, resource_pool, priority (None: the pool's default), weight,
    requested_slots, allocated_slots, submission_time (seconds since the epoch), state
    (QUEUED or SCHEDULED), preemptible}`` each, in no order."""
    exps = experiment_reads.active_experiments(s)
    if not exps:
        return []
    ids = [e.id for e in exps]
    trials = s.execute(
        select(TrialRow.id, TrialRow.experiment_id).where(
            TrialRow.experiment_id.in_(ids), TrialRow.state == State.ACTIVE.value
        )
    ).all()
    active: dict[int, list[int]] = {}
    for tid, eid in trials:
        active.setdefault(eid, []).append(tid)
    live = s.execute(
        select(AllocationRow.trial_id, AllocationRow.slot_ids).where(
            AllocationRow.state != "TERMINATED", AllocationRow.trial_id.is_not(None)
        )
    ).all()
    slots_of_trial: dict[int, int] = {}
    for tid, slot_ids in live:
        slots_of_trial[tid] = slots_of_trial.get(tid, 0) + len(slot_ids or [])
    workspace_of = dict(
        s.execute(
            select(ProjectRow.id, ProjectRow.workspace_id).where(
                ProjectRow.id.in_({e.project_id for e in exps})
            )
        ).all()
    )
    out = []
    for e in exps:
        tids = active.get(e.id, [])
        if not tids:
            continue
        cfg = ctx.experiment_config(e)
        allocated = sum(slots_of_trial.get(t, 0) for t in tids)
        out.append(
            {
                "job_id": f"{EXPERIMENT_PREFIX}{e.id}",
                "type": "EXPERIMENT",
                "entity_id": str(e.id),
                "name": e.name,
                "owner": e.owner,
                "owner_id": e.owner_id,
                "workspace_id": workspace_of.get(e.project_id),
                "resource_pool": cfg.resources.resource_pool or "default",
                "priority": cfg.resources.priority,
                "weight": cfg.resources.weight,
                "requested_slots": cfg.resources.slots_per_trial * len(tids),
                "allocated_slots": allocated,
                "submission_time": e.start_time,
                "state": "SCHEDULED" if any(t in slots_of_trial for t in tids) else "QUEUED",
                "preemptible": True,
            }
        )
    return out


def task_jobs(s: Session) -> list[dict[str, Any]]:
    """The jobs of tasks (commands, notebooks, shells, TensorBoards) that are QUEUED,
    ASSIGNED or RUNNING, shaped as :func:`experiment_jobs`' (not preemptible), in no
    order."""
    rows = s.scalars(select(TaskRow).where(TaskRow.state.in_(_LIVE_TASK_STATES))).all()
    if not rows:
        return []
    live = s.execute(
        select(AllocationRow.task_id, AllocationRow.slot_ids).where(
            AllocationRow.state != "TERMINATED",
            AllocationRow.task_id.in_([r.id for r in rows]),
        )
    ).all()
    held: dict[str, int] = {}
    for tid, slot_ids in live:
        held[tid] = held.get(tid, 0) + len(slot_ids or [])
    out = []
    for r in rows:
        res = r.config.get("resources") or {}
        out.append(
            {
                "job_id": f"{TASK_PREFIX}{r.id}",
                "type": r.type.upper(),
                "entity_id": r.id,
                "name": r.description or r.id,
                "owner": r.owner,
                "owner_id": r.owner_id,
                "workspace_id": r.workspace_id,
                "resource_pool": res.get("resource_pool") or "default",
                "priority": res.get("priority"),
                "weight": float(res.get("weight", 1.0)),
                "requested_slots": int(res.get("slots", 0)),
                "allocated_slots": held.get(r.id, 0),
                "submission_time": r.created_at,
                "state": "QUEUED" if r.state == TaskState.QUEUED.value else "SCHEDULED",
                "preemptible": False,
            }
        )
    return out


def set_task_scheduling(
    s: Session, ctx: MasterContext, task_id: str, field: str, value: float | None
) -> None:
    """Set a task's ``resources.priority`` or ``resources.weight`` (``field``) to
    ``value``; the loop runs a scheduling pass once the caller's transaction commits.

    Raises:
        NotFound: no such task.
    """
    row = s.get(TaskRow, task_id)
    if row is None:
        job_id = f"{TASK_PREFIX}{task_id}"
        raise NotFound(f"no queued or running job {job_id!r}")
    config = dict(row.config)
    config["resources"] = {**(config.get("resources") or {}), field: value}
    row.config = config
    ctx.wake_after_commit(s)
