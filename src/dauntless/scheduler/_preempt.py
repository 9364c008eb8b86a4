"""Choosing preemption victims for a request that does not fit.

The victims' slots are not handed out in the same pass: the victims must checkpoint and
exit first. Instead the free slots the waiting request would use next to them are
reserved (taken out of the index), so smaller requests behind it cannot back-fill them
and the request finds its room on a later pass.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from ._state import PassState, Running

Allowed = Callable[[Running], bool]
Preference = Callable[[Running], tuple]


def choose_victims(
    state: PassState,
    need: int,
    allowed: Allowed,
    preference: Preference,
    ranked: Sequence[Running] | None = None,
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
        ranked: optionally, the preemptible running allocations sorted by
            ``preference``, the allowed ones forming a prefix; lets a single-agent
            request find a one-victim answer without scanning every agent. The answer
            is the same with or without it.
        allowed_key: optionally, a value naming ``allowed`` and ``preference``: calls
            with equal keys promise the same ``allowed`` answers and the same order for
            allocations not yet chosen, so the allowed candidates found on an agent are
            reused until a victim there is chosen. None disables the reuse.

    Returns:
        The victims, or None (nothing changed) when no allowed set makes room.
    """
    if need <= state.single_cap:
        found = _one_victim(state, need, allowed, ranked) if ranked is not None else None
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
    for agent, count in reserve:
        state.index.take(agent, count)
    return victims


def _one_victim(
    state: PassState, need: int, allowed: Allowed, ranked: Sequence[Running]
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    """The best single-victim answer: the first allowed victim, in preference order,
    that alone makes room on one of its agents (fewest slots there, then lowest id)."""
    nfree, usable = state.index.nfree, state.usable
    # No agent has ``need`` free slots, so a victim holding fewer than ``need - top``
    # slots cannot make room alone anywhere.
    smallest = need - state.index.max_free()
    for victim in ranked:
        if victim.chosen:
            continue
        if not allowed(victim):
            return None
        if victim.slot_count < smallest:
            continue
        best: tuple[int, int] | None = None
        for agent, count in victim.per_agent.items():
            if usable[agent] >= need and nfree[agent] + count >= need:
                if best is None or (count, agent) < best:
                    best = (count, agent)
        if best is not None:
            agent = best[1]
            return [victim], [(agent, nfree[agent])]
    return None


def _single_agent(
    state: PassState, need: int, allowed: Allowed, preference: Preference,
    allowed_key: Hashable | None,
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    best: tuple | None = None
    nfree, usable, upper = state.index.nfree, state.usable, state.candidate_slots
    for agent in range(len(usable)):
        free = nfree[agent]
        if usable[agent] < need or free + upper[agent] < need:
            continue
        short = need - free
        live, extra, sizes = _live_on(state, agent, allowed, preference, allowed_key)
        if short <= 0 or extra < short:
            continue
        fewest = _min_count(sizes, short)
        if best is not None and fewest > best[0][0]:
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
    state: PassState, agent: int, allowed: Allowed, preference: Preference,
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
    count that can free enough (see :func:`_min_count`). Walk the candidates and keep
    one whenever the rest can still cover what is left within the remaining count. A
    covering set stays reachable at every step, so the walk always ends with exactly
    ``budget`` members.
    """
    picked: list[Running] = []
    remaining = short
    for position, candidate in enumerate(ordered):
        size = candidate.per_agent[agent]
        if size >= remaining:
            picked.append(candidate)
            return picked
        left = budget - len(picked) - 1
        if left <= 0:
            continue
        rest = sorted((c.per_agent[agent] for c in ordered[position + 1:]), reverse=True)
        if sum(rest[:left]) >= remaining - size:
            picked.append(candidate)
            remaining -= size
    raise RuntimeError("victim search lost its covering set")  # unreachable, see docstring


def _multi_agent(
    state: PassState, need: int, allowed: Allowed, preference: Preference,
    allowed_key: Hashable | None,
) -> tuple[list[Running], list[tuple[int, int]]] | None:
    options = []
    total = 0
    nfree, upper, cache = state.index.nfree, state.candidate_slots, state.live_cache
    for agent, usable in enumerate(state.usable):
        if not usable:
            continue
        if upper[agent]:
            cached = cache[agent]  # _live_on's cache, read inline: this loop is hot
            if allowed_key is not None and cached is not None and cached[0] == allowed_key:
                live, extra = cached[1], cached[2]
            else:
                live, extra, _ = _live_on(state, agent, allowed, preference, allowed_key)
            room = nfree[agent] + extra
        else:
            live, room = [], nfree[agent]
        if room:
            options.append((len(live), -room, agent, live))
            total += room
    if total < need:
        return None
    # Agents go in order of (victims, -room, victims' values, id). The number taken
    # depends only on the rooms, so the values are needed only to break the tie
    # inside the last (victims, room) group that is reached.
    options.sort(key=lambda option: option[:3])
    room, taken = 0, 0
    while room < need:
        room -= options[taken][1]
        taken += 1
    tie = options[taken - 1][:2]
    first = next(i for i, option in enumerate(options) if option[:2] == tie)
    last = first
    while last < len(options) and options[last][:2] == tie:
        last += 1
    group = sorted(
        options[first:last],
        key=lambda o: (sorted((preference(c) for c in o[3]), reverse=True), o[2]),
    )
    picked = options[:first] + group[: taken - first]
    chosen = [agent for _, _, agent, _ in picked]
    victims: dict[str, Running] = {c.id: c for _, _, _, live in picked for c in live}
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
