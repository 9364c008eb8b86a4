"""Glue between the database and the pure scheduler (:mod:`dauntless.scheduler`).

One pass reads agents, live allocations and pending trials, asks the scheduler of each
resource pool for a :class:`~dauntless.scheduler.Decision`, and writes it back: new
allocations for assignments, a preemption flag for preemptions.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import TaskIdentity
from dauntless.scheduler import AgentState, Allocation, Request, pool_spec_from_config

from .context import MasterContext
from .db import AgentRow, AllocationRow, ExperimentRow, TaskRow, TrialRow
from .environments import identity_needs, required_features, schedule_by_features
from .models import allocations, users
from .states import State
from .task_policies import excluded_agents
from .tasks import REQUEST_PREFIX as TASK_REQUEST_PREFIX

log = logging.getLogger("dauntless.master")


def place_pending(s: Session, ctx: MasterContext, now: float) -> int:
    """Run one scheduling pass inside the caller's transaction.

    Returns:
        The number of allocations created.
    """
    live = s.scalars(select(AllocationRow).where(AllocationRow.state != "TERMINATED")).all()
    live_trials = {a.trial_id for a in live if a.trial_id is not None}
    pending_tasks = ctx.tasks.scheduling.pending(s)
    task_configs = {}
    if any(a.task_id is not None for a in live):
        task_configs = {
            row.id: row.config
            for row in s.scalars(
                select(TaskRow).where(
                    TaskRow.id.in_({a.task_id for a in live if a.task_id is not None})
                )
            )
        }
    # Running trials are left out in SQL: their rows (JSON columns) are not decoded.
    pending_query = (
        select(TrialRow, ExperimentRow)
        .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
        .where(TrialRow.state == State.ACTIVE.value, ExperimentRow.state == State.ACTIVE.value)
        .order_by(TrialRow.id)
    )
    if live_trials:
        pending_query = pending_query.where(TrialRow.id.not_in(live_trials))
    pending = [(t, e) for t, e in s.execute(pending_query).all() if t.id not in live_trials]
    if not pending and not live and not pending_tasks:
        return 0
    agents = s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")).all()
    trials_by_id = {t.id: (t, e) for t, e in pending}
    running_meta: dict[int, ExperimentRow] = {}
    if live:
        # Experiment ids first, then each experiment once: one already loaded with the
        # pending trials (the usual case) is not read, nor its config decoded, again.
        exp_ids = dict(
            s.execute(
                select(TrialRow.id, TrialRow.experiment_id).where(TrialRow.id.in_(live_trials))
            ).all()
        )
        exps = {e.id: e for _, e in pending}
        missing = set(exp_ids.values()) - exps.keys()
        if missing:
            exps.update(
                (e.id, e)
                for e in s.scalars(select(ExperimentRow).where(ExperimentRow.id.in_(missing)))
            )
        running_meta = {t: exps[e] for t, e in exp_ids.items() if e in exps}
    created = 0
    runtimes = {a.id: a.runtime for a in agents}
    identities: dict[tuple[int | None, int | None], TaskIdentity] = {}
    needs_of: dict[tuple[int | None, int | None, str], frozenset[str]] = {}
    project_workspaces: dict[int | None, int | None] = {}

    def identity_need(
        owner_id: int | None, workspace_id: int | None, pool_name: str, runtimes_: list
    ) -> frozenset[str]:
        """What a request of ``owner_id``'s in ``workspace_id`` needs of the pool's agents
        (issue 29: its Unix identity), once per owner, workspace and pool."""
        key = (owner_id, workspace_id, pool_name)
        if key not in needs_of:
            who = (owner_id, workspace_id)
            if who not in identities:
                identities[who] = users.task_identity(
                    s, owner_id, ctx.config.security.default_task, workspace_id
                )
            needs_of[key] = identity_needs(identities[who], runtimes_)
        return needs_of[key]

    def experiment_workspace(exp: ExperimentRow) -> int | None:
        if exp.project_id not in project_workspaces:
            project_workspaces[exp.project_id] = users.experiment_workspace(s, exp.project_id)
        return project_workspaces[exp.project_id]

    for pool in ctx.config.resource_pools:
        spec = pool_spec_from_config(pool)
        pool_agents = [
            AgentState(
                id=a.id,
                pool=a.resource_pool,
                slots=tuple(str(sl["id"]) for sl in a.slots),
                disabled_slots=frozenset(
                    str(sl["id"]) for sl in a.slots if not sl.get("enabled", True)
                ),
                enabled=a.enabled,
                draining=a.draining,
            )
            for a in agents
            if a.resource_pool == pool.pool_name
        ]
        requests = []
        constrained: list[tuple[Request, set[str]]] = []  # exclude_node log policies
        needs: dict[str, frozenset[str]] = {}  # issue 23: what a request needs of its agent
        pool_runtimes = [runtimes[a.id] for a in pool_agents]
        for trial, exp in pending:
            cfg = ctx.experiment_config(exp)
            if (cfg.resources.resource_pool or "default") != pool.pool_name:
                continue
            needs[str(trial.id)] = frozenset(
                required_features(cfg.environment, cfg.bind_mounts)
            ) | identity_need(
                exp.owner_id, experiment_workspace(exp), pool.pool_name, pool_runtimes
            )
            request = Request(
                id=str(trial.id),
                group_id=str(exp.id),
                slots_needed=cfg.resources.slots_per_trial,
                priority=cfg.resources.priority,
                weight=cfg.resources.weight,
                max_slots=cfg.resources.max_slots,
                submitted_at=trial.start_time,
            )
            avoid = excluded_agents(trial) & {a.id for a in pool_agents}
            if avoid:
                constrained.append((request, avoid))
            else:
                requests.append(request)
        task_requests = ctx.tasks.scheduling.requests(pending_tasks, pool.pool_name)
        requests.extend(task_requests)
        if task_requests:  # issue 29: the Unix identity the task runs as
            owners = {
                TASK_REQUEST_PREFIX + row.id: (row.owner_id, row.workspace_id)
                for row in pending_tasks
            }
            for r in task_requests:
                need = identity_need(*owners[r.id], pool.pool_name, pool_runtimes)
                if need:
                    needs[r.id] = need
        running = []
        pool_agent_ids = {a.id for a in pool_agents}
        for alloc in live:
            if alloc.agent_id not in pool_agent_ids:
                continue
            if alloc.task_id is not None:
                running.append(ctx.tasks.scheduling.running(alloc, task_configs[alloc.task_id]))
                continue
            assert alloc.trial_id is not None  # not a task's, so a trial's allocation
            exp = running_meta[alloc.trial_id]
            cfg = ctx.experiment_config(exp)
            running.append(
                Allocation(
                    id=str(alloc.trial_id),
                    group_id=str(exp.id),
                    slots={alloc.agent_id: tuple(str(x) for x in alloc.slot_ids)},
                    priority=cfg.resources.priority,
                    weight=cfg.resources.weight,
                )
            )
        if not requests and not constrained:
            continue
        decision = schedule_by_features(spec, pool_agents, requests, running, needs, runtimes)
        assignments = list(decision.assignments)
        # A trial that an exclude_node log policy keeps off some agents is placed after
        # the others, on the rest of the pool's agents and the slots still free; it
        # preempts nobody.
        for request, avoid in constrained:
            taken = running + [
                Allocation(
                    id=a.request_id,
                    group_id=(
                        a.request_id
                        if a.request_id.startswith(TASK_REQUEST_PREFIX)
                        else str(trials_by_id[int(a.request_id)][1].id)
                    ),
                    slots=dict(a.slots),
                )
                for a in assignments
            ]
            allowed = [a for a in pool_agents if a.id not in avoid]
            assignments += schedule_by_features(
                spec, allowed, [request], taken, needs, runtimes
            ).assignments
        for assignment in assignments:
            if assignment.request_id.startswith(TASK_REQUEST_PREFIX):
                created += ctx.tasks.scheduling.allocate(
                    s, assignment.request_id, dict(assignment.slots)
                )
                continue
            trial, _exp = trials_by_id[int(assignment.request_id)]
            allocations.new_allocation(
                s,
                trial,
                [(agent_id, list(slots)) for agent_id, slots in assignment.slots.items()],
                ctx.clock(),
            )
            created += 1
        for victim in decision.preemptions:
            for alloc in live:
                if str(alloc.trial_id) == victim and not alloc.preempt_requested:
                    log.info("preempting trial %s", victim)
                    alloc.preempt_requested = True
    return created
