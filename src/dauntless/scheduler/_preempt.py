"""Choosing preemption victims for a request that does not fit.

The victims' slots are not handed out in the same pass: the victims must checkpoint and
exit first. Instead the free slots the waiting request would use next to them are
reserved (taken out of the index), so smaller requests behind it cannot back-fill them
and the request finds its room on a later pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable

from ._state import PassState, Running

Allowed = Callable[[Running], bool]
Preference = Callable[[Running], tuple]


class RankedVictims:
    """The possible victims of one pass in preference order, and how far each request
    size has looked through them.

    Within a pass an agent's free slots only fall and chosen victims stay chosen, so a
    victim that cannot make room for an ``n``-slot request on its own (or is already
    chosen) never can later in the pass. ``skip[n]`` counts the leading victims known to
    be of no use to an ``n``-slot request alone; each search starts there, so all the
    one-victim searches of a pass together read each victim O(distinct sizes) times
    instead of once per request.

    Args:
        victims: preemptible running allocations sorted by the pass's preference (least
            valuable first); for any request the ones it may preempt form a prefix.
    """

    def __init__(self, victims: Iterable[Running]) -> None:
        self.victims: list[Running] = list(victims)
        self.skip: dict[int, int] = {}
        self._head = 0

    def first_unchosen(self) -> Running | None:
        """The least valuable victim not chosen yet, or None when all are chosen."""
        victims, head = self.victims, self._head
        while head < len(victims) and victims[head].chosen:
            head += 1
        self._head = head
        return victims[head] if head < len(victims) else None


def choose_victims(
    state: PassState,
    need: int,
    allowed: Allowed,
    preference: Preference,
    ranked: RankedVictims | GroupRanking | None = None,
    allowed_key: Hashable | None = None,
) -> list[Running] | None:
    """Pick running allocations whose preemption makes room for a ``need``-slot gang.

    Only preemptible allocations not yet chosen in this pass, for which ``allowed``
    holds, are considered. A request of at most ``state.single_cap`` slots gets room on
    one agent: the agent needing the fewest victims, then the least valuable ones (the
    most valuable victim of the set as little valuable as possible), then the fewest
    slots preempted, then the lowest agent id. A larger request takes agents in order of
    fewest victims, most room, least valuable victims and id, then gives back victims
    it does not need, most valuable first.

    Args:
        state: the pass state; on success the victims are marked ``chosen``, their ids
            appended to ``state.preemptions``, ``state.candidate_slots`` lowered and the
            free slots the request will use reserved.
        need: slots the request needs (>= 1), which do not fit in free slots now.
        allowed: whether an allocation may be preempted for this request.
        preference: sort key; smaller means preempt sooner.
        ranked: optionally, the pass's preemptible running allocations in
            ``preference`` order: a :class:`RankedVictims` (the allowed ones forming a
            prefix) or a :class:`GroupRanking` (the allowed groups' victims, ordered
            as ``preference`` orders them); lets a single-agent request find a
            one-victim answer without scanning every agent. The answer is the same with
            or without it.
        allowed_key: optionally, a value naming ``allowed`` and ``preference``: calls
            with equal keys promise the same ``allowed`` answers and the same order for
            allocations not yet chosen, so the allowed candidates found on an agent are
            reused until a victim there is chosen. None disables the reuse.

    Returns:
        The victims, or None (nothing changed) when no allowed set makes room.
    """
    if need <= state.single_cap:
        found = (
            _one_victim(state, need, allowed, preference, ranked) if ranked is not None else None
        )
        if found is None:
            found = _single_agent(state, need, allowed, preference, allowed_key)
    else:
        found = _multi_agent(state, need, allowed, preference, allowed_key)
    if found is None:
        return None
    victims, reserve = found
    for victim in victims:
        victim.chosen = True
        state.preemptions.append(victim.id)
        for agent, count in victim.per_agent.items():
            if state.usable[agent]:
                state.candidate_slots[agent] -= count
                state.live_cache[agent] = None
                state.index.changed.append(agent)
    for agent, count in reserve:
        state.index.take(agent, count)
    return victims


def _room_alone(state: PassState, victim: Running, need: int) -> int | None:
    """The agent where ``victim`` alone makes room for ``need`` slots (the fewest of its
    slots there, then the lowest number), or None."""
    nfree, usable = state.index.nfree, state.usable
    best: tuple[int, int] | None = None
    for agent, count in victim.per_agent.items():
        if usable[agent] >= need and nfree[agent] + count >= need:
            if best is None or (count, agent) < best:
                best = (count, agent)
    return None if best is None else best[1]


def _first_alone(
    state: PassState,
    victims: list[Running],
    skip: dict[int, int],
    need: int,
    allowed: Allowed | None = None,
) -> tuple[Running, int] | None:
    """The first victim of ``victims`` at or after ``skip[need]`` that alone makes room
    for ``need`` slots, and the agent; stops (None) at the first unchosen victim that
    ``allowed`` refuses. Moves ``skip[need]`` past the victims that are chosen or of no
    use alone for ``need`` slots: within a pass they stay so (see :class:`RankedVictims`).
    """
    # No agent has ``need`` free slots, so a victim holding fewer than ``need - top``
    # slots cannot make room alone anywhere.
    smallest = need - state.index.max_free()
    position = skip.get(need, 0)
    end = len(victims)
    try:
        while position < end:
            victim = victims[position]
            if not victim.chosen:
                if allowed is not None and not allowed(victim):
                    return None
                if victim.slot_count >= smallest:
                    agent = _room_alone(state, victim, need)
                    if agent is not None:
                        return victim, agent
            position += 1
        return None
    finally:
        skip[need] = position


class GroupedVictims:
    """Preemptible running allocations per group, each group's in a fixed order, for
    victim orders that rank groups first and change between searches (fair share ranks
    groups by how far over their share they are).

    Args:
        victims: preemptible running allocations.
        within: sort key inside a group (smaller: preempted sooner).
    """

    def __init__(self, victims: Iterable[Running], within: Preference) -> None:
        self.by_group: dict[str, list[Running]] = {}
        for victim in victims:
            self.by_group.setdefault(victim.group_id, []).append(victim)
        for members in self.by_group.values():
            members.sort(key=within)
        self.skip: dict[str, dict[int, int]] = {group: {} for group in self.by_group}

    def ranking(self, tiers: list[list[str]]) -> GroupRanking:
        """The order for one search: ``tiers`` lists the allowed groups, best victims
        first; groups of one tier interleave by the within-group key."""
        return GroupRanking(self, tiers)


class GroupRanking:
    """One search's order over :class:`GroupedVictims` (see its ``ranking``)."""

    def __init__(self, grouped: GroupedVictims, tiers: list[list[str]]) -> None:
        self.grouped, self.tiers = grouped, tiers

    def one_victim(
        self, state: PassState, need: int, preference: Preference
    ) -> tuple[Running, int] | None:
        """The first victim in this order that alone makes room for ``need`` slots, and
        the agent where it does; None if none does.

        Only the tiers' groups are searched (they are the allowed ones). Within a tier
        the groups' first such victims are compared by ``preference``, whose leading
        part is equal across a tier.
        """
        by_group, skip = self.grouped.by_group, self.grouped.skip
        for tier in self.tiers:
            found = [
                hit
                for group in tier
                if group in by_group
                for hit in [_first_alone(state, by_group[group], skip[group], need)]
                if hit is not None
            ]
            if found:
                return min(found, key=lambda hit: preference(hit[0]))
        return None


def _one_victim(
    state: PassState,
    need: int,
    allowed: Allowed,
    preference: Preference,
    ranked: RankedVictims | GroupRanking,
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    """The best single-victim answer: the first allowed victim, in preference order,
    that alone makes room on one of its agents (fewest slots there, then lowest id)."""
    if isinstance(ranked, GroupRanking):
        hit = ranked.one_victim(state, need, preference)
    else:
        hit = _first_alone(state, ranked.victims, ranked.skip, need, allowed)
    if hit is None:
        return None
    victim, agent = hit
    return [victim], [(agent, state.index.nfree[agent])]


def _single_agent(
    state: PassState,
    need: int,
    allowed: Allowed,
    preference: Preference,
    allowed_key: Hashable | None,
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    best: tuple | None = None
    nfree, usable, upper = state.index.nfree, state.usable, state.candidate_slots
    cache = state.live_cache
    for agent in range(len(usable)):
        free = nfree[agent]
        if usable[agent] < need or free + upper[agent] < need:
            continue
        short = need - free
        if short <= 0:
            continue
        cached = cache[agent]  # _live_on's cache, read inline: this loop is hot
        if allowed_key is not None and cached is not None and cached[0] == allowed_key:
            live, extra, sizes = cached[1], cached[2], cached[3]
        else:
            live, extra, sizes = _live_on(state, agent, allowed, preference, allowed_key)
        if extra < short:
            continue
        fewest = _min_count(sizes, short)
        if best is not None:
            if fewest > best[0][0]:
                continue
            # Any ``fewest`` of ``live`` include one at least as valuable as live[fewest - 1].
            if fewest == best[0][0] and preference(live[fewest - 1]) > best[0][1][0]:
                continue
        picked = _fewest(live, short, agent, fewest)
        cost = (
            fewest,
            [preference(c) for c in reversed(picked)],  # most valuable first
            sum(c.per_agent[agent] for c in picked),
            agent,
        )
        if best is None or cost < best[0]:
            best = (cost, picked, agent, free)
    if best is None:
        return None
    _, picked, agent, free = best
    return picked, [(agent, free)]


def _live_on(
    state: PassState,
    agent: int,
    allowed: Allowed,
    preference: Preference,
    allowed_key: Hashable | None,
) -> tuple[list[Running], int, list[int]]:
    """Allowed, unchosen candidates on ``agent`` in preference order, the slots they
    hold there, and those slot counts largest first."""
    if allowed_key is not None:
        cached = state.live_cache[agent]
        if cached is not None and cached[0] == allowed_key:
            return cached[1], cached[2], cached[3]
    live: list[Running] = []
    extra = 0
    if state.candidate_slots[agent]:
        for candidate in state.candidates[agent]:
            if not candidate.chosen and allowed(candidate):
                live.append(candidate)
                extra += candidate.per_agent[agent]
        live.sort(key=preference)
    sizes = sorted((c.per_agent[agent] for c in live), reverse=True)
    if allowed_key is not None:
        state.live_cache[agent] = (allowed_key, live, extra, sizes)
    return live, extra, sizes


def _min_count(sizes_descending: list[int], short: int) -> int:
    """How many of the largest sizes it takes to reach ``short`` (they must suffice)."""
    covered = 0
    for count, size in enumerate(sizes_descending, start=1):
        covered += size
        if covered >= short:
            return count
    raise RuntimeError(f"sizes {sizes_descending} cannot cover {short} slots")  # unreachable


def _fewest(ordered: list[Running], short: int, agent: int, budget: int) -> list[Running]:
    """``budget`` allocations freeing ``short`` slots on ``agent``, least valuable first.

    ``ordered`` lists the candidates least valuable first; ``budget`` is the smallest
    count that can free enough (see :func:`_min_count`). Of all such sets this returns
    the one whose most valuable member is least valuable, then whose second most
    valuable member is, and so on: the most valuable member is the earliest candidate
    that, with the largest ``budget - 1`` of those before it, covers ``short``; the rest
    are chosen the same way among the candidates before it. At most 8 or so candidates
    hold slots on one agent, so the quadratic scan is cheap.
    """
    sizes = [candidate.per_agent[agent] for candidate in ordered]
    picked: list[Running] = []
    remaining, limit = short, len(ordered)
    for members in range(budget, 0, -1):
        for position in range(members - 1, limit):
            rest = sorted(sizes[:position], reverse=True)[: members - 1]
            if sizes[position] + sum(rest) >= remaining:
                break
        else:
            raise RuntimeError("victim search lost its covering set")  # unreachable
        picked.append(ordered[position])
        remaining -= sizes[position]
        limit = position
        if remaining <= 0:
            break
    picked.reverse()
    return picked


class _AgentOptions:
    """For one victim filter, every usable agent's (victims, room) for a multi-agent
    request, bucketed, and kept up to date from the index's change log.

    ``room`` is the agent's free slots plus what its allowed, unchosen candidates hold
    there; ``victims`` is how many candidates that is. Only agents whose free slots or
    candidates changed since the last request are read again, so a pass's multi-agent
    searches cost O(agents) once per filter plus O(changes), not O(agents) each.
    """

    def __init__(self) -> None:
        self.buckets: dict[tuple[int, int], set[int]] = {}
        self.key_of: dict[int, tuple[int, int]] = {}
        # Per bucket, a heap of (victims' values most valuable first, agent, stamp) that
        # orders a tie; entries of agents that moved since (older stamp) are dropped
        # when met.
        self.heaps: dict[tuple[int, int], list[tuple[list, int, int]]] = {}
        self.stamp: dict[int, int] = {}
        self.total = 0
        self.seen = 0  # entries of the change log already applied

    def update(
        self,
        state: PassState,
        agent: int,
        allowed: Allowed,
        preference: Preference,
        allowed_key: Hashable | None,
    ) -> None:
        """Recompute ``agent``'s bucket."""
        old = self.key_of.pop(agent, None)
        if old is not None:
            self.buckets[old].discard(agent)
            self.total += old[1]  # keys hold -room
        if not state.usable[agent]:
            return
        room = state.index.nfree[agent]
        live: list[Running] = []
        if state.candidate_slots[agent]:
            live, extra, _ = _live_on(state, agent, allowed, preference, allowed_key)
            room += extra
        if room:
            key = (len(live), -room)
            self.key_of[agent] = key
            self.buckets.setdefault(key, set()).add(agent)
            self.total += room
            stamp = self.stamp[agent] = self.stamp.get(agent, 0) + 1
            values = sorted((preference(c) for c in live), reverse=True)
            heapq.heappush(self.heaps.setdefault(key, []), (values, agent, stamp))

    def first_of(self, key: tuple[int, int], count: int) -> list[int]:
        """The ``count`` agents of bucket ``key`` with the least valuable victims (most
        valuable first compared, then agent number)."""
        heap = self.heaps[key]
        got: list[tuple[list, int, int]] = []
        while len(got) < count:
            entry = heapq.heappop(heap)
            agent = entry[1]
            if self.key_of.get(agent) == key and self.stamp[agent] == entry[2]:
                got.append(entry)
        for entry in got:
            heapq.heappush(heap, entry)
        return [entry[1] for entry in got]


def _multi_agent(
    state: PassState,
    need: int,
    allowed: Allowed,
    preference: Preference,
    allowed_key: Hashable | None,
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    log = state.index.changed
    options = state.multi_options.get(allowed_key) if allowed_key is not None else None
    if options is None:
        options = _AgentOptions()
        for agent in range(len(state.usable)):
            options.update(state, agent, allowed, preference, allowed_key)
        if allowed_key is not None:
            state.multi_options[allowed_key] = options
    else:
        for agent in set(log[options.seen :]):
            options.update(state, agent, allowed, preference, allowed_key)
    options.seen = len(log)
    if options.total < need:
        return None
    # Agents go in order of (victims, -room, victims' values, id). The number taken
    # depends only on the rooms, so the values are needed only to break the tie
    # inside the last (victims, room) bucket that is reached.
    chosen: list[int] = []
    room = 0
    for key in sorted(k for k, agents in options.buckets.items() if agents):
        agents = options.buckets[key]
        per_agent = -key[1]
        if room + per_agent * len(agents) < need:
            chosen.extend(sorted(agents))
            room += per_agent * len(agents)
            continue
        wanted = -(-(need - room) // per_agent)
        chosen.extend(options.first_of(key, wanted))
        room += per_agent * wanted
        break
    picked = [
        (agent, _live_on(state, agent, allowed, preference, allowed_key)[0]) for agent in chosen
    ]
    victims: dict[str, Running] = {c.id: c for _, live in picked for c in live}
    for victim in sorted(victims.values(), key=preference, reverse=True):
        freed_here = sum(victim.per_agent.get(agent, 0) for agent in chosen)
        if room - freed_here >= need:
            del victims[victim.id]
            room -= freed_here
    kept = sorted(victims.values(), key=lambda v: v.id)
    remaining = need - sum(v.per_agent.get(agent, 0) for v in kept for agent in chosen)
    reserve: list[tuple[int, int]] = []
    for agent in chosen:
        count = min(state.index.nfree[agent], max(remaining, 0))
        if count:
            reserve.append((agent, count))
            remaining -= count
    return kept, reserve
