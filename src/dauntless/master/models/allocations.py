"""Allocations: the rows of one trial run's parts (``AllocationRow``, one per agent),
read and changed with a caller's session.

How an allocation's end moves its trial on is :mod:`.runs` (it needs the searcher);
this module needs only the rows, so the task policies and the context may import it.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from ..db import AllocationRow, ExperimentRow, ProjectRow, TaskRow, TrialRow
from ..errors import NotFound


def parts(session: Session, group_id: str) -> list[AllocationRow]:
    """Every part of one allocation (trial run), chief first.

    Args:
        session: an open session.
        group_id: the allocation's group id (the chief's allocation id).
    """
    return list(
        session.scalars(
            select(AllocationRow)
            .where(AllocationRow.group_id == group_id)
            .order_by(AllocationRow.part_index)
        )
    )


def preemption_signal(session: Session, allocation_id: str) -> bool:
    """True when the allocation should checkpoint and exit: a pause, preemption or kill
    was ordered for any of its parts, or the master gave up on a part (its agent was
    lost), so processes still running for it must stop.

    Raises:
        NotFound: no such allocation.
    """
    rows = parts(session, allocation_id)
    if not rows:
        raise NotFound(f"allocation {allocation_id} not found")
    return any(p.preempt_requested or p.kill_requested or p.state == "TERMINATED" for p in rows)


def rendezvous(session: Session, allocation_id: str) -> dict[str, Any] | None:
    """The chief's address once it is known (``addr``, ``port``, ``world_size``,
    ``num_parts``), else None.

    Raises:
        NotFound: no such allocation.
    """
    chief = session.get(AllocationRow, allocation_id)
    if chief is None:
        raise NotFound(f"allocation {allocation_id} not found")
    if chief.rendezvous_port is None:
        return None
    return {
        "addr": chief.rendezvous_addr,
        "port": chief.rendezvous_port,
        "world_size": chief.world_size,
        "num_parts": chief.num_parts,
    }


def live_allocation(session: Session, trial_id: int) -> AllocationRow | None:
    """A part of the trial's allocation that has not ended (the chief or another), or
    None when none runs."""
    return session.scalar(
        select(AllocationRow).where(
            AllocationRow.trial_id == trial_id, AllocationRow.state != "TERMINATED"
        )
    )


def signal_stop(session: Session, alloc: AllocationRow) -> None:
    """Ask a running allocation to checkpoint and exit (the searcher stopped it)."""
    for part in parts(session, alloc.group_id):
        if part.state != "TERMINATED":
            part.preempt_requested = True


def new_allocation(
    session: Session, trial: TrialRow, parts: list[tuple[str, list[str]]], now: float
) -> str:
    """Create an ASSIGNED allocation of ``trial``: one part per ``(agent_id, slot_ids)``,
    the first being the chief (ranks from 0). Returns the allocation (group) id.

    The run has one rank per slot, or one rank for a zero-slot trial.

    Args:
        session: a write session.
        trial: the trial (its ``run_id`` is advanced).
        parts: ``(agent_id, slot_ids)`` per part, chief first.
        now: the creation time (seconds since the epoch).

    Raises:
        ValueError: ``parts`` is empty.
    """
    if not parts:
        raise ValueError("an allocation needs at least one part")
    trial.run_id += 1
    group = uuid.uuid4().hex
    world = max(sum(len(slots) for _, slots in parts), 1)
    offset = 0
    for index, (agent_id, slot_ids) in enumerate(parts):
        session.add(
            AllocationRow(
                id=group if index == 0 else f"{group}-{index}",
                group_id=group,
                part_index=index,
                num_parts=len(parts),
                rank_offset=offset,
                world_size=world,
                trial_id=trial.id,
                agent_id=agent_id,
                slot_ids=list(slot_ids),
                state="ASSIGNED",
                run_id=trial.run_id,
                kill_requested=False,
                preempt_requested=False,
                created_at=now,
            )
        )
        offset += len(slot_ids)
    return group


def set_rendezvous(session: Session, allocation_id: str, addr: str, port: int) -> None:
    """Record where the chief of a distributed allocation listens (torch.distributed).

    Raises:
        NotFound: no such allocation.
    """
    chief = session.get(AllocationRow, allocation_id)
    if chief is None or chief.part_index != 0:
        raise NotFound(f"allocation {allocation_id} not found")
    chief.rendezvous_addr, chief.rendezvous_port = addr, port


def listing(
    session: Session,
    trial_id: int | None,
    active: bool | None,
    owner_id: int | None = None,
    experiment_workspaces: set[int] | None = None,
    task_workspaces: set[int] | None = None,
) -> list[tuple[AllocationRow, int | None]]:
    """Allocations with their trial's experiment id (None for a task's: a command's,
    notebook's, shell's or TensorBoard's), oldest first.

    Args:
        trial_id: only this trial's (None: every trial's and task's).
        active: True: not terminated; False: terminated; None: both.
        owner_id: only those of experiments or tasks this user owns (None: everyone's).
        experiment_workspaces, task_workspaces: only trials' of experiments, and
            tasks', in these workspaces (the caller's view; None: every workspace).
    """
    q = select(AllocationRow, TrialRow.experiment_id).join(
        TrialRow, TrialRow.id == AllocationRow.trial_id, isouter=True
    )
    scoped = experiment_workspaces is not None or task_workspaces is not None
    if owner_id is not None or scoped:
        q = q.join(ExperimentRow, ExperimentRow.id == TrialRow.experiment_id, isouter=True).join(
            TaskRow, TaskRow.id == AllocationRow.task_id, isouter=True
        )
    if owner_id is not None:
        q = q.where(or_(ExperimentRow.owner_id == owner_id, TaskRow.owner_id == owner_id))
    if scoped:
        q = q.join(ProjectRow, ProjectRow.id == ExperimentRow.project_id, isouter=True)
        trials: ColumnElement[bool] = AllocationRow.trial_id.is_not(None)
        if experiment_workspaces is not None:
            trials = and_(trials, ProjectRow.workspace_id.in_(experiment_workspaces))
        tasks: ColumnElement[bool] = AllocationRow.task_id.is_not(None)
        if task_workspaces is not None:
            tasks = and_(tasks, TaskRow.workspace_id.in_(task_workspaces))
        q = q.where(or_(trials, tasks))
    if trial_id is not None:
        q = q.where(AllocationRow.trial_id == trial_id)
    if active is True:
        q = q.where(AllocationRow.state != "TERMINATED")
    elif active is False:
        q = q.where(AllocationRow.state == "TERMINATED")
    rows = session.execute(q.order_by(AllocationRow.created_at, AllocationRow.id))
    return [(a, exp_id) for a, exp_id in rows]
