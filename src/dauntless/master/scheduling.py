"""Glue between the database and the pure scheduler (:mod:`dauntless.scheduler`).

One pass reads agents, live allocations and pending trials, asks the scheduler of each
resource pool for a :class:`~dauntless.scheduler.Decision`, and writes it back: new
allocations for assignments, a preemption flag for preemptions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.scheduler import AgentState, Allocation, Request, pool_spec_from_config, schedule

from .db import AgentRow, AllocationRow, ExperimentRow, TrialRow
from .states import State

if TYPE_CHECKING:
    from .manager import ExperimentManager

log = logging.getLogger("dauntless.master")


def place_pending(s: Session, mgr: ExperimentManager, now: float) -> int:
    """Run one scheduling pass inside the caller's transaction.

    Returns:
        The number of allocations created.
    """
    live = s.scalars(select(AllocationRow).where(AllocationRow.state != "TERMINATED")).all()
    live_trials = {a.trial_id for a in live}
    pending_rows = s.execute(
        select(TrialRow, ExperimentRow)
        .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
        .where(TrialRow.state == State.ACTIVE.value, ExperimentRow.state == State.ACTIVE.value)
        .order_by(TrialRow.id)
    ).all()
    pending = [(t, e) for t, e in pending_rows if t.id not in live_trials]
    if not pending and not live:
        return 0
    agents = s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")).all()
    trials_by_id = {t.id: (t, e) for t, e in pending}
    running_meta: dict[int, ExperimentRow] = {}
    if live:
        for t, e in s.execute(
            select(TrialRow, ExperimentRow)
            .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
            .where(TrialRow.id.in_(live_trials))
        ).all():
            running_meta[t.id] = e
    created = 0
    for pool in mgr.config.resource_pools:
        spec = pool_spec_from_config(pool)
        pool_agents = [
            AgentState(
                id=a.id,
                pool=a.resource_pool,
                slots=tuple(str(sl["id"]) for sl in a.slots),
                disabled_slots=frozenset(str(sl["id"]) for sl in a.slots if not sl.get("enabled", True)),
                enabled=a.enabled,
                draining=a.draining,
            )
            for a in agents
            if a.resource_pool == pool.pool_name
        ]
        requests = []
        for trial, exp in pending:
            cfg = mgr.experiment_config(exp)
            if (cfg.resources.resource_pool or "default") != pool.pool_name:
                continue
            requests.append(
                Request(
                    id=str(trial.id),
                    group_id=str(exp.id),
                    slots_needed=cfg.resources.slots_per_trial,
                    priority=cfg.resources.priority,
                    weight=cfg.resources.weight,
                    max_slots=cfg.resources.max_slots,
                    submitted_at=trial.start_time,
                )
            )
        running = []
        pool_agent_ids = {a.id for a in pool_agents}
        for alloc in live:
            if alloc.agent_id not in pool_agent_ids:
                continue
            exp = running_meta[alloc.trial_id]
            cfg = mgr.experiment_config(exp)
            running.append(
                Allocation(
                    id=str(alloc.trial_id),
                    group_id=str(exp.id),
                    slots={alloc.agent_id: tuple(str(x) for x in alloc.slot_ids)},
                    priority=cfg.resources.priority,
                    weight=cfg.resources.weight,
                )
            )
        if not requests:
            continue
        decision = schedule(spec, pool_agents, requests, running)
        for assignment in decision.assignments:
            trial, _exp = trials_by_id[int(assignment.request_id)]
            mgr.new_allocation(
                s, trial, [(agent_id, list(slots)) for agent_id, slots in assignment.slots.items()]
            )
            created += 1
        for victim in decision.preemptions:
            for alloc in live:
                if str(alloc.trial_id) == victim and not alloc.preempt_requested:
                    log.info("preempting trial %s", victim)
                    alloc.preempt_requested = True
    return created
