"""Gang fitting, fitting policies, pool isolation and agent/slot states."""

from __future__ import annotations

import pytest

from dauntless.scheduler import AgentState, PoolSpec, Request, schedule

BEST = PoolSpec("default")
WORST = PoolSpec("default", fitting_policy="worst")


def _partly_used(make_agents, make_alloc):
    # a0: 6 free, a1: 2 free, a2: 8 free
    running = [
        make_alloc("x0", "e0", {"a0": ("s0", "s1")}),
        make_alloc("x1", "e0", {"a1": ("s0", "s1", "s2", "s3", "s4", "s5")}),
    ]
    return make_agents(3), running


def test_best_fit_packs_the_agent_with_fewest_free_slots_that_fit(make_agents, make_alloc, placed):
    agents, running = _partly_used(make_agents, make_alloc)
    decision = schedule(BEST, agents, [Request("r", "e1", 2)], running)
    assert placed(decision) == {"r": {"a1": ("s6", "s7")}}
    decision = schedule(BEST, agents, [Request("r", "e1", 3)], running)
    assert placed(decision) == {"r": {"a0": ("s2", "s3", "s4")}}


def test_worst_fit_spreads_to_the_agent_with_most_free_slots(make_agents, make_alloc, placed):
    agents, running = _partly_used(make_agents, make_alloc)
    decision = schedule(WORST, agents, [Request("r", "e1", 2)], running)
    assert placed(decision) == {"r": {"a2": ("s0", "s1")}}


def test_ties_go_to_the_lowest_agent_id(make_agents, placed):
    decision = schedule(BEST, make_agents(3)[::-1], [Request("r", "e1", 1)], [])
    assert placed(decision) == {"r": {"a0": ("s0",)}}


def test_a_request_that_fits_one_agent_is_never_split(make_agents, make_alloc):
    # 4 agents with 2 free slots each: 8 free in total, but a 4-slot request waits.
    running = [make_alloc(f"x{i}", "e0", {f"a{i}": 6}) for i in range(4)]
    decision = schedule(BEST, make_agents(4), [Request("r", "e1", 4)], running)
    assert decision.assignments == ()


def test_multi_agent_request_takes_whole_free_agents_first(make_agents, make_alloc, placed):
    running = [make_alloc("x", "e0", {"a1": 4})]
    agents = make_agents(4)
    decision = schedule(BEST, agents, [Request("r", "e1", 20)], running)
    # a0, a2 whole (8 + 8), then the rest (4) on a1, the tightest fit.
    assert placed(decision) == {
        "r": {
            "a0": tuple(f"s{j}" for j in range(8)),
            "a1": ("s4", "s5", "s6", "s7"),
            "a2": tuple(f"s{j}" for j in range(8)),
        }
    }


def test_multi_agent_request_uses_exactly_as_many_whole_agents_as_needed(make_agents, placed):
    decision = schedule(BEST, make_agents(4), [Request("r", "e1", 16)], [])
    assert placed(decision)["r"].keys() == {"a0", "a1"}


def test_multi_agent_request_is_all_or_nothing(make_agents, make_alloc, order):
    running = [make_alloc(f"x{i}", "e0", {f"a{i}": 4}) for i in range(3)]
    # 12 free slots, 16 wanted: nothing is taken, and later requests still fit.
    pending = [
        Request("big", "e1", 16, submitted_at=0.0),
        Request("small", "e2", 4, submitted_at=1.0),
    ]
    decision = schedule(BEST, make_agents(3), pending, running)
    assert order(decision) == ["small"]


def test_agents_of_other_pools_are_ignored(make_agents, make_alloc, placed):
    agents = make_agents(2, pool="gpu", prefix="g") + make_agents(1, slots=2)
    # An allocation on another pool's agent does not count against this pool's groups.
    running = [make_alloc("elsewhere", "e1", {"g0": 8})]
    pending = [Request("r", "e1", 2, max_slots=2), Request("big", "e2", 4)]
    decision = schedule(BEST, agents, pending, running)
    assert placed(decision) == {"r": {"a0": ("s0", "s1")}}


def test_disabled_agent_gets_nothing():
    agents = [
        AgentState("a0", "default", ("s0",), enabled=False),
        AgentState("a1", "default", ("s0",)),
    ]
    decision = schedule(BEST, agents, [Request("r1", "e1", 1), Request("r2", "e1", 1)], [])
    assert [dict(a.slots) for a in decision.assignments] == [{"a1": ("s0",)}]


def test_draining_agent_keeps_its_work_but_gets_nothing_new(make_alloc, placed):
    agents = [
        AgentState("a0", "default", ("s0", "s1"), draining=True),
        AgentState("a1", "default", ("s0", "s1")),
    ]
    running = [make_alloc("keep", "e1", {"a0": ("s0",)})]
    pending = [Request("r", "e1", 1, max_slots=2), Request("r2", "e1", 1, max_slots=2)]
    decision = schedule(BEST, agents, pending, running)
    # The running slot on the draining agent still counts toward max_slots.
    assert placed(decision) == {"r": {"a1": ("s0",)}}
    assert decision.preemptions == ()


def test_disabled_slots_are_never_used_and_shrink_the_agent(placed):
    agents = [
        AgentState(
            "a0", "default", ("s0", "s1", "s2", "s3"), disabled_slots=frozenset({"s1", "s2"})
        )
    ]
    assert placed(schedule(BEST, agents, [Request("r", "e1", 2)], [])) == {
        "r": {"a0": ("s0", "s3")}
    }
    assert schedule(BEST, agents, [Request("r", "e1", 3)], []).assignments == ()


def test_busy_slots_are_not_assigned(placed):
    agents = [AgentState("a0", "default", ("s0", "s1"), busy_slots=frozenset({"s0"}))]
    assert placed(schedule(BEST, agents, [Request("r", "e1", 1)], [])) == {"r": {"a0": ("s1",)}}


def test_slots_are_handed_out_in_the_agents_declared_order(placed):
    agents = [AgentState("a0", "default", ("s9", "s10", "s2"))]
    assert placed(schedule(BEST, agents, [Request("r", "e1", 2)], [])) == {
        "r": {"a0": ("s9", "s10")}
    }


def test_request_larger_than_the_pool_waits(make_agents):
    assert schedule(BEST, make_agents(2), [Request("r", "e1", 17)], []).assignments == ()


def test_no_agents_no_assignments():
    decision = schedule(BEST, [], [Request("r", "e1", 1), Request("z", "e1", 0)], [])
    assert decision.assignments == () and decision.preemptions == ()


@pytest.mark.parametrize("policy", ["best", "worst"])
def test_heterogeneous_agents_single_agent_cap_is_the_largest_agent(policy, make_alloc, placed):
    agents = [
        AgentState("big", "default", tuple(f"s{j}" for j in range(16))),
        AgentState("small", "default", tuple(f"s{j}" for j in range(8))),
    ]
    running = [make_alloc("x", "e0", {"big": 2})]
    # 12 <= 16 must stay on one agent: "big" has only 14 free, enough.
    decision = schedule(
        PoolSpec("default", fitting_policy=policy), agents, [Request("r", "e1", 12)], running
    )
    assert list(placed(decision)["r"]) == ["big"]
