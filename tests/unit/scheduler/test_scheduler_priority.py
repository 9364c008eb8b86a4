"""The priority scheduler: order, back-fill, preemption, max_slots, zero-slot tasks."""

from __future__ import annotations

from dauntless.scheduler import AgentState, PoolSpec, Request, schedule

POOL = PoolSpec("default")
PREEMPTING = PoolSpec("default", preemption=True)


def test_lower_priority_value_runs_first_then_submission_then_id(make_agents, order):
    pending = [
        Request("late-urgent", "e1", 4, priority=10, submitted_at=5.0),
        Request("early-normal", "e2", 4, submitted_at=1.0),  # default priority 42
        Request("b-tie", "e3", 4, priority=10, submitted_at=2.0),
        Request("a-tie", "e3", 4, priority=10, submitted_at=2.0),
    ]
    decision = schedule(POOL, make_agents(1), pending, [])
    # 8 slots: the two best (priority 10, earliest submission, then id) get them.
    assert order(decision) == ["a-tie", "b-tie"]
    assert decision.preemptions == ()


def test_default_priority_comes_from_the_pool(make_agents, order):
    pool = PoolSpec("default", default_priority=5)
    pending = [
        Request("explicit", "e1", 8, priority=6, submitted_at=0.0),
        Request("defaulted", "e2", 8, submitted_at=1.0),
    ]
    assert order(schedule(pool, make_agents(1), pending, [])) == ["defaulted"]


def test_back_fill_starts_smaller_requests_behind_a_blocked_head(
    make_agents, make_alloc, placed, order
):
    running = [make_alloc("r", "e0", {"a0": 4})]
    pending = [
        Request("big", "e1", 8, priority=1, submitted_at=0.0),
        Request("small", "e2", 2, priority=50, submitted_at=1.0),
        Request("small2", "e3", 2, priority=60, submitted_at=2.0),
        Request("too-many", "e4", 2, priority=70, submitted_at=3.0),
    ]
    decision = schedule(POOL, make_agents(1), pending, running)
    assert order(decision) == ["small", "small2"]
    assert placed(decision)["small"] == {"a0": ("s4", "s5")}
    assert placed(decision)["small2"] == {"a0": ("s6", "s7")}
    assert decision.preemptions == ()  # preemption is off by default


def test_preemption_evicts_strictly_worse_priority_and_does_not_reuse_the_slots(
    make_agents, make_alloc
):
    running = [
        make_alloc("low", "e0", {"a0": ("s0", "s1", "s2", "s3")}, priority=80),
        make_alloc("mid", "e9", {"a0": ("s4", "s5", "s6", "s7")}, priority=40),
    ]
    pending = [
        Request("urgent", "e1", 4, priority=40, submitted_at=0.0),  # equal to "mid"
        Request("filler", "e2", 1, priority=90, submitted_at=1.0),
    ]
    decision = schedule(PREEMPTING, make_agents(1), pending, running)
    assert decision.preemptions == ("low",)
    assert decision.assignments == ()  # freed slots wait for the victim's checkpoint


def test_equal_priority_never_preempts(make_agents, make_alloc):
    running = [make_alloc("peer", "e0", {"a0": 8}, priority=42)]
    decision = schedule(PREEMPTING, make_agents(1), [Request("r", "e1", 4)], running)
    assert decision.preemptions == ()


def test_non_preemptible_allocations_are_never_victims(make_agents, make_alloc):
    running = [
        make_alloc("pinned", "e0", {"a0": 8}, priority=99, preemptible=False),
        make_alloc("soft", "e0", {"a1": 8}, priority=60),
    ]
    decision = schedule(PREEMPTING, make_agents(2), [Request("r", "e1", 8, priority=1)], running)
    assert decision.preemptions == ("soft",)


def test_preemption_chooses_fewest_victims_then_lowest_priority(make_agents, make_alloc):
    running = [
        # a0: two small low-priority victims would be needed
        make_alloc("a0-x", "e0", {"a0": ("s0", "s1", "s2", "s3")}, priority=90),
        make_alloc("a0-y", "e0", {"a0": ("s4", "s5", "s6", "s7")}, priority=90),
        # a1: one 8-slot victim of better priority is enough
        make_alloc("a1-z", "e0", {"a1": 8}, priority=70),
        # a2: one 8-slot victim of the worst priority: fewest and lowest wins
        make_alloc("a2-w", "e0", {"a2": 8}, priority=80),
    ]
    decision = schedule(PREEMPTING, make_agents(3), [Request("r", "e1", 8, priority=1)], running)
    assert decision.preemptions == ("a2-w",)


def test_preemption_uses_free_slots_and_only_the_victims_it_needs(make_agents, make_alloc):
    running = [
        make_alloc("v1", "e0", {"a0": ("s0", "s1")}, priority=90),
        make_alloc("v2", "e0", {"a0": ("s2", "s3")}, priority=95),
        make_alloc("keep", "e0", {"a0": ("s4", "s5")}, priority=80),
    ]
    # a0 has s6, s7 free; 4 slots needed -> one 2-slot victim, the worst priority.
    decision = schedule(PREEMPTING, make_agents(1), [Request("r", "e1", 4, priority=1)], running)
    assert decision.preemptions == ("v2",)


def test_reserved_free_slots_are_not_back_filled(make_agents, make_alloc):
    running = [make_alloc("victim", "e0", {"a0": ("s0", "s1", "s2", "s3")}, priority=90)]
    pending = [
        Request("urgent", "e1", 8, priority=1, submitted_at=0.0),
        Request("filler", "e2", 1, priority=95, submitted_at=1.0),
    ]
    decision = schedule(PREEMPTING, make_agents(1), pending, running)
    assert decision.preemptions == ("victim",)
    assert decision.assignments == ()


def test_a_victim_is_preempted_once_per_pass(make_agents, make_alloc):
    running = [make_alloc("victim", "e0", {"a0": 8}, priority=90)]
    pending = [
        Request("u1", "e1", 8, priority=1, submitted_at=0.0),
        Request("u2", "e2", 8, priority=2, submitted_at=1.0),
    ]
    decision = schedule(PREEMPTING, make_agents(1), pending, running)
    assert decision.preemptions == ("victim",)


def test_multi_agent_preemption_frees_whole_agents(make_agents, make_alloc):
    running = [
        make_alloc("v0", "e0", {"a0": 8}, priority=90),
        make_alloc("v1", "e0", {"a1": 8}, priority=91),
        make_alloc("v2", "e0", {"a2": 8}, priority=92),
    ]
    decision = schedule(PREEMPTING, make_agents(3), [Request("r", "e1", 16, priority=1)], running)
    assert sorted(decision.preemptions) == ["v1", "v2"]


def test_preemption_fails_cleanly_when_nothing_makes_room(make_agents, make_alloc):
    running = [make_alloc("v", "e0", {"a0": 4}, priority=90)]
    pending = [Request("r", "e1", 16, priority=1)]
    decision = schedule(PREEMPTING, make_agents(1), pending, running)
    assert decision == decision.__class__((), ())


def test_max_slots_caps_a_group_including_running_work(make_agents, make_alloc, order):
    running = [make_alloc("r0", "e1", {"a0": 2})]
    pending = [Request(f"t{i}", "e1", 2, max_slots=6, submitted_at=float(i)) for i in range(4)] + [
        Request("other", "e2", 2, submitted_at=9.0)
    ]
    decision = schedule(POOL, make_agents(2), pending, running)
    assert order(decision) == ["t0", "t1", "other"]


def test_max_slots_blocks_preemption_too(make_agents, make_alloc):
    running = [make_alloc("v", "e0", {"a0": 8}, priority=90)]
    pending = [Request("r", "e1", 8, priority=1, max_slots=4)]
    assert schedule(PREEMPTING, make_agents(1), pending, running).preemptions == ()


def test_zero_slot_requests_spread_by_task_count_and_need_no_slots(make_agents, make_alloc, placed):
    running = [
        make_alloc("full", "e0", {"a0": 8}),
        make_alloc("nb", "e0", {"a0": ()}),
    ]
    pending = [Request(f"z{i}", "e1", 0, submitted_at=float(i)) for i in range(3)]
    decision = schedule(POOL, make_agents(2), pending, running)
    # a1 has no zero-slot task, a0 one: a1, then tie at one each -> a0 (lower id), then a1.
    assert placed(decision) == {"z0": {"a1": ()}, "z1": {"a0": ()}, "z2": {"a1": ()}}


def test_zero_slot_limit_per_agent(make_agents, order):
    pool = PoolSpec("default", max_zero_slot_tasks_per_agent=1)
    pending = [Request(f"z{i}", "e1", 0, submitted_at=float(i)) for i in range(3)]
    decision = schedule(pool, make_agents(2, slots=0), pending, [])
    assert order(decision) == ["z0", "z1"]


def test_zero_slot_requests_skip_disabled_and_draining_agents(make_agents, placed):
    agents = (
        make_agents(1, prefix="off", enabled=False)
        + make_agents(1, prefix="drain", draining=True)
        + make_agents(1, prefix="on")
    )
    decision = schedule(POOL, agents, [Request("z", "e1", 0)], [])
    assert placed(decision) == {"z": {"on0": ()}}


def test_work_on_a_draining_agent_is_not_preempted_for_room_it_cannot_give(make_alloc):
    slots = tuple(f"s{j}" for j in range(8))
    agents = [AgentState("d0", "default", slots, draining=True), AgentState("a0", "default", slots)]
    running = [
        make_alloc("on-draining", "e0", {"d0": 8}, priority=99),
        make_alloc("on-open", "e0", {"a0": 8}, priority=60),
    ]
    decision = schedule(PREEMPTING, agents, [Request("r", "e1", 8, priority=1)], running)
    assert decision.preemptions == ("on-open",)
