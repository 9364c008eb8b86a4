"""The scheduling pass: one pure function from pool state to a :class:`Decision`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter

from ._fair_share import run_fair_share
from ._model import AgentState, Allocation, Assignment, Decision, PoolSpec, Request
from ._priority import run_priority
from ._state import build_state, place_zero_slot


def schedule(
    pool: PoolSpec,
    agents: Sequence[AgentState],
    pending: Sequence[Request],
    running: Sequence[Allocation],
) -> Decision:
    """Decide which pending requests start where, and what to preempt, in one pool.

    Pure and deterministic: no I/O, no clock, and the result depends only on the
    inputs' values, not on the order of the sequences (ties break by id).

    Rules common to both schedulers:

    * Only agents with ``agent.pool == pool.name`` are used; running allocations with
      no slot on such an agent are ignored. Every pending request is taken to be for
      this pool.
    * An agent that is disabled or draining gets nothing new; disabled slots and slots
      held by running allocations (or listed in ``busy_slots``) are never assigned.
    * Gang scheduling: a request gets all its slots or none. One that needs at most as
      many slots as the largest agent offers goes on a single agent (``best`` fitting:
      the one with the fewest free slots that suffice; ``worst``: the most free slots);
      a larger one takes the agents with the most free slots first and places the rest
      on one agent by the fitting policy.
    * ``max_slots`` caps the slots a group holds in this pool, running ones included.
    * Zero-slot requests use no slots and are placed separately, in priority order, on
      the agent running the fewest zero-slot tasks, up to
      ``pool.max_zero_slot_tasks_per_agent`` each.
    * Preempted allocations keep their slots until they exit; the decision never hands
      them out in the same pass, and the free slots the waiting request will use are
      held back from back-fill.
    * A request runs only on agents that have every feature it ``needs``. Requests are
      decided in classes of equal needs, the most demanding first, each on the agents
      that have those features, with the slots earlier classes were given held back:
      fair share and priority order therefore hold within a class, not across classes.
    * A request with ``avoid_agents`` is decided after all the others, one at a time,
      on the remaining agents and the slots still free, and preempts nobody.

    ``priority`` scheduler: requests in order of (priority, submitted_at, id), lower
    priority values first; a request that does not fit is skipped and later ones that
    fit start (back-fill). With ``pool.preemption``, a request that does not fit
    preempts the fewest, lowest-priority preemptible allocations of strictly worse
    priority that make room for it, if any do.

    ``fair_share`` scheduler: weighted max-min fair shares (:func:`fair_shares`) of
    the pool's slots among groups, demand capped by ``max_slots``; groups furthest
    below their share start requests first, within their share, and may preempt
    preemptible allocations of over-share groups; left-over slots then go to requests
    over their group's share. Priority only orders requests within a group.

    Args:
        pool: the pool's scheduling settings.
        agents: agents of any pool; ids unique.
        pending: requests waiting for this pool; ids unique and not running.
        running: running allocations (any pool); ids unique; no two hold one slot.

    Returns:
        The :class:`Decision`: assignments in decision order, and allocations to preempt.

    Raises:
        TypeError: an argument is not of the documented type.
        ValueError: duplicate ids, a request that is also running, an allocation on a
            slot its agent lacks or on a slot another holds, or requests of one group
            that disagree on ``weight`` or ``max_slots``.
    """
    _check_types(pool, agents, pending, running)
    _check_request_ids(pending, running)
    free = [r for r in pending if not r.avoid_agents]
    classes = sorted({r.needs for r in free}, key=lambda n: (-len(n), sorted(n)))
    if not classes or classes == [frozenset()]:
        decision = _schedule_class(pool, agents, free, running)
    else:
        decision = Decision((), ())
        for need in classes:
            view = [_restricted(a, need, frozenset(), decision.assignments) for a in agents]
            part = _schedule_class(pool, view, [r for r in free if r.needs == need], running)
            decision = _merged(decision, part)
    for request in sorted((r for r in pending if r.avoid_agents), key=lambda r: r.id):
        view = [_restricted(a, request.needs, request.avoid_agents, ()) for a in agents]
        groups = {r.id: r.group_id for r in pending}
        taken = [*running, *(_as_running(a, groups) for a in decision.assignments)]
        part = _schedule_class(pool, view, [request], taken)
        decision = Decision(decision.assignments + part.assignments, decision.preemptions)
    return decision


def _restricted(
    agent: AgentState,
    need: frozenset[str],
    avoid: frozenset[str],
    assigned: Sequence[Assignment],
) -> AgentState:
    """``agent`` as one class of requests sees it: disabled when it lacks a needed
    feature or is to be avoided, with the slots ``assigned`` to earlier classes busy."""
    taken = {s for a in assigned for s in a.slots.get(agent.id, ())}
    usable = agent.enabled and need <= agent.features and agent.id not in avoid
    if usable == agent.enabled and not taken:
        return agent
    return replace(agent, enabled=usable, busy_slots=agent.busy_slots | frozenset(taken))


def _as_running(assignment: Assignment, groups: dict[str, str]) -> Allocation:
    """An assignment of this pass, as the allocation it becomes (for later requests)."""
    return Allocation(
        id=assignment.request_id,
        group_id=groups[assignment.request_id],
        slots=dict(assignment.slots),
    )


def _merged(a: Decision, b: Decision) -> Decision:
    return Decision(
        a.assignments + b.assignments,
        a.preemptions + tuple(p for p in b.preemptions if p not in a.preemptions),
    )


def _schedule_class(
    pool: PoolSpec,
    agents: Sequence[AgentState],
    pending: Sequence[Request],
    running: Sequence[Allocation],
) -> Decision:
    """:func:`schedule` for requests that need nothing special of their agents."""
    state = build_state(pool, agents, running)
    caps, weights = _group_settings(pending, state.running)
    ordered = _priority_order(pending, pool.default_priority)
    place_zero_slot(state, [r for r in ordered if r.slots_needed == 0])
    slot_requests = [r for r in ordered if r.slots_needed > 0]
    if pool.scheduler == "priority":
        run_priority(state, slot_requests, caps)
    else:
        run_fair_share(state, slot_requests, caps, weights)
    return Decision(tuple(state.assignments), tuple(state.preemptions))


def _check_request_ids(pending: Sequence[Request], running: Sequence[Allocation]) -> None:
    """Raise ValueError for a request id given twice or also given as running."""
    ids = {request.id for request in pending}
    running_ids = {alloc.id for alloc in running}
    if len(ids) == len(pending) and ids.isdisjoint(running_ids):
        return
    seen: set[str] = set()
    for request in pending:  # find the first offender, in the order given
        if request.id in seen:
            raise ValueError(f"pending: request id {request.id!r} appears twice")
        if request.id in running_ids:
            raise ValueError(
                f"pending: request {request.id!r} is also a running allocation; "
                "pass it in one of the two only"
            )
        seen.add(request.id)


def _priority_order(pending: Sequence[Request], default: int) -> list[Request]:
    """``pending`` sorted by (priority or ``default``, submitted_at, id).

    Three stable sorts on single keys (id, then submission, then priority) give the
    same order as one sort on the tuple, about three times faster: CPython compares
    plain strings, floats and ints with type-specialised code, but a tuple's later
    items with generic comparisons.
    """
    ordered = sorted(pending, key=attrgetter("id"))
    ordered.sort(key=attrgetter("submitted_at"))
    priorities = [default if p is None else p for p in map(attrgetter("priority"), ordered)]
    positions = sorted(range(len(ordered)), key=priorities.__getitem__)
    return [ordered[i] for i in positions]


def _check_types(pool: object, agents: object, pending: object, running: object) -> None:
    if not isinstance(pool, PoolSpec):
        raise TypeError(f"pool must be a PoolSpec, got {type(pool).__name__}")
    for name, value, kind in (
        ("agents", agents, AgentState),
        ("pending", pending, Request),
        ("running", running, Allocation),
    ):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be a sequence of {kind.__name__}")
        for item in value:
            if not isinstance(item, kind):
                raise TypeError(
                    f"{name} must hold only {kind.__name__} objects, got {type(item).__name__}"
                )


def _group_settings(pending: Sequence[Request], running) -> tuple[dict[str, int], dict[str, float]]:
    """Per-group ``max_slots`` and ``weight``; pending requests of a group must agree.

    A group with no pending request has no cap and takes the largest weight among its
    running allocations.
    """
    caps: dict[str, int] = {}
    weights: dict[str, float] = {}
    first: dict[str, Request] = {}
    for request in pending:
        group = request.group_id
        other = first.get(group)
        if other is None:
            first[group] = request
            weights[group] = request.weight
            if request.max_slots is not None:
                caps[group] = request.max_slots
        elif request.weight != other.weight or request.max_slots != other.max_slots:
            _raise_disagreement([r for r in pending if r.group_id == group])
    for record in running:
        if record.group_id not in first:
            weights[record.group_id] = max(weights.get(record.group_id, 0.0), record.weight)
    return caps, weights


def _raise_disagreement(requests: list[Request]) -> None:
    """Raise ValueError naming the first two requests (by id) of a group that differ."""
    requests = sorted(requests, key=lambda r: r.id)
    base = requests[0]
    for request in requests[1:]:
        for name in ("weight", "max_slots"):
            if getattr(request, name) != getattr(base, name):
                raise ValueError(
                    f"pending: requests {base.id!r} and {request.id!r} of group "
                    f"{base.group_id!r} disagree on {name} ({getattr(base, name)!r} vs "
                    f"{getattr(request, name)!r}); give every request of a group the same {name}"
                )
