"""The ``priority`` scheduler: strict priority order with back-fill and preemption.

Requests run in order of (priority, submission, id), lower priority values first. A
request that does not fit does not block the ones behind it: any later request that
fits is started (back-fill). With preemption on, a request that does not fit may
preempt running, preemptible allocations of strictly worse priority; the free slots it
will use are then reserved so back-fill cannot take them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._model import Request
from ._preempt import RankedVictims, choose_victims
from ._state import PassState, Running


def run_priority(state: PassState, requests: Sequence[Request], caps: dict[str, int]) -> None:
    """Schedule slot-using requests in priority order.

    Args:
        state: the pass state (updated with assignments and preemptions).
        requests: pending requests with ``slots_needed >= 1``, already sorted by
            (priority, submitted_at, id).
        caps: group id -> ``max_slots`` for the groups that have one.
    """
    index, pool = state.index, state.pool
    # Failed preemption attempts: (single agent?, priority) -> smallest failing size. As a
    # pass goes on, victims and free slots only shrink, and a worse priority may preempt
    # fewer allocations, so a request no better and no smaller fails too.
    failed: dict[tuple[bool, int], int] = {}
    # Possible victims (preemptible, on an agent that takes work), worst priority
    # first.
    ranked = RankedVictims(
        sorted(
            (
                r
                for r in state.running
                if r.preemptible and any(state.usable[agent] for agent in r.per_agent)
            ),
            key=_preference,
        )
    )
    worst: int | None = None  # the worst priority among possible victims left
    for request in requests:
        if pool.preemption:
            first = ranked.first_unchosen()
            worst = first.priority if first is not None else None
        if index.total == 0 and (worst is None or state.priority_of(request) >= worst):
            # Full, and requests from here on (no better priority) may preempt nothing.
            return
        need = request.slots_needed
        cap = caps.get(request.group_id)
        if cap is not None and state.group_slots.get(request.group_id, 0) + need > cap:
            continue
        placement = index.place(need, state.single_cap, pool.fitting_policy)
        if placement is not None:
            state.assign(request, placement)
            continue
        if worst is None:
            continue
        priority = state.priority_of(request)
        single = need <= state.single_cap
        if priority >= worst or _known_failure(failed, single, priority, need):
            continue
        victims = choose_victims(
            state,
            need,
            allowed=_outranked_by(priority),
            preference=_preference,
            ranked=ranked,
            allowed_key=priority,
        )
        if victims is None:
            key = (single, priority)
            failed[key] = min(failed.get(key, need), need)
        else:
            # The request now owns the slots being freed: count them toward its cap.
            state.group_slots[request.group_id] = state.group_slots.get(request.group_id, 0) + need


def _known_failure(
    failed: dict[tuple[bool, int], int], single: bool, priority: int, need: int
) -> bool:
    return any(
        is_single == single and failed_priority <= priority and size <= need
        for (is_single, failed_priority), size in failed.items()
    )


def _preference(victim: Running) -> tuple:
    """Worst priority first, then the larger, then by id."""
    return (-victim.priority, -victim.slot_count, victim.id)


def _outranked_by(priority: int) -> Callable[[Running], bool]:
    """The victim filter of a request of ``priority``: running allocations of a larger
    priority number (a lower priority)."""
    return lambda running: running.priority > priority
