"""Reads for the cluster's Prometheus state metrics (issue 34 scope 1): what
``/prom/det-state-metrics`` reports, as plain rows, one read session per scrape.

The cost of a read is a fixed number of queries (agents, live allocations, live
tasks, experiments and trials by state; the queue and the fold backlog for the
master's own page) whatever the cluster's size; the rows returned are those of live
things only (agents, allocations not TERMINATED, experiments not terminal), so the
answer stays as large as the cluster is busy, not as its history. The pages keep what
they read until those rows change (:class:`dauntless.master.prom.ScrapeCache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import (
    AgentRow,
    AllocationRow,
    ExperimentRow,
    MetricFoldPendingRow,
    TaskRow,
    TrialRow,
)

_TERMINAL_EXPERIMENT = ("COMPLETED", "CANCELED", "ERROR", "DELETED")

STATE_COLUMNS: dict[type, frozenset[str]] = {
    AgentRow: frozenset({"id", "resource_pool", "state", "slots"}),
    AllocationRow: frozenset(
        {"id", "group_id", "agent_id", "slot_ids", "trial_id", "task_id", "state"}
    ),
    ExperimentRow: frozenset({"id", "state", "config"}),
    TrialRow: frozenset({"id", "experiment_id", "state"}),
    TaskRow: frozenset({"id", "type", "state", "config"}),
}
"""The attributes :func:`state_snapshot` and :func:`queue_depth` read, per class: a
change of any other (an agent's ``last_heartbeat``, a trial's progress) leaves both
answers as they were. Keep it in step with the two functions."""


@dataclass
class StateSnapshot:
    """The cluster at one scrape.

    Attributes:
        agents: ``(agent_id, resource_pool, state, slots)`` with ``slots`` the agent's
            registered ``[{id, type, device, enabled}]``.
        allocations: live allocation parts: ``{container_id (the part's id),
            allocation_id (its group), agent_id, slot_ids, task_id, task_type, job_id,
            experiment_id, resource_pool}``.
        experiments: ``(experiment_id, state, labels, resource_pool)`` of experiments
            that are not terminal.
        experiment_states: experiments per state, all of them (terminal ones too).
        trial_states: trials per state.
        task_states: generic tasks per ``(type, state)``.
    """

    agents: list[tuple[str, str, str, list[dict[str, Any]]]] = field(default_factory=list)
    allocations: list[dict[str, Any]] = field(default_factory=list)
    experiments: list[tuple[int, str, list[str], str]] = field(default_factory=list)
    experiment_states: dict[str, int] = field(default_factory=dict)
    trial_states: dict[str, int] = field(default_factory=dict)
    task_states: dict[tuple[str, str], int] = field(default_factory=dict)


def _pool_of(config: dict[str, Any]) -> str:
    return str((config.get("resources") or {}).get("resource_pool") or "default")


def state_snapshot(s: Session) -> StateSnapshot:
    """Read the cluster's state for one scrape (see :class:`StateSnapshot`).

    Args:
        s: a read session.
    """
    snap = StateSnapshot()
    for agent in s.scalars(select(AgentRow).order_by(AgentRow.id)):
        snap.agents.append((agent.id, agent.resource_pool, agent.state, list(agent.slots or [])))
    live_exps = s.execute(
        select(ExperimentRow.id, ExperimentRow.state, ExperimentRow.config).where(
            ExperimentRow.state.not_in(_TERMINAL_EXPERIMENT)
        )
    ).all()
    pools: dict[int, str] = {}
    for eid, state, config in live_exps:
        pools[eid] = _pool_of(config or {})
        labels = [str(x) for x in (config or {}).get("labels") or []]
        snap.experiments.append((eid, state, labels, pools[eid]))
    for state, n in s.execute(
        select(ExperimentRow.state, func.count()).group_by(ExperimentRow.state)
    ):
        snap.experiment_states[state] = n
    for state, n in s.execute(select(TrialRow.state, func.count()).group_by(TrialRow.state)):
        snap.trial_states[state] = n
    for typ, state, n in s.execute(
        select(TaskRow.type, TaskRow.state, func.count()).group_by(TaskRow.type, TaskRow.state)
    ):
        snap.task_states[(typ, state)] = n
    live_tasks: dict[str, tuple[str, dict[str, Any]]] = {}
    for tid, typ, config in s.execute(
        select(TaskRow.id, TaskRow.type, TaskRow.config).where(
            TaskRow.state.in_(("QUEUED", "ASSIGNED", "RUNNING"))
        )
    ):
        live_tasks[tid] = (typ, config or {})
    allocs = s.execute(
        select(AllocationRow, TrialRow.experiment_id)
        .outerjoin(TrialRow, TrialRow.id == AllocationRow.trial_id)
        .where(AllocationRow.state != "TERMINATED")
    ).all()
    for a, exp_id in allocs:
        if a.trial_id is not None:
            task_id, task_type = f"trial-{a.trial_id}", "TRIAL"
            job_id = f"experiment-{exp_id}"
            pool = pools.get(exp_id, "default")
        else:
            typ, config = live_tasks.get(a.task_id or "", ("", {}))
            task_id, task_type = str(a.task_id), typ.upper()
            job_id, pool = f"task-{a.task_id}", _pool_of(config or {})
        snap.allocations.append(
            {
                "container_id": a.id,
                "allocation_id": a.group_id,
                "agent_id": a.agent_id,
                "slot_ids": [str(x) for x in a.slot_ids or []],
                "task_id": task_id,
                "task_type": task_type,
                "job_id": job_id,
                "experiment_id": exp_id,
                "resource_pool": pool,
            }
        )
    return snap


def queue_depth(s: Session) -> dict[str, int]:
    """Per resource pool, the trials and tasks waiting for slots (ACTIVE trials of
    ACTIVE experiments without a live allocation, QUEUED tasks). Three queries at most.

    Args:
        s: a read session.
    """
    live = (
        select(AllocationRow.trial_id)
        .where(AllocationRow.state != "TERMINATED", AllocationRow.trial_id.is_not(None))
        .scalar_subquery()
    )
    queued: dict[str, int] = {}
    waiting = dict(
        s.execute(
            select(TrialRow.experiment_id, func.count(TrialRow.id))
            .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
            .where(
                ExperimentRow.state == "ACTIVE",
                TrialRow.state == "ACTIVE",
                TrialRow.id.not_in(live),
            )
            .group_by(TrialRow.experiment_id)
        ).all()
    )
    if waiting:
        for exp_id, config in s.execute(
            select(ExperimentRow.id, ExperimentRow.config).where(ExperimentRow.id.in_(waiting))
        ):
            pool = _pool_of(config or {})
            queued[pool] = queued.get(pool, 0) + waiting[exp_id]
    for (config,) in s.execute(select(TaskRow.config).where(TaskRow.state == "QUEUED")):
        pool = _pool_of(config or {})
        queued[pool] = queued.get(pool, 0) + 1
    return queued


def fold_backlog(s: Session) -> int:
    """The metric reports acknowledged but not yet folded into summaries (one query).

    Args:
        s: a read session.
    """
    return int(s.scalar(select(func.count()).select_from(MetricFoldPendingRow)) or 0)


def sd_targets(s: Session) -> list[dict[str, Any]]:
    """Prometheus HTTP service discovery (Determined's ``/prom/det-http-sd-config``):
    one target group per ACTIVE agent that serves its own metrics, ``{"targets":
    ["host:port"], "labels": {"agent_id", "resource_pool"}}``.

    Args:
        s: a read session.
    """
    out = []
    for agent in s.scalars(
        select(AgentRow).where(AgentRow.state == "ACTIVE").order_by(AgentRow.id)
    ):
        target = (agent.runtime or {}).get("prometheus_target")
        if target:
            out.append(
                {
                    "targets": [str(target)],
                    "labels": {"agent_id": agent.id, "resource_pool": agent.resource_pool},
                }
            )
    return out
