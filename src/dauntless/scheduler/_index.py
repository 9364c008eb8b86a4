"""Free slots of a pool's agents, indexed by free-slot count, and gang fitting.

Agents are numbered 0..N-1 in agent-id order; ties always go to the lowest number, so
the choice is deterministic. Within one scheduling pass an agent's free count only
falls, which lets each bucket be a heap with lazy deletion: finding the best- or
worst-fitting agent costs O(max slots per agent + log N), not O(N).
"""

from __future__ import annotations

import heapq

from ._model import FittingPolicy

Placement = list[tuple[int, tuple[str, ...]]]


class FreeIndex:
    """Free slot ids per agent with O(1) total/max and bucketed best/worst fit.

    Args:
        free: per agent number, its free slot ids in hand-out order (an agent that takes
            no new work gets an empty list).
    """

    def __init__(self, free: list[list[str]]) -> None:
        self._free = [list(slots) for slots in free]
        self.nfree = [len(slots) for slots in self._free]
        top = max(self.nfree, default=0)
        # Agent numbers are appended in increasing order, so each list is already a heap.
        self._heaps: list[list[int]] = [[] for _ in range(top + 1)]
        for agent, count in enumerate(self.nfree):
            if count:
                self._heaps[count].append(agent)
        self._count = [len(heap) for heap in self._heaps]
        self._top = top
        self.total = sum(self.nfree)
        # Agents whose free count changed, in order (repeats allowed): lets callers keep
        # per-agent summaries current by re-reading only these.
        self.changed: list[int] = []

    def max_free(self) -> int:
        """The largest free-slot count of any agent."""
        while self._top > 0 and self._count[self._top] == 0:
            self._top -= 1
        return self._top

    def _first(self, count: int) -> int:
        """Lowest agent number among agents with exactly ``count`` free slots."""
        heap = self._heaps[count]
        while self.nfree[heap[0]] != count:
            heapq.heappop(heap)
        return heap[0]

    def pick(self, need: int, policy: FittingPolicy) -> int | None:
        """The agent a ``need``-slot piece goes to, or None if no agent has room.

        Args:
            need: slots wanted on one agent (>= 1).
            policy: ``"best"``: fewest free slots that suffice; ``"worst"``: most free.
        """
        top = self.max_free()
        if need > top:
            return None
        counts = range(need, top + 1) if policy == "best" else range(top, need - 1, -1)
        for count in counts:
            if self._count[count]:
                return self._first(count)
        return None  # unreachable: bucket ``top`` is non-empty

    def take(self, agent: int, count: int) -> tuple[str, ...]:
        """Remove and return the first ``count`` free slots of ``agent``.

        Raises:
            ValueError: ``count`` exceeds the agent's free slots.
        """
        old = self.nfree[agent]
        if count > old:
            raise ValueError(f"agent #{agent} has {old} free slots, cannot take {count}")
        if count == 0:
            return ()
        taken = tuple(self._free[agent][:count])
        del self._free[agent][:count]
        new = old - count
        self.nfree[agent] = new
        self.changed.append(agent)
        self._count[old] -= 1
        if new:
            self._count[new] += 1
            heapq.heappush(self._heaps[new], agent)
        self.total -= count
        return taken

    def place(self, need: int, single_cap: int, policy: FittingPolicy) -> Placement | None:
        """Gang-place ``need`` slots: all or nothing, on as few agents as possible.

        A request of at most ``single_cap`` slots (the most usable slots any agent has)
        goes on one agent or waits. A larger one takes the agents with the most free
        slots (whole free agents first) until the rest fits on one agent, which is
        chosen by ``policy``.

        Args:
            need: slots wanted (>= 1).
            single_cap: the largest usable slot count of an agent that takes work.
            policy: ``"best"`` or ``"worst"`` fitting.

        Returns:
            ``[(agent number, slot ids), ...]`` with the slots already taken, or None
            (nothing taken) when the request does not fit now.
        """
        if need <= single_cap:
            agent = self.pick(need, policy)
            return None if agent is None else [(agent, self.take(agent, need))]
        if self.total < need:
            return None
        placement: Placement = []
        remaining = need
        while remaining:
            top = self.max_free()
            if top >= remaining:
                agent = self.pick(remaining, policy)
                if agent is None:  # unreachable: top >= remaining
                    raise RuntimeError("free-slot index out of sync")
                placement.append((agent, self.take(agent, remaining)))
                break
            agent = self._first(top)
            placement.append((agent, self.take(agent, top)))
            remaining -= top
        return placement
