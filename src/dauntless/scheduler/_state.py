"""The mutable working state of one scheduling pass, built from validated inputs."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._index import FreeIndex, Placement
from ._model import AgentState, Allocation, Assignment, PoolSpec, Request

if TYPE_CHECKING:
    from ._preempt import GroupedVictims


@dataclass(slots=True)
class Running:
    """A running allocation of this pool, as preemption and fair share see it.

    Attributes:
        id, group_id, priority (effective), weight, preemptible: from the allocation.
        per_agent: agent number -> slots held there (pool agents only).
        slot_count: slots held in this pool.
        chosen: already picked as a preemption victim in this pass.
    """

    id: str
    group_id: str
    priority: int
    weight: float
    preemptible: bool
    per_agent: dict[int, int]
    slot_count: int
    chosen: bool = False


@dataclass
class PassState:
    """Everything one pass reads and updates.

    Attributes:
        pool: the pool being scheduled.
        agent_ids: ids of the pool's agents, sorted; an agent's number is its position.
        accepts: per agent number, whether it takes new work (enabled, not draining).
        usable: per agent number, enabled slots if it takes new work, else 0.
        single_cap: the most usable slots of any agent; larger requests span agents.
        index: free slots of agents that take new work.
        zero_slot_tasks: per agent number, zero-slot tasks running there.
        group_slots: group id -> slots its running allocations hold in this pool.
        running: running allocations of this pool, by id order.
        candidates: per agent number, preemptible running allocations with slots there
            (agents that take new work only).
        candidate_slots: per agent number, slots those candidates hold there, less the
            ones already chosen as victims: an upper bound on what preemption can free.
        live_cache: per agent number, None or (key of a victim filter, the allowed
            unchosen candidates there in preference order, the slots they hold there,
            those slot counts largest first); cleared when a victim there is chosen.
        multi_options: victim-filter key -> the per-agent room summary that multi-agent
            victim searches keep current (see ``_preempt._AgentOptions``).
        grouped_victims: None, or the ``_preempt.GroupedVictims`` that fair share's
            victim searches share during the pass.
        assignments, preemptions: the decision being built.
    """

    pool: PoolSpec
    agent_ids: list[str]
    accepts: list[bool]
    usable: list[int]
    single_cap: int
    index: FreeIndex
    zero_slot_tasks: list[int]
    group_slots: dict[str, int]
    running: list[Running]
    candidates: list[list[Running]]
    candidate_slots: list[int]
    live_cache: list[tuple | None]
    multi_options: dict = field(default_factory=dict)
    grouped_victims: GroupedVictims | None = None
    assignments: list[Assignment] = field(default_factory=list)
    preemptions: list[str] = field(default_factory=list)

    def priority_of(self, request: Request) -> int:
        """The request's priority, or the pool's default when it gives none."""
        return self.pool.default_priority if request.priority is None else request.priority

    def assign(self, request: Request, placement: Placement) -> None:
        """Record an assignment of ``placement`` (slots already taken from the index)."""
        slots = {self.agent_ids[agent]: slot_ids for agent, slot_ids in sorted(placement)}
        self.assignments.append(Assignment(request.id, slots))
        count = sum(len(slot_ids) for _, slot_ids in placement)
        self.group_slots[request.group_id] = self.group_slots.get(request.group_id, 0) + count


def build_state(
    pool: PoolSpec,
    agents: Sequence[AgentState],
    running: Sequence[Allocation],
) -> PassState:
    """Index the pool's agents and running allocations.

    Args:
        pool: the pool being scheduled; agents of other pools are ignored.
        agents: all agents (any pool); ids must be unique.
        running: running allocations; those with no slot on a pool agent are ignored.

    Returns:
        A fresh :class:`PassState`.

    Raises:
        ValueError: a duplicate agent or allocation id, an allocation holding a slot
            its agent does not have, or two allocations holding the same slot.
    """
    seen_agents: set[str] = set()
    for agent in agents:
        if agent.id in seen_agents:
            raise ValueError(f"agents: agent id {agent.id!r} appears twice")
        seen_agents.add(agent.id)
    members = sorted((a for a in agents if a.pool == pool.name), key=lambda a: a.id)
    number = {agent.id: i for i, agent in enumerate(members)}

    held: list[set[str]] = [set(agent.busy_slots) for agent in members]
    slot_sets = [frozenset(agent.slots) for agent in members]
    zero_slot_tasks = [0] * len(members)
    group_slots: dict[str, int] = {}
    records: list[Running] = []
    seen_allocs: set[str] = set()
    for alloc in sorted(running, key=lambda a: a.id):
        if alloc.id in seen_allocs:
            raise ValueError(f"running: allocation id {alloc.id!r} appears twice")
        seen_allocs.add(alloc.id)
        per_agent: dict[int, int] = {}
        in_pool = False
        items = alloc.slots.items()
        for agent_id, slot_ids in sorted(items) if len(items) > 1 else items:
            i = number.get(agent_id)
            if i is None:
                continue
            in_pool = True
            if not slot_sets[i].issuperset(slot_ids):
                unknown = sorted(set(slot_ids) - slot_sets[i])
                raise ValueError(
                    f"running: allocation {alloc.id!r} holds slots {unknown} that agent "
                    f"{agent_id!r} does not have"
                )
            if not held[i].isdisjoint(slot_ids):
                clash = sorted(held[i].intersection(slot_ids))
                raise ValueError(
                    f"running: allocation {alloc.id!r} holds slots {clash} of agent "
                    f"{agent_id!r} that are already held"
                )
            held[i].update(slot_ids)
            if slot_ids:
                per_agent[i] = len(slot_ids)
            else:
                zero_slot_tasks[i] += 1
        if not in_pool:
            continue
        count = sum(per_agent.values())
        group_slots[alloc.group_id] = group_slots.get(alloc.group_id, 0) + count
        priority = pool.default_priority if alloc.priority is None else alloc.priority
        records.append(
            Running(
                alloc.id,
                alloc.group_id,
                priority,
                alloc.weight,
                alloc.preemptible,
                per_agent,
                count,
            )
        )

    free: list[list[str]] = []
    usable: list[int] = []
    for i, agent in enumerate(members):
        if agent.accepts_work:
            disabled, busy = agent.disabled_slots, held[i]
            enabled = [s for s in agent.slots if s not in disabled] if disabled else agent.slots
            usable.append(len(enabled))
            free.append([s for s in enabled if s not in busy] if busy else list(enabled))
        else:
            usable.append(0)
            free.append([])

    candidates: list[list[Running]] = [[] for _ in members]
    candidate_slots = [0] * len(members)
    for record in records:
        if record.preemptible:
            for i, count in record.per_agent.items():
                if usable[i]:
                    candidates[i].append(record)
                    candidate_slots[i] += count

    return PassState(
        pool=pool,
        agent_ids=[agent.id for agent in members],
        accepts=[agent.accepts_work for agent in members],
        usable=usable,
        single_cap=max(usable, default=0),
        index=FreeIndex(free),
        zero_slot_tasks=zero_slot_tasks,
        group_slots=group_slots,
        running=records,
        candidates=candidates,
        candidate_slots=candidate_slots,
        live_cache=[None] * len(members),
    )


def place_zero_slot(state: PassState, requests: Sequence[Request]) -> None:
    """Place zero-slot requests, in the given order, on agents that take work.

    Each goes to the agent running the fewest zero-slot tasks (lowest id on ties), up to
    the pool's ``max_zero_slot_tasks_per_agent``; the rest wait.

    Args:
        state: the pass state (updated).
        requests: zero-slot requests, already in scheduling order.
    """
    limit = state.pool.max_zero_slot_tasks_per_agent
    heap = [(state.zero_slot_tasks[i], i) for i, ok in enumerate(state.accepts) if ok]
    heapq.heapify(heap)
    for request in requests:
        if not heap or heap[0][0] >= limit:
            return
        count, agent = heapq.heappop(heap)
        state.zero_slot_tasks[agent] = count + 1
        heapq.heappush(heap, (count + 1, agent))
        state.assign(request, [(agent, ())])
