"""Agents: registration (with reconciliation of what an agent still runs), heartbeats
(handing over new work and kill orders), lost agents, the operator's switches of agents
and slots, and the resource pool overview (seed 004; reference §5).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from ..auth import hash_token, new_token
from ..context import MasterContext
from ..db import AgentRow, AllocationRow, ClusterRow, InstanceRow, TrialRow
from ..errors import BadRequest, Forbidden, NotFound
from . import handover, runs
from .handover import LOST_ALLOCATION_GRACE

log = logging.getLogger("dauntless.master")


def read_agent(s: Session, agent_id: str) -> AgentRow:
    """A registered agent.

    Raises:
        NotFound: no such agent.
    """
    agent = s.get(AgentRow, agent_id)
    if agent is None:
        raise NotFound(f"agent {agent_id} not found")
    return agent


def register_agent(
    s: Session,
    ctx: MasterContext,
    agent_id: str,
    resource_pool: str,
    hostname: str,
    slots: list[dict[str, Any]],
    running: list[str] | None = None,
    runtime: dict[str, Any] | None = None,
) -> tuple[AgentRow, str]:
    """Add or replace an agent, reconcile what it runs, and issue its credential.

    Allocation parts of this agent that it lists in ``running`` are adopted (they kept
    running while the master or the connection was away); its other live parts that
    had been started are treated as lost (the agent restarted) and end as failed.
    Parts handed to it but not yet started stay assigned. Ids in ``running`` the
    master does not know, or knows as ended, are killed at the next heartbeat.

    Args:
        agent_id: the agent's id.
        resource_pool: its pool, one the master declares.
        hostname: its host name.
        slots: ``[{id, type, device}]``.
        running: allocation part ids the agent still runs (None: none).

    ``runtime`` is what the agent reported of its task runtime (``{name,
    containers, mount_namespace, identity}``; :mod:`dauntless.master.environments`).

    The agent's credential (:mod:`dauntless.master.auth_agents`) is made anew: its hash
    replaces the agent's earlier one in the row, and the caller hands the token to the
    agent once the transaction has committed.

    Returns:
        The agent's row and its new credential.

    Raises:
        BadRequest: an unknown resource pool, duplicate slot ids, more slots than
            ``security.agents.max_slots``, or artificial slots where
            ``security.agents.allow_artificial_slots`` is off (agents a provider of the
            master launched may have them: its config gave them).
    """
    pools = [p.pool_name for p in ctx.config.resource_pools]
    if resource_pool not in pools:
        raise BadRequest(
            f"unknown resource pool {resource_pool!r}; the master declares {pools}",
            [("resource_pool", f"one of {pools}")],
        )
    ids = [str(sl["id"]) for sl in slots]
    if len(set(ids)) != len(ids):
        raise BadRequest("slot ids must be unique", [("slots", f"duplicates in {ids}")])
    _check_slot_policy(s, ctx, agent_id, slots)
    now = ctx.clock()
    agent = s.get(AgentRow, agent_id)
    clean = [
        {
            "id": str(sl["id"]),
            "type": sl.get("type", "cpu"),
            "device": sl.get("device", ""),
            "enabled": True,
        }
        for sl in slots
    ]
    if agent is None:
        agent = AgentRow(
            id=agent_id,
            resource_pool=resource_pool,
            hostname=hostname,
            state="ACTIVE",
            enabled=True,
            draining=False,
            slots=clean,
            registered_at=now,
            last_heartbeat=now,
            runtime=runtime,
        )
        s.add(agent)
    else:
        old = {sl["id"]: sl.get("enabled", True) for sl in agent.slots}
        for sl in clean:
            sl["enabled"] = old.get(sl["id"], True)
        agent.resource_pool, agent.hostname, agent.slots = resource_pool, hostname, clean
        agent.runtime = runtime
        agent.state, agent.registered_at, agent.last_heartbeat = "ACTIVE", now, now
        still = set(running or [])
        for alloc in s.scalars(
            select(AllocationRow).where(
                AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED"
            )
        ).all():
            if alloc.id in still or alloc.state == "ASSIGNED":
                if alloc.id in still:
                    log.info("agent %s still runs %s: adopted", agent_id, alloc.id)
                continue
            runs.terminate(s, ctx, alloc, None, "the agent restarted")
    token = new_token()
    agent.token_hash = hash_token(token)
    ctx.wake_after_commit(s)
    log.info("agent %s registered with %d slots in pool %s", agent_id, len(slots), resource_pool)
    return agent, token


def _check_slot_policy(
    s: Session, ctx: MasterContext, agent_id: str, slots: list[dict[str, Any]]
) -> None:
    """Refuse what ``security.agents`` does not allow (see :func:`register_agent`)."""
    policy = ctx.config.security.agents
    if len(slots) > policy.max_slots:
        raise BadRequest(
            f"agent {agent_id} registers {len(slots)} slots; this master accepts at most "
            f"{policy.max_slots} per agent (security.agents.max_slots)",
            [("slots", f"at most {policy.max_slots} slots")],
        )
    artificial = [str(sl["id"]) for sl in slots if sl.get("device") == "artificial"]
    if artificial and not policy.allow_artificial_slots:
        instance = s.get(InstanceRow, agent_id)
        if instance is None or instance.state == "TERMINATED":
            raise BadRequest(
                f"agent {agent_id} registers artificial slots ({', '.join(artificial)}); "
                "this master does not allow them (security.agents.allow_artificial_slots)",
                [("slots", "artificial slots are not allowed by the master config")],
            )


def placements(s: Session, allocation_ids: list[str]) -> dict[str, str]:
    """The agent each existing allocation part of ``allocation_ids`` was placed on
    (``{part id: agent id}``; unknown ids are left out). A part never moves."""
    rows = s.execute(
        select(AllocationRow.id, AllocationRow.agent_id).where(
            AllocationRow.id.in_(list(dict.fromkeys(allocation_ids)))
        )
    ).all()
    return {part: agent for part, agent in rows}


def check_reports(
    placed: dict[str, str], agent_id: str, part_id: str | None, allocation_ids: list[str]
) -> None:
    """Refuse an agent's report about allocation parts it does not run: every one of
    ``allocation_ids`` that exists (is in ``placed``, :func:`placements`) must be placed
    on ``agent_id`` (and, for a Slurm job's credential, be ``part_id`` itself). Unknown
    ids pass: the routes answer them as before (404, or skipped).

    Raises:
        Forbidden: naming the first part that belongs to another agent.
    """
    for alloc_id in dict.fromkeys(allocation_ids):
        owner = placed.get(alloc_id)
        if owner is None:
            continue
        if owner != agent_id or (part_id is not None and alloc_id != part_id):
            who = f"the Slurm job of part {part_id}" if part_id else f"agent {agent_id}"
            raise Forbidden(
                f"{who} may report only about the allocations placed on it; "
                f"allocation {alloc_id} is not one of them"
            )


def runs_work_of(
    s: Session,
    agent_id: str,
    part_id: str | None,
    experiment_id: int | None = None,
    task_id: str | None = None,
) -> None:
    """Refuse an agent's download of a context it has no live allocation for: of a trial
    of ``experiment_id``, or of ``task_id``.

    Raises:
        Forbidden: the agent (or the Slurm job's part) runs no such allocation.
    """
    q = select(AllocationRow.id).where(
        AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED"
    )
    if part_id is not None:
        q = q.where(AllocationRow.id == part_id)
    if experiment_id is not None:
        q = q.join(TrialRow, TrialRow.id == AllocationRow.trial_id).where(
            TrialRow.experiment_id == experiment_id
        )
        what = f"experiment {experiment_id}"
    else:
        q = q.where(AllocationRow.task_id == task_id)
        what = f"task {task_id}"
    if s.scalar(q.limit(1)) is None:
        raise Forbidden(
            f"agent {agent_id} runs no allocation of {what}, so it may not download its context"
        )


def beat(
    s: Session,
    ctx: MasterContext,
    agent_id: str,
    running: list[str],
    now: float,
    arrived: float | None = None,
) -> tuple[dict[str, Any], frozenset[str] | None]:
    """Record an agent's heartbeat at ``now`` (epoch s) listing the parts it runs
    (``running``); hand it new tasks (again those whose answer it never got, given
    ``arrived``, when the beat arrived: :mod:`.handover`) and kill orders. And whether
    the beat was quiet: the agent was ACTIVE, every live part placed on it was RUNNING
    and listed in ``running``, so the beat wrote only its time, and the same beat later
    gets the same answer until the agent's row or parts change
    (:class:`dauntless.master.heartbeats.Heartbeats` then answers it from memory).

    Returns:
        The answer, and for a quiet beat the ids of its live parts that are trials'
        runs (whose resource samples :func:`.task_resources.record_samples` does not
        store); None for a beat that was not quiet.

    Raises:
        NotFound: the agent is not registered (it must register again).
    """
    # The state alone: decoding an agent's slots on every beat was a quarter of its cost
    # (issue 37). The beat is one UPDATE no change flag watches (_PLACEMENT_IGNORES).
    # No statement when this transaction holds the row (a placement after exits read it).
    held = s.identity_map.get(identity_key(AgentRow, agent_id))
    state = held.state if held else s.scalar(select(AgentRow.state).where(AgentRow.id == agent_id))
    if state is None:
        raise NotFound(f"agent {agent_id} is not registered")
    if state != "ACTIVE":
        agent = s.get_one(AgentRow, agent_id)
        agent.last_heartbeat = now
        agent.state = "ACTIVE"
        ctx.wake.set()
    else:
        s.execute(
            update(AgentRow)
            .where(AgentRow.id == agent_id)
            .values(last_heartbeat=now)
            .execution_options(synchronize_session=False)
        )
    running_set = set(running)
    start: list[dict[str, Any]] = []
    kill: list[str] = []
    # Its live parts only (issue 37: reading every part it ever ran grew with trials);
    # a reported part not among them has ended or is unknown: killed either way.
    live = (AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED")
    # Most beats change no part: their columns tell, without loading rows (issue 37).
    brief = s.execute(
        select(
            AllocationRow.id,
            AllocationRow.state,
            AllocationRow.kill_requested,
            AllocationRow.started_at,
            AllocationRow.task_id,
        ).where(*live)
    ).all()
    live_ids = {a for a, *_ in brief}
    ctx.heartbeats.acknowledge(agent_id, running_set, live_ids)
    if not any(
        part_state == "ASSIGNED"
        or (
            part_state == "RUNNING"
            and alloc_id not in running_set
            and started_at is not None
            and now - started_at > LOST_ALLOCATION_GRACE
        )
        for alloc_id, part_state, _kill, started_at, _task in brief
    ):
        kill = [a for a, part_state, k, *_ in brief if part_state == "RUNNING" and k]
        kill += [a for a in running_set if a not in live_ids]
        # A RUNNING part it does not list (yet, within the grace) ends at a later beat.
        quiet = state == "ACTIVE" and all(
            part_state == "RUNNING" and alloc_id in running_set
            for alloc_id, part_state, *_ in brief
        )
        trials = frozenset(a for a, *_, task_id in brief if task_id is None)
        return {"start": start, "kill": sorted(set(kill))}, trials if quiet else None
    allocs = s.scalars(select(AllocationRow).where(*live)).all()
    by_id = {a.id: a for a in allocs}
    for alloc in allocs:
        if alloc.state == "ASSIGNED":
            start.append(handover.hand_over(s, ctx, alloc, now))
        elif alloc.state == "RUNNING":
            if alloc.kill_requested:
                kill.append(alloc.id)
            if (
                alloc.id not in running_set
                and alloc.started_at is not None
                and now - alloc.started_at > LOST_ALLOCATION_GRACE
                and handover.sent_after_hand_over(alloc, arrived)
            ):
                if not alloc.kill_requested and handover.answer_lost(ctx, agent_id, alloc):
                    start.append(handover.hand_over_again(s, ctx, alloc, now))
                else:
                    runs.terminate(s, ctx, alloc, None, "the agent no longer runs this task")
    for alloc_id in running_set:
        known = by_id.get(alloc_id)
        if known is None or known.state == "TERMINATED":  # ended by this heartbeat
            kill.append(alloc_id)
    return {"start": start, "kill": sorted(set(kill))}, None


def refresh_heartbeats(s: Session, now: float) -> None:
    """Give every ACTIVE agent a fresh heartbeat deadline from ``now`` (seconds since the
    epoch): at master start, its agents were not lost, the master was away."""
    for agent in s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")):
        agent.last_heartbeat = now


def reap_lost_agents(s: Session, ctx: MasterContext, now: float) -> None:
    """Mark ACTIVE agents silent for ``agent_timeout`` LOST and end their live parts (the
    trials restart elsewhere); the master's own stalls do not count (see heartbeats)."""
    # Only the lost ones are loaded (issue 37: decoding all rows cost a third of a pass).
    stale = select(AgentRow).where(
        AgentRow.state == "ACTIVE",
        AgentRow.last_heartbeat < now - ctx.config.agent_timeout,
    )
    ctx.heartbeats.flush(s)  # the beats answered from memory since the last pass
    if ctx.heartbeats.intake_stalled(time.monotonic()):
        return  # the master itself stood still: its agents' beats may be waiting
    for agent in s.scalars(stale).all():
        # Alive: one that beat after the flush (not in the row yet), one whose beat is in
        # flight; after a stall of the master's own, every deadline runs from its end.
        last = ctx.heartbeats.deadline_from(agent.id, agent.last_heartbeat)
        if now - last > ctx.config.agent_timeout and not ctx.heartbeats.in_flight(agent.id):
            log.warning("agent %s missed heartbeats for %.0f s: lost", agent.id, now - last)
            agent.state = "LOST"
            for alloc in s.scalars(
                select(AllocationRow).where(
                    AllocationRow.agent_id == agent.id,
                    AllocationRow.state != "TERMINATED",
                )
            ).all():
                runs.terminate(s, ctx, alloc, None, f"agent {agent.id} was lost")


def set_agent_enabled(
    s: Session, ctx: MasterContext, agent_id: str, enabled: bool, drain: bool = False
) -> AgentRow:
    """Enable or disable an agent.

    A disabled agent gets no new work. Without ``drain`` the trials running on it are
    preempted: they checkpoint, exit and resume elsewhere (not counted as restarts);
    with ``drain`` they run to their end.

    Raises:
        NotFound: no such agent.
    """
    agent = read_agent(s, agent_id)
    agent.enabled = enabled
    agent.draining = (not enabled) and drain
    if not enabled and not drain:
        for alloc in s.scalars(
            select(AllocationRow).where(
                AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED"
            )
        ):
            if alloc.state == "ASSIGNED":
                alloc.preempt_requested = True
                runs.terminate(s, ctx, alloc, 0, "its agent was disabled")
            else:
                alloc.preempt_requested = True
    ctx.wake_after_commit(s)
    return agent


def set_slot_enabled(
    s: Session, ctx: MasterContext, agent_id: str, slot_id: str, enabled: bool
) -> AgentRow:
    """Enable or disable one slot; a trial using a disabled slot is preempted.

    Raises:
        NotFound: no such agent or slot.
    """
    agent = read_agent(s, agent_id)
    slots = [dict(sl) for sl in agent.slots]
    found = False
    for sl in slots:
        if str(sl["id"]) == slot_id:
            sl["enabled"] = enabled
            found = True
    if not found:
        raise NotFound(
            f"agent {agent_id} has no slot {slot_id!r}; slots: {[sl['id'] for sl in slots]}"
        )
    agent.slots = slots
    if not enabled:
        for alloc in s.scalars(
            select(AllocationRow).where(
                AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED"
            )
        ):
            if slot_id in [str(x) for x in alloc.slot_ids]:
                alloc.preempt_requested = True
                if alloc.state == "ASSIGNED":
                    runs.terminate(s, ctx, alloc, 0, "its slot was disabled")
    ctx.wake_after_commit(s)
    return agent


def resource_pools(s: Session, ctx: MasterContext) -> list[dict[str, Any]]:
    """Every declared pool with its scheduler and slot counts (total, used, free,
    disabled) over its ACTIVE agents; for a pool with a ``provider``, its type,
    ``min_instances``/``max_instances`` and the live instances it launched."""
    agents = s.scalars(select(AgentRow)).all()
    instances: dict[str, int] = {}
    for pool_name in s.scalars(
        select(InstanceRow.resource_pool).where(InstanceRow.state != "TERMINATED")
    ):
        instances[pool_name] = instances.get(pool_name, 0) + 1
    used: dict[str, set[str]] = {}
    for alloc in s.scalars(select(AllocationRow).where(AllocationRow.state != "TERMINATED")):
        used.setdefault(alloc.agent_id, set()).update(str(x) for x in alloc.slot_ids)
    out = []
    for pool in ctx.config.resource_pools:
        members = [a for a in agents if a.resource_pool == pool.pool_name]
        live = [a for a in members if a.state == "ACTIVE"]
        counts = {"used": 0, "disabled": 0, "free": 0}
        for a in live:
            busy = used.get(a.id, set())
            for sl in a.slots:
                if str(sl["id"]) in busy:
                    counts["used"] += 1
                elif not a.enabled or a.draining or not sl.get("enabled", True):
                    counts["disabled"] += 1
                else:
                    counts["free"] += 1
        out.append(
            {
                "name": pool.pool_name,
                "description": pool.description,
                "scheduler": pool.scheduler.get("type", "priority"),
                "preemption": bool(pool.scheduler.get("preemption", False)),
                "agents": len(live),
                "agents_lost": len(members) - len(live),
                "slots_total": sum(counts.values()),
                "slots_used": counts["used"],
                "slots_disabled": counts["disabled"],
                "slots_free": counts["free"],
                "provider": pool.provider.type if pool.provider else None,
                "min_instances": pool.provider.min_instances if pool.provider else None,
                "max_instances": pool.provider.max_instances if pool.provider else None,
                "instances": instances.get(pool.pool_name, 0) if pool.provider else None,
            }
        )
    return out


def cluster_id(s: Session) -> str | None:
    """This cluster's id (made when the database was first set up), None before that."""
    cluster = s.scalar(select(ClusterRow))
    return cluster.cluster_id if cluster else None


def all_agents(s: Session) -> list[AgentRow]:
    """Every registered agent, by id."""
    return list(s.scalars(select(AgentRow).order_by(AgentRow.id)))


def slot_holders(s: Session, agent_id: str | None = None) -> dict[str, dict[str, str]]:
    """Which allocation holds each slot: ``{agent id: {slot id: allocation id}}``, from the
    allocations that have not ended (of ``agent_id`` only, unless None)."""
    q = select(AllocationRow).where(AllocationRow.state != "TERMINATED")
    if agent_id is not None:
        q = q.where(AllocationRow.agent_id == agent_id)
    used: dict[str, dict[str, str]] = {}
    for alloc in s.scalars(q):
        for sid in alloc.slot_ids:
            used.setdefault(alloc.agent_id, {})[str(sid)] = alloc.id
    return used
