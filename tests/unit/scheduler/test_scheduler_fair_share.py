"""Weighted max-min fair share: the share math and the fair_share scheduler."""

from __future__ import annotations

from collections import Counter

import pytest

from dauntless.scheduler import PoolSpec, Request, fair_shares, schedule

FAIR = PoolSpec("default", scheduler="fair_share")


def _groups(decision, pending):
    group_of = {r.id: r.group_id for r in pending}
    return Counter(group_of[a.request_id] for a in decision.assignments)


# ----------------------------------------------------------------------- fair_shares


def test_shares_follow_weights_when_everyone_wants_more():
    assert fair_shares(8, {"a": 10, "b": 10}, {"a": 1.0, "b": 3.0}) == {"a": 2, "b": 6}


def test_a_small_demand_is_met_and_the_rest_is_split():
    shares = fair_shares(10, {"a": 2, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 1})
    assert shares == {"a": 2, "b": 4, "c": 4}


def test_weighted_progressive_filling_with_a_capped_group():
    # Levels: a (w=2) capped at 3; b (w=1) and c (w=3) share the other 9 as 1:3.
    shares = fair_shares(12, {"a": 3, "b": 50, "c": 50}, {"a": 2.0, "b": 1.0, "c": 3.0})
    assert shares == {"a": 3, "b": 2, "c": 7}  # 2.25 / 6.75 -> rounding gives c the spare


def test_rounding_hands_spare_slots_out_by_fraction_then_weight_then_id():
    assert fair_shares(10, {"a": 9, "b": 9, "c": 9}, {"a": 1, "b": 1, "c": 1}) == {
        "a": 4,
        "b": 3,
        "c": 3,
    }
    assert fair_shares(10, {"a": 9, "b": 9, "c": 9}, {"a": 1, "b": 1, "c": 1.5}) == {
        "a": 3,
        "b": 3,
        "c": 4,
    }


def test_enough_capacity_gives_every_group_its_demand():
    assert fair_shares(100, {"a": 3, "b": 0}, {"a": 1, "b": 5}) == {"a": 3, "b": 0}


def test_shares_sum_to_capacity_and_never_exceed_demand():
    demand = {f"g{i}": (i * 7) % 13 for i in range(20)}
    weight = {g: 1 + (i % 4) * 0.5 for i, g in enumerate(demand)}
    shares = fair_shares(50, demand, weight)
    assert sum(shares.values()) == 50
    assert all(0 <= shares[g] <= demand[g] for g in demand)


@pytest.mark.parametrize(
    ("capacity", "demand", "weight"),
    [
        (-1, {"a": 1}, {"a": 1}),
        (4, {"a": -1}, {"a": 1}),
        (4, {"a": 1}, {}),
        (4, {"a": 1}, {"a": 0}),
    ],
)
def test_fair_shares_rejects_bad_input(capacity, demand, weight):
    with pytest.raises(ValueError):
        fair_shares(capacity, demand, weight)


# ------------------------------------------------------------------------- schedule


def test_slots_split_by_weight(make_agents):
    pending = [Request(f"a{i}", "a", 1, weight=1.0, submitted_at=i) for i in range(10)]
    pending += [Request(f"b{i}", "b", 1, weight=3.0, submitted_at=i) for i in range(10)]
    assert _groups(schedule(FAIR, make_agents(1), pending, []), pending) == {"a": 2, "b": 6}


def test_running_slots_count_toward_a_groups_share(make_agents, make_alloc):
    running = [make_alloc("a-run", "a", {"a0": ("s0", "s1", "s2")})]
    pending = [Request(f"a{i}", "a", 1, submitted_at=i) for i in range(5)]
    pending += [Request(f"b{i}", "b", 1, submitted_at=i) for i in range(5)]
    # shares 4 / 4: a already holds 3, so it gets 1 more and b gets 4.
    assert _groups(schedule(FAIR, make_agents(1), pending, running), pending) == {"a": 1, "b": 4}


def test_unused_share_goes_to_groups_that_want_more(make_agents):
    pending = [Request("a0", "a", 1)] + [
        Request(f"b{i}", "b", 1, submitted_at=i) for i in range(10)
    ]
    assert _groups(schedule(FAIR, make_agents(1), pending, []), pending) == {"a": 1, "b": 7}


def test_max_slots_caps_the_share(make_agents):
    pending = [Request(f"a{i}", "a", 1, max_slots=1, submitted_at=i) for i in range(4)]
    pending += [Request(f"b{i}", "b", 1, submitted_at=i) for i in range(10)]
    assert _groups(schedule(FAIR, make_agents(1), pending, []), pending) == {"a": 1, "b": 7}


def test_within_a_group_priority_then_submission_orders_requests(make_agents, order):
    pending = [
        Request("late", "a", 4, priority=1, submitted_at=9),
        Request("early", "a", 4, priority=50, submitted_at=0),
        Request("first", "a", 4, priority=1, submitted_at=1),
    ]
    assert order(schedule(FAIR, make_agents(1), pending, [])) == ["first", "late"]


def test_over_share_groups_are_preempted_when_others_wait(make_agents, make_alloc):
    running = [make_alloc(f"a{i}", "a", {"a0": (f"s{i}",)}) for i in range(8)]
    pending = [Request(f"b{i}", "b", 1, submitted_at=i) for i in range(6)]
    decision = schedule(FAIR, make_agents(1), pending, running)
    # shares 4 / 4: exactly a's excess (4 one-slot allocations) is preempted, for b.
    assert len(decision.preemptions) == 4
    assert set(decision.preemptions) <= {f"a{i}" for i in range(8)}
    assert decision.assignments == ()


def test_fair_share_preempts_even_with_pool_preemption_off(make_agents, make_alloc):
    assert FAIR.preemption is False
    running = [make_alloc("a-all", "a", {"a0": 8})]
    decision = schedule(FAIR, make_agents(1), [Request("b0", "b", 4)], running)
    assert decision.preemptions == ("a-all",)


def test_no_preemption_for_a_request_beyond_the_waiting_groups_share(make_agents, make_alloc):
    running = [
        make_alloc("a1", "a", {"a0": ("s0", "s1", "s2")}),
        make_alloc("a2", "a", {"a0": ("s3", "s4", "s5")}),
    ]
    # shares: a 4, b 4; b's 5-slot request would take b over its share: it just waits.
    decision = schedule(FAIR, make_agents(1), [Request("b0", "b", 5)], running)
    assert decision.preemptions == () and decision.assignments == ()


def test_non_preemptible_over_share_work_is_left_alone(make_agents, make_alloc):
    running = [make_alloc("a-all", "a", {"a0": 8}, preemptible=False)]
    decision = schedule(FAIR, make_agents(1), [Request("b0", "b", 4)], running)
    assert decision.preemptions == ()


def test_the_most_over_share_group_is_preempted_first(make_agents, make_alloc):
    running = [
        make_alloc("a-p", "a", {"a0": ("s0", "s1", "s2", "s3")}),
        make_alloc("a-q", "a", {"a0": ("s4", "s5", "s6", "s7")}),
        make_alloc("a-r", "a", {"a1": ("s0", "s1")}),
        make_alloc("c-p", "c", {"a1": ("s2", "s3", "s4", "s5", "s6", "s7")}),
        make_alloc("c-q", "c", {"a2": ("s0", "s1", "s2", "s3")}),
        make_alloc("c-r", "c", {"a2": ("s4", "s5", "s6", "s7")}),
    ]
    pending = [Request("d0", "d", 4, submitted_at=0), Request("d1", "d", 4, submitted_at=1)]
    decision = schedule(FAIR, make_agents(3), pending, running)
    # 24 slots, demands a 10, c 14, d 8 -> shares 8 / 8 / 8: c is 6 over, a 2 over.
    # d0 takes a victim of c (the smaller of c's two candidates on one agent); then both
    # are 2 over and d1 takes the lower id among the equally good victims.
    assert decision.preemptions == ("c-q", "a-p")
    assert decision.assignments == ()
