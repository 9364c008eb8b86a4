"""Glue between the database and the pure scheduler (:mod:`dauntless.scheduler`).

One pass is read, decide, write: :func:`read_pass` reads agents, live allocations, and
pending trials and tasks into the scheduler's types (what each request needs of its
agent and which agents it must avoid included); :func:`dauntless.scheduler.schedule`
decides each resource pool; :func:`write_decision` creates the allocations and flags the
preemptions. Which row a request stands for is looked up in :attr:`PassInputs.pending`,
never parsed from its id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import TaskIdentity
from dauntless.scheduler import AgentState, Allocation, Decision, Request, schedule
from dauntless.scheduler import pool_spec_from_config as pool_spec

from .context import MasterContext
from .db import AgentRow, AllocationRow, ExperimentRow, TaskRow, TrialRow, WorkspaceRow
from .environments import agent_has, identity_needs, required_features
from .models import allocations, task_runs, users
from .states import State
from .task_policies import excluded_agents

log = logging.getLogger("dauntless.master")


@dataclass(frozen=True)
class PendingWork:
    """One request of a pass and the row it stands for.

    Attributes:
        request: what the scheduler is asked to place.
        pool: the resource pool it waits in.
        row: the trial or the task (notebook, command, shell, TensorBoard) it places.
    """

    request: Request
    pool: str
    row: TrialRow | TaskRow


@dataclass
class PassInputs:
    """What one pass reads: agents by pool (features set), running allocations, the
    pending work by request id, and the live allocation rows (for preemption flags)."""

    agents: dict[str, list[AgentState]] = field(default_factory=dict)
    running: list[tuple[Allocation, AllocationRow]] = field(default_factory=list)
    pending: dict[str, PendingWork] = field(default_factory=dict)


def place_pending(s: Session, ctx: MasterContext, now: float) -> int:
    """Run one scheduling pass inside the caller's transaction: read, decide each pool,
    write.

    Returns:
        The number of allocations created.
    """
    inputs = read_pass(s, ctx)
    created = 0
    for pool in ctx.config.resource_pools:
        requests = [w.request for w in inputs.pending.values() if w.pool == pool.pool_name]
        if not requests:
            continue
        agents = inputs.agents.get(pool.pool_name, [])
        on_pool = {a.id for a in agents}
        running = [a for a, row in inputs.running if row.agent_id in on_pool]
        decision = schedule(pool_spec(pool), agents, requests, running)
        created += write_decision(s, ctx, inputs, decision)
    return created


def write_decision(s: Session, ctx: MasterContext, inputs: PassInputs, decision: Decision) -> int:
    """Carry out one pool's decision: an allocation per assignment (a task's through
    :func:`~dauntless.master.models.task_runs.allocate_task`), and a preemption
    flag on each victim trial's allocation.

    Returns:
        The number of allocations created.
    """
    created = 0
    for assignment in decision.assignments:
        work = inputs.pending[assignment.request_id]
        if isinstance(work.row, TaskRow):
            created += task_runs.allocate_task(s, ctx, work.row.id, dict(assignment.slots))
            continue
        parts = [(agent_id, list(slots)) for agent_id, slots in assignment.slots.items()]
        allocations.new_allocation(s, work.row, parts, ctx.clock())
        created += 1
    victims = set(decision.preemptions)
    for allocation, row in inputs.running:
        if allocation.id in victims and row.trial_id is not None and not row.preempt_requested:
            log.info("preempting trial %s", row.trial_id)
            row.preempt_requested = True
    return created


# ---------------------------------------------------------------------- reading


def read_pass(s: Session, ctx: MasterContext) -> PassInputs:
    """Read one pass's inputs (nothing when no work is pending).

    Running trials are left out in SQL: their rows (JSON columns) are not decoded.
    """
    live = list(s.scalars(select(AllocationRow).where(AllocationRow.state != "TERMINATED")))
    live_trials = {a.trial_id for a in live if a.trial_id is not None}
    query = (
        select(TrialRow, ExperimentRow)
        .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
        .where(TrialRow.state == State.ACTIVE.value, ExperimentRow.state == State.ACTIVE.value)
        .order_by(TrialRow.id)
    )
    if live_trials:
        query = query.where(TrialRow.id.not_in(live_trials))
    trials = [(t, e) for t, e in s.execute(query).all() if t.id not in live_trials]
    tasks = task_runs.pending_tasks(s)
    inputs = PassInputs()
    if not trials and not tasks:
        return inputs
    agent_rows = list(s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")))
    needs = _Needs(s, ctx, agent_rows)
    for trial, exp in trials:
        inputs.pending[str(trial.id)] = _trial_work(ctx, trial, exp, needs)
    for work in _task_work(ctx, tasks, needs):
        inputs.pending[work.request.id] = work
    inputs.running = _running(s, ctx, live, {e.id: e for _, e in trials})
    wanted = frozenset().union(*(w.request.needs for w in inputs.pending.values()))
    for a in agent_rows:
        state = replace(_agent_state(a), features=needs.features(a, wanted))
        inputs.agents.setdefault(a.resource_pool, []).append(state)
    return inputs


def _agent_state(a: AgentRow) -> AgentState:
    return AgentState(
        id=a.id,
        pool=a.resource_pool,
        slots=tuple(str(sl["id"]) for sl in a.slots),
        disabled_slots=frozenset(str(sl["id"]) for sl in a.slots if not sl.get("enabled", True)),
        enabled=a.enabled,
        draining=a.draining,
    )


class _Needs:
    """What requests need of their agents (issue 23: environment features; issue 29:
    the Unix identity of the owner, by workspace), computed once per owner, workspace
    and pool."""

    def __init__(self, s: Session, ctx: MasterContext, agents: list[AgentRow]) -> None:
        self.s, self.ctx = s, ctx
        self.runtimes = {a.id: a.runtime for a in agents}
        self.pools: dict[str, list] = {}
        self.pool_agents: dict[str, set[str]] = {}
        for a in agents:
            self.pools.setdefault(a.resource_pool, []).append(a.runtime)
            self.pool_agents.setdefault(a.resource_pool, set()).add(a.id)
        self.identities: dict[tuple[int | None, int | None], TaskIdentity] = {}
        self.cache: dict[tuple[int | None, int | None, str], frozenset[str]] = {}
        self.workspaces: dict[int | None, int | None] = {}
        #: The workspace rows read with their projects, by id (this pass only).
        self.workspace_rows: dict[int | None, WorkspaceRow] = {}

    def identity(self, owner_id: int | None, workspace_id: int | None, pool: str) -> frozenset:
        key = (owner_id, workspace_id, pool)
        if key not in self.cache:
            who = (owner_id, workspace_id)
            if who not in self.identities:
                default = self.ctx.config.security.default_task
                self.identities[who] = users.task_identity(
                    self.s, owner_id, default, workspace_id, self.workspace_rows.get(workspace_id)
                )
            self.cache[key] = identity_needs(self.identities[who], self.pools.get(pool, []))
        return self.cache[key]

    def workspace(self, exp: ExperimentRow) -> int | None:
        if exp.project_id not in self.workspaces:
            ws_id, row = users.project_workspace(self.s, exp.project_id)
            self.workspaces[exp.project_id] = ws_id
            if row is not None:  # task_identity then reads no workspace
                self.workspace_rows[row.id] = row
        return self.workspaces[exp.project_id]

    def features(self, agent: AgentRow, wanted: frozenset[str]) -> frozenset[str]:
        """The features among ``wanted`` that ``agent``'s runtime provides."""
        return frozenset(f for f in wanted if agent_has(agent.runtime, f))


def _trial_work(
    ctx: MasterContext, trial: TrialRow, exp: ExperimentRow, needs: _Needs
) -> PendingWork:
    cfg = ctx.experiment_config(exp)
    pool = cfg.resources.resource_pool or "default"
    request = Request(
        id=str(trial.id),
        group_id=str(exp.id),
        slots_needed=cfg.resources.slots_per_trial,
        priority=cfg.resources.priority,
        weight=cfg.resources.weight,
        max_slots=cfg.resources.max_slots,
        submitted_at=trial.start_time,
        needs=frozenset(required_features(cfg.environment, cfg.bind_mounts))
        | needs.identity(exp.owner_id, needs.workspace(exp), pool),
        avoid_agents=frozenset(excluded_agents(trial) & needs.pool_agents.get(pool, set())),
    )
    return PendingWork(request, pool, trial)


def _task_work(ctx: MasterContext, tasks: list[TaskRow], needs: _Needs) -> list[PendingWork]:
    out = []
    for row in tasks:
        pool = row.config["resources"].get("resource_pool") or "default"
        (request,) = task_runs.task_requests([row], pool)
        need = needs.identity(row.owner_id, row.workspace_id, pool)
        out.append(PendingWork(replace(request, needs=need), pool, row))
    return out


def _running(
    s: Session, ctx: MasterContext, live: list[AllocationRow], exps: dict[int, ExperimentRow]
) -> list[tuple[Allocation, AllocationRow]]:
    """The scheduler's view of the live allocations, each with its row. An experiment
    already read with the pending trials (the usual case) is not read, nor its config
    decoded, again."""
    task_ids = {a.task_id for a in live if a.task_id is not None}
    configs = {}
    if task_ids:
        rows = s.scalars(select(TaskRow).where(TaskRow.id.in_(task_ids)))
        configs = {row.id: row.config for row in rows}
    trial_ids = {a.trial_id for a in live if a.trial_id is not None}
    exp_of: dict[int, int] = {}
    if trial_ids:
        query = select(TrialRow.id, TrialRow.experiment_id).where(TrialRow.id.in_(trial_ids))
        exp_of = {t: e for t, e in s.execute(query).all()}
    missing = set(exp_of.values()) - exps.keys()
    if missing:
        read = s.scalars(select(ExperimentRow).where(ExperimentRow.id.in_(missing)))
        exps = {**exps, **{e.id: e for e in read}}
    out = []
    for alloc in live:
        if alloc.task_id is not None:
            out.append((task_runs.task_allocation(alloc, configs[alloc.task_id]), alloc))
            continue
        assert alloc.trial_id is not None  # not a task's, so a trial's allocation
        exp = exps[exp_of[alloc.trial_id]]
        res = ctx.experiment_config(exp).resources
        slots = {alloc.agent_id: tuple(str(x) for x in alloc.slot_ids)}
        allocation = Allocation(
            id=str(alloc.trial_id),
            group_id=str(exp.id),
            slots=slots,
            priority=res.priority,
            weight=res.weight,
        )
        out.append((allocation, alloc))
    return out
