"""Property tests (hypothesis) and small simulations of repeated scheduling passes, and
checks that the victim searches' shortcuts and the request order give the plain answers."""

from __future__ import annotations

import itertools
import random
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.scheduler import AgentState, Allocation, PoolSpec, Request, _preempt, schedule
from dauntless.scheduler._preempt import RankedVictims, _fewest, _min_count, choose_victims
from dauntless.scheduler._schedule import _priority_order
from dauntless.scheduler._state import Running, build_state

SIZES = (0, 1, 1, 2, 2, 3, 4, 5, 8, 10, 12, 16)


@st.composite
def scenarios(draw, crowded=False):
    """(pool, agents, pending, running); ``crowded``: preemption on, every slot busy."""
    pool = PoolSpec(
        "default",
        scheduler=draw(st.sampled_from(["priority", "fair_share"])),
        preemption=crowded or draw(st.booleans()),
        fitting_policy=draw(st.sampled_from(["best", "worst"])),
        max_zero_slot_tasks_per_agent=draw(st.integers(0, 3)),
    )
    agents = []
    for i in range(draw(st.integers(0, 7))):
        slots = tuple(f"s{j}" for j in range(draw(st.sampled_from([0, 2, 4, 4, 8, 8]))))
        disabled = frozenset(s for s in slots if draw(st.integers(0, 5)) == 0)
        agents.append(
            AgentState(
                f"a{i}",
                draw(st.sampled_from(["default", "default", "default", "other"])),
                slots,
                disabled_slots=disabled,
                enabled=draw(st.integers(0, 6)) > 0,
                draining=draw(st.integers(0, 6)) == 0,
            )
        )
    groups = [f"g{i}" for i in range(draw(st.integers(1, 4)))]
    weight = {g: draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for g in groups}
    cap = {g: draw(st.one_of(st.none(), st.integers(0, 12))) for g in groups}
    running = []
    fill = (
        3 if crowded else draw(st.integers(0, 3))
    )  # running work holds none, 1/3, 2/3 or all slots
    for agent in agents:
        free = [s for s in agent.slots if draw(st.integers(0, 2)) < fill]
        while free:
            take = draw(st.integers(1, len(free)))
            group = draw(st.sampled_from(groups))
            running.append(
                Allocation(
                    f"x{len(running)}",
                    group,
                    {agent.id: tuple(free[:take])},
                    priority=draw(st.one_of(st.none(), st.integers(1, 99))),
                    weight=weight[group],
                    preemptible=draw(st.integers(0, 4)) > 0,
                )
            )
            free = free[take:]
        if draw(st.integers(0, 3)) == 0:
            running.append(Allocation(f"x{len(running)}", groups[0], {agent.id: ()}))
    pending = []
    for i in range(draw(st.integers(0, 14))):
        group = draw(st.sampled_from(groups))
        pending.append(
            Request(
                f"r{i}",
                group,
                draw(st.sampled_from(SIZES)),
                priority=draw(st.one_of(st.none(), st.integers(1, 99))),
                weight=weight[group],
                max_slots=cap[group],
                submitted_at=float(draw(st.integers(0, 3))),
                preemptible=draw(st.booleans()),
            )
        )
    return pool, agents, pending, running


def _check_invariants(pool, agents, pending, running, decision):
    members = {a.id: a for a in agents if a.pool == pool.name}
    held = {(agent, s) for alloc in running for agent, slots in alloc.slots.items() for s in slots}
    requests = {r.id: r for r in pending}
    single_cap = max(
        (len(set(a.slots) - a.disabled_slots) for a in members.values() if a.accepts_work),
        default=0,
    )
    seen_requests, used = set(), set()
    group_total = {}
    for alloc in running:
        if any(agent in members for agent in alloc.slots):
            group_total[alloc.group_id] = group_total.get(alloc.group_id, 0) + sum(
                len(s) for agent, s in alloc.slots.items() if agent in members
            )
    start = dict(group_total)
    for assignment in decision.assignments:
        request = requests[assignment.request_id]
        assert request.id not in seen_requests
        seen_requests.add(request.id)
        assert assignment.slot_count == request.slots_needed
        if request.slots_needed == 0:
            assert list(assignment.slots.values()) == [()]
        elif request.slots_needed <= single_cap:
            assert len(assignment.slots) == 1, "a request that fits one agent was split"
        for agent_id, slot_ids in assignment.slots.items():
            agent = members[agent_id]
            assert agent.accepts_work
            for slot in slot_ids:
                assert slot in agent.slots and slot not in agent.disabled_slots
                assert (agent_id, slot) not in held, "slot double-booked with running work"
                assert (agent_id, slot) not in used, "slot double-booked within the decision"
                used.add((agent_id, slot))
        group_total[request.group_id] = group_total.get(request.group_id, 0) + request.slots_needed
        if request.max_slots is not None and request.slots_needed:
            assert group_total[request.group_id] <= max(
                request.max_slots, start.get(request.group_id, 0)
            )
    zero = {}
    for alloc in running:
        for agent, slots in alloc.slots.items():
            if not slots:
                zero[agent] = zero.get(agent, 0) + 1
    for assignment in decision.assignments:
        if assignment.slot_count == 0:
            (agent,) = assignment.slots
            zero[agent] = zero.get(agent, 0) + 1
            assert zero[agent] <= pool.max_zero_slot_tasks_per_agent
    victims = {a.id: a for a in running}
    assert len(set(decision.preemptions)) == len(decision.preemptions)
    for victim_id in decision.preemptions:
        victim = victims[victim_id]
        assert victim.preemptible
        assert any(agent in members for agent in victim.slots)
    if pool.scheduler == "priority" and not pool.preemption:
        assert decision.preemptions == ()


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_decisions_respect_every_invariant(scenario):
    pool, agents, pending, running = scenario
    decision = schedule(pool, agents, pending, running)
    _check_invariants(pool, agents, pending, running, decision)


@settings(max_examples=200, deadline=None)
@given(scenarios(crowded=True))
def test_preemption_invariants_in_a_crowded_pool(scenario):
    pool, agents, pending, running = scenario
    decision = schedule(pool, agents, pending, running)
    _check_invariants(pool, agents, pending, running, decision)
    if pool.scheduler == "priority" and decision.preemptions:
        started = {a.request_id for a in decision.assignments}
        waiting = [
            pool.default_priority if r.priority is None else r.priority
            for r in pending
            if r.id not in started and r.slots_needed
        ]
        victims = {a.id: a for a in running}
        for victim_id in decision.preemptions:
            victim = victims[victim_id]
            priority = pool.default_priority if victim.priority is None else victim.priority
            assert priority > min(waiting), "a victim must have worse priority than a waiter"


@settings(max_examples=150, deadline=None)
@given(scenarios(crowded=True))
def test_victim_search_shortcuts_match_the_plain_search(scenario):
    """The one-victim fast path and the cached candidate lists change no answer."""
    pool, agents, pending, running = scenario
    fast, full = build_state(pool, agents, running), build_state(pool, agents, running)

    def preference(victim):
        return (-victim.priority, -victim.slot_count, victim.id)

    ranked = RankedVictims(sorted((r for r in fast.running if r.preemptible), key=preference))
    for request in sorted(pending, key=lambda r: (fast.priority_of(r), r.submitted_at, r.id)):
        need, priority = request.slots_needed, fast.priority_of(request)
        if need == 0:
            continue
        placements = [s.index.place(need, s.single_cap, pool.fitting_policy) for s in (fast, full)]
        assert placements[0] == placements[1]
        if placements[0] is not None:
            continue
        chosen = []
        for state, order_hint, key in ((fast, ranked, priority), (full, None, None)):
            victims = choose_victims(
                state,
                need,
                lambda r, p=priority: r.priority > p,
                preference,
                ranked=order_hint,
                allowed_key=key,
            )
            chosen.append(None if victims is None else [v.id for v in victims])
        assert chosen[0] == chosen[1]
        assert fast.index.nfree == full.index.nfree


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_input_order(scenario, rng):
    pool, agents, pending, running = scenario
    first = schedule(pool, agents, pending, running)
    shuffled = [list(x) for x in (agents, pending, running)]
    for items in shuffled:
        rng.shuffle(items)
    assert schedule(pool, *shuffled) == first
    assert schedule(pool, agents, pending, running) == first


# ------------------------------------------------------------------------ simulation


def _simulate(pool, agents, arrivals, ticks, duration):
    """Run ``ticks`` passes; work runs ``duration`` ticks, preempted work requeues.

    Returns (per-tick group slot usage, finished request ids, max wait of each request).
    """
    originals = {r.id: r for requests in arrivals.values() for r in requests}
    pending: dict[str, Request] = {}
    running: dict[str, tuple[Allocation, int]] = {}
    preempting: set[str] = set()
    usage, finished, started_at = [], set(), {}
    for tick in range(ticks):
        for request in arrivals.get(tick, ()):
            pending[request.id] = request
        # Preempted work checkpoints and leaves by the next pass; finished work exits.
        for alloc_id in sorted(preempting):
            running.pop(alloc_id)
            pending[alloc_id] = originals[alloc_id]
        preempting.clear()
        for alloc_id, (_, end) in sorted(running.items()):
            if end <= tick:
                del running[alloc_id]
                finished.add(alloc_id)
        decision = schedule(
            pool, agents, list(pending.values()), [alloc for alloc, _ in running.values()]
        )
        for assignment in decision.assignments:
            request = pending.pop(assignment.request_id)
            started_at.setdefault(request.id, tick)
            running[request.id] = (
                Allocation(
                    request.id,
                    request.group_id,
                    assignment.slots,
                    request.priority,
                    request.weight,
                    request.preemptible,
                ),
                tick + duration,
            )
        preempting.update(decision.preemptions)
        per_group = {}
        for alloc, _ in running.values():
            per_group[alloc.group_id] = per_group.get(alloc.group_id, 0) + alloc.slot_count
        usage.append(per_group)
    return usage, finished, started_at


def test_simulated_preemption_lets_urgent_work_in_within_two_passes(make_agents):
    pool = PoolSpec("default", preemption=True)
    agents = make_agents(4)
    background = [Request(f"bg{i}", f"e{i % 3}", 4, priority=60, submitted_at=i) for i in range(20)]
    urgent = [Request("urgent", "hot", 16, priority=1, submitted_at=100)]
    usage, finished, started = _simulate(
        pool, agents, {0: background, 3: urgent}, ticks=60, duration=5
    )
    assert started["urgent"] <= 3 + 2
    assert finished == {r.id for r in background + urgent}
    assert all(sum(tick.values()) <= 32 for tick in usage)


def test_simulated_fair_share_converges_to_weights(make_agents):
    pool = PoolSpec("default", scheduler="fair_share")
    agents = make_agents(2)
    rng = random.Random(7)
    light = [
        Request(f"l{i}", "light", 1, weight=1.0, submitted_at=rng.random()) for i in range(100)
    ]
    heavy = [
        Request(f"h{i}", "heavy", 1, weight=3.0, submitted_at=rng.random()) for i in range(200)
    ]
    usage, _, _ = _simulate(pool, agents, {0: light, 10: heavy}, ticks=30, duration=3)
    assert usage[5] == {"light": 16}  # alone, the light group may use the whole pool
    # Once both wait, the pool settles at 1 : 3.
    assert all(tick == {"light": 4, "heavy": 12} for tick in usage[15:])


# ------------------------------------------------ search shortcuts and request order


def _candidate(number: int, size: int) -> Running:
    return Running(f"v{number}", "g", 50, 1.0, True, {0: size}, size)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=8), st.data())
def test_fewest_picks_the_least_valuable_smallest_cover(sizes, data):
    """Of the smallest sets covering ``short``, the one whose most valuable member is
    least valuable, then the second most valuable, ... (brute force over all sets)."""
    ordered = [_candidate(i, size) for i, size in enumerate(sizes)]  # least valuable first
    short = data.draw(st.integers(1, sum(sizes)))
    budget = _min_count(sorted(sizes, reverse=True), short)
    covers = [
        combo
        for combo in itertools.combinations(range(len(sizes)), budget)
        if sum(sizes[i] for i in combo) >= short
    ]
    assert covers, "the budget from _min_count must be reachable"
    assert not any(
        sum(sizes[i] for i in combo) >= short
        for combo in itertools.combinations(range(len(sizes)), budget - 1)
    ), "_min_count must give the smallest count"
    best = min(covers, key=lambda combo: sorted(combo, reverse=True))
    picked = _fewest(ordered, short, 0, budget)
    assert [c.id for c in picked] == [f"v{i}" for i in sorted(best)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(1, 99)), st.sampled_from([0, 1, 2.5, 3])),
        max_size=40,
    ),
    st.integers(1, 99),
)
def test_priority_order_is_the_tuple_order(rows, default):
    requests = [
        Request(f"r{(i * 7) % 41:02d}-{i}", "g", 1, priority=priority, submitted_at=submitted)
        for i, (priority, submitted) in enumerate(rows)
    ]
    expected = sorted(
        requests,
        key=lambda r: (default if r.priority is None else r.priority, r.submitted_at, r.id),
    )
    assert _priority_order(requests, default) == expected


def _plain_multi(original):
    """``_multi_agent`` without its per-filter summaries: every agent read afresh."""

    def search(state, need, allowed, preference, allowed_key):
        return original(state, need, allowed, preference, None)

    return search


@settings(max_examples=200, deadline=None)
@given(scenarios(crowded=True))
def test_shortcuts_do_not_change_decisions(scenario):
    """With the one-victim shortcuts (priority's ranked list, fair share's per-group
    lists) and the multi-agent summaries turned off, every decision is the same."""
    pool, agents, pending, running = scenario
    fast = schedule(pool, agents, pending, running)
    with (
        mock.patch.object(_preempt, "_one_victim", lambda *args: None),
        mock.patch.object(_preempt, "_multi_agent", _plain_multi(_preempt._multi_agent)),
    ):
        plain = schedule(pool, agents, pending, running)
    assert fast == plain


@settings(max_examples=100, deadline=None)
@given(scenarios(crowded=True))
def test_fair_share_shortcut_matches_with_many_groups(scenario):
    """The same as above with fair share forced, where the group order changes after
    every preemption."""
    pool, agents, pending, running = scenario
    pool = PoolSpec(
        pool.name,
        scheduler="fair_share",
        preemption=True,
        fitting_policy=pool.fitting_policy,
        max_zero_slot_tasks_per_agent=pool.max_zero_slot_tasks_per_agent,
    )
    fast = schedule(pool, agents, pending, running)
    with mock.patch.object(_preempt, "_one_victim", lambda *args: None):
        plain = schedule(pool, agents, pending, running)
    assert fast == plain
