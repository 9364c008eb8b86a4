"""The ``fair_share`` scheduler: weighted max-min fair shares of a pool's slots.

Shares come from progressive filling (water-filling): every group's share rises in
proportion to its weight until it meets its demand, and groups still rising split what
is left (Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2, with weights).
Requests are then started group by group, the group furthest below its share first,
while they stay within the share; requests that would go over it use any slots left
afterwards. A group that waits within its share may preempt allocations of groups over
theirs, gracefully, as Determined's fair-share scheduler does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction

from ._model import Request
from ._preempt import GroupedVictims, choose_victims
from ._state import PassState, Running


def fair_shares(
    capacity: int, demand: Mapping[str, int], weight: Mapping[str, float]
) -> dict[str, int]:
    """Integer weighted max-min fair shares of ``capacity`` slots.

    Exact progressive filling over rationals, then rounding: each group gets the floor
    of its share and the slots left over go, one each, to the largest fractional parts
    (then the larger weight, then the smaller group id). No share exceeds its demand and
    the shares add up to ``min(capacity, sum of demands)``.

    Args:
        capacity: slots to share (>= 0).
        demand: group id -> slots it could use (>= 0).
        weight: group id -> weight (> 0) for every group in ``demand``.

    Returns:
        group id -> share in slots, for every group in ``demand``.

    Raises:
        ValueError: a negative capacity or demand, a missing or non-positive weight.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 slots, got {capacity}")
    for group, wanted in demand.items():
        if wanted < 0:
            raise ValueError(f"demand[{group!r}] must be >= 0 slots, got {wanted}")
        if group not in weight or not weight[group] > 0:
            raise ValueError(f"weight[{group!r}] must be given and > 0")
    if sum(demand.values()) <= capacity:
        return dict(demand)
    exact = {group: Fraction(weight[group]) for group in demand}
    order = sorted(demand, key=lambda g: (Fraction(demand[g]) / exact[g], g))
    left, weight_left = Fraction(capacity), sum(exact.values())
    real: dict[str, Fraction] = {}
    for position, group in enumerate(order):
        level = left / weight_left
        if demand[group] <= level * exact[group]:
            real[group] = Fraction(demand[group])
            left -= demand[group]
            weight_left -= exact[group]
            continue
        for rest in order[position:]:
            real[rest] = level * exact[rest]
        break
    shares = {group: int(value) for group, value in real.items()}
    spare = capacity - sum(shares.values())
    by_fraction = sorted(
        (g for g in demand if shares[g] < demand[g]),
        key=lambda g: (-(real[g] - shares[g]), -exact[g], g),
    )
    for group in by_fraction[:spare]:
        shares[group] += 1
    return shares


def run_fair_share(
    state: PassState,
    requests: Sequence[Request],
    caps: Mapping[str, int],
    weights: Mapping[str, float],
) -> None:
    """Schedule slot-using requests by weighted fair share.

    Args:
        state: the pass state (updated with assignments and preemptions).
        requests: pending requests with ``slots_needed >= 1``, sorted by
            (priority, submitted_at, id); each group takes its own in this order.
        caps: group id -> ``max_slots`` for the groups that have one.
        weights: group id -> weight, for every group with pending or running work.
    """
    queues: dict[str, list[Request]] = {}
    for request in requests:
        queues.setdefault(request.group_id, []).append(request)
    groups = sorted(set(queues) | set(state.group_slots))
    demand = {}
    for group in groups:
        wanted = state.group_slots.get(group, 0) + sum(
            r.slots_needed for r in queues.get(group, ())
        )
        cap = caps.get(group)
        demand[group] = wanted if cap is None else min(wanted, cap)
    capacity = state.index.total + sum(state.group_slots.values())
    shares = fair_shares(capacity, demand, {g: weights[g] for g in groups})

    over: dict[str, list[Request]] = {}
    released: dict[str, int] = {}
    failed: dict[bool, int] = {}
    index, policy = state.index, state.pool.fitting_policy
    # Whether some over-share group has a preemptible allocation left; it only changes
    # when a preemption is decided (phase-one assignments never take a group over).
    preemptable = _can_preempt(state, shares, released)
    for group, queue, position in _neediest_first(state, queues, weights):
        request = queue[position]
        need = request.slots_needed
        used = state.group_slots.get(group, 0)
        if used + need > shares[group]:
            over.setdefault(group, []).append(request)
            if used >= shares[group]:  # the group's share is used up: the rest is over it
                over[group].extend(queue[position + 1 :])
                queue[position + 1 :] = []
            continue
        placement = index.place(need, state.single_cap, policy)
        if placement is not None:
            state.assign(request, placement)
            continue
        if not preemptable:
            if index.total == 0:
                return  # nothing can start or be made room for any more
            continue
        single = need <= state.single_cap
        if failed.get(single, need + 1) <= need:
            continue
        if _preempt_for(state, need, shares, weights, released):
            state.group_slots[group] = used + need
            preemptable = _can_preempt(state, shares, released)
        else:
            failed[single] = need

    for group, queue, position in _neediest_first(state, over, weights):
        if index.total == 0:
            return
        request = queue[position]
        cap = caps.get(group)
        if cap is not None and state.group_slots.get(group, 0) + request.slots_needed > cap:
            continue
        placement = index.place(request.slots_needed, state.single_cap, policy)
        if placement is not None:
            state.assign(request, placement)


def _neediest_first(
    state: PassState, queues: Mapping[str, list[Request]], weights: Mapping[str, float]
) -> Iterator[tuple[str, list[Request], int]]:
    """Yield (group, its queue, position) one request at a time, always from the group
    with the fewest slots per weight (ties by group id); a queue may be cut short by
    the caller while iterating."""
    heap = [(state.group_slots.get(g, 0) / weights[g], g) for g in queues]
    heapq.heapify(heap)
    positions = dict.fromkeys(queues, 0)
    while heap:
        _, group = heapq.heappop(heap)
        queue, position = queues[group], positions[group]
        yield group, queue, position
        positions[group] = position + 1
        if position + 1 < len(queue):
            heapq.heappush(heap, (state.group_slots.get(group, 0) / weights[group], group))


def _can_preempt(state: PassState, shares: Mapping[str, int], released: Mapping[str, int]) -> bool:
    """Whether any over-share group still has a preemptible allocation not yet chosen."""
    return any(
        not r.chosen
        and r.preemptible
        and state.group_slots.get(r.group_id, 0) - released.get(r.group_id, 0)
        > shares.get(r.group_id, 0)
        for r in state.running
    )


def _preempt_for(
    state: PassState,
    need: int,
    shares: Mapping[str, int],
    weights: Mapping[str, float],
    released: dict[str, int],
) -> bool:
    """Preempt allocations of over-share groups to make room for ``need`` slots."""

    excess = {
        group: used - released.get(group, 0) - shares.get(group, 0)
        for group, used in state.group_slots.items()
    }
    over = {group for group, slots in excess.items() if slots > 0}

    def allowed(victim: Running) -> bool:
        return victim.group_id in over

    def preference(victim: Running) -> tuple:
        group = victim.group_id
        return (-excess[group] / weights[group], victim.slot_count, victim.id)

    if state.grouped_victims is None:
        state.grouped_victims = GroupedVictims(
            (
                r
                for r in state.running
                if r.preemptible and any(state.usable[agent] for agent in r.per_agent)
            ),
            within=lambda victim: (victim.slot_count, victim.id),
        )
    tier_of = {group: -excess[group] / weights[group] for group in over}
    tiers = [
        list(members)
        for _, members in itertools.groupby(
            sorted(over, key=lambda group: (tier_of[group], group)), key=tier_of.__getitem__
        )
    ]
    # Which groups are over share changes only when a preemption is decided.
    victims = choose_victims(
        state,
        need,
        allowed,
        preference,
        ranked=state.grouped_victims.ranking(tiers),
        allowed_key=("fair_share", len(state.preemptions)),
    )
    if victims is None:
        return False
    for victim in victims:
        released[victim.group_id] = released.get(victim.group_id, 0) + victim.slot_count
    return True
