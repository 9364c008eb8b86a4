"""Operator actions on the cluster: enabling and disabling agents and slots, and the
resource pool overview (seed 004; reference §5 ``det agent|slot|resource-pool``).

Methods of :class:`~dauntless.master.manager.ExperimentManager` (mixed in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from .db import AgentRow, AllocationRow, InstanceRow

if TYPE_CHECKING:
    from .manager import ExperimentManager


class ClusterMixin:
    """Agent and slot switches and pool summaries; see the module docstring."""

    def _agent(self: ExperimentManager, s, agent_id: str) -> AgentRow:
        from .errors import NotFound

        agent = s.get(AgentRow, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        return agent

    def set_agent_enabled(
        self: ExperimentManager, agent_id: str, enabled: bool, drain: bool = False
    ) -> AgentRow:
        """Enable or disable an agent.

        A disabled agent gets no new work. Without ``drain`` the trials running on it are
        preempted: they checkpoint, exit and resume elsewhere (not counted as restarts);
        with ``drain`` they run to their end.

        Raises:
            NotFound: no such agent.
        """
        with self.db.write() as s:
            agent = self._agent(s, agent_id)
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
                        self._terminate(s, alloc, 0, "its agent was disabled")
                    else:
                        alloc.preempt_requested = True
        self.wake.set()
        return agent

    def set_slot_enabled(
        self: ExperimentManager, agent_id: str, slot_id: str, enabled: bool
    ) -> AgentRow:
        """Enable or disable one slot; a trial using a disabled slot is preempted.

        Raises:
            NotFound: no such agent or slot.
        """
        from .errors import NotFound

        with self.db.write() as s:
            agent = self._agent(s, agent_id)
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
                            self._terminate(s, alloc, 0, "its slot was disabled")
        self.wake.set()
        return agent

    def resource_pools(self: ExperimentManager) -> list[dict[str, Any]]:
        """Every declared pool with its scheduler and slot counts (total, used, free,
        disabled) over its ACTIVE agents; for a pool with a ``provider``, its type,
        ``min_instances``/``max_instances`` and the live instances it launched."""
        with self.db.read() as s:
            agents = s.scalars(select(AgentRow)).all()
            instances: dict[str, int] = {}
            for pool_name in s.scalars(
                select(InstanceRow.resource_pool).where(InstanceRow.state != "TERMINATED")
            ):
                instances[pool_name] = instances.get(pool_name, 0) + 1
            used: dict[str, set[str]] = {}
            for alloc in s.scalars(
                select(AllocationRow).where(AllocationRow.state != "TERMINATED")
            ):
                used.setdefault(alloc.agent_id, set()).update(str(x) for x in alloc.slot_ids)
        out = []
        for pool in self.config.resource_pools:
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
