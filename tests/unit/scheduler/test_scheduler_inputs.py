"""Validation of scheduler inputs and the pool config adapter."""

from __future__ import annotations

import pytest

from dauntless.config import ResourcePoolConfig
from dauntless.scheduler import (
    AgentState,
    Allocation,
    PoolSpec,
    Request,
    pool_spec_from_config,
    schedule,
)

POOL = PoolSpec("default")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": ""}, TypeError),
        ({"name": "p", "scheduler": "round_robin"}, ValueError),
        ({"name": "p", "fitting_policy": "first"}, ValueError),
        ({"name": "p", "preemption": "yes"}, TypeError),
        ({"name": "p", "default_priority": 4.2}, TypeError),
        ({"name": "p", "max_zero_slot_tasks_per_agent": -1}, ValueError),
    ],
)
def test_pool_spec_validation(kwargs, error):
    with pytest.raises(error):
        PoolSpec(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"slots": ["s0"]}, TypeError, "tuple"),
        ({"slots": ("s0", "s0")}, ValueError, "twice"),
        ({"slots": ("s0",), "disabled_slots": frozenset({"s9"})}, ValueError, "s9"),
        ({"slots": ("s0",), "busy_slots": {"s0"}}, TypeError, "frozenset"),
        ({"slots": ("s0",), "enabled": 1}, TypeError, "enabled"),
    ],
)
def test_agent_state_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        AgentState("a0", "default", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"slots_needed": -1}, ValueError, "slots_needed"),
        ({"slots_needed": True}, TypeError, "slots_needed"),
        ({"slots_needed": 1, "weight": 0}, ValueError, "weight"),
        ({"slots_needed": 1, "weight": float("inf")}, ValueError, "weight"),
        ({"slots_needed": 1, "max_slots": -2}, ValueError, "max_slots"),
        ({"slots_needed": 1, "priority": "high"}, TypeError, "priority"),
        ({"slots_needed": 1, "submitted_at": float("nan")}, ValueError, "submitted_at"),
        ({"slots_needed": 1, "preemptible": None}, TypeError, "preemptible"),
    ],
)
def test_request_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        Request("r", "e1", **kwargs)


def test_allocation_validation():
    with pytest.raises(ValueError, match="at least one agent"):
        Allocation("x", "e1", {})
    with pytest.raises(TypeError, match="tuple"):
        Allocation("x", "e1", {"a0": ["s0"]})
    with pytest.raises(ValueError, match="weight"):
        Allocation("x", "e1", {"a0": ("s0",)}, weight=-1.0)
    assert Allocation("x", "e1", {"a0": ("s0",), "a1": ("s0", "s1")}).slot_count == 3


def test_schedule_rejects_wrong_types():
    with pytest.raises(TypeError, match="pool"):
        schedule("default", [], [], [])
    with pytest.raises(TypeError, match="pending"):
        schedule(POOL, [], [("r", 1)], [])
    with pytest.raises(TypeError, match="agents"):
        schedule(POOL, "a0", [], [])


def test_schedule_rejects_inconsistent_inputs(make_agents, make_alloc):
    agents = make_agents(1)
    with pytest.raises(ValueError, match="agent id 'a0' appears twice"):
        schedule(POOL, agents + agents, [], [])
    with pytest.raises(ValueError, match="request id 'r' appears twice"):
        schedule(POOL, agents, [Request("r", "e1", 1), Request("r", "e1", 1)], [])
    with pytest.raises(ValueError, match="also a running allocation"):
        schedule(POOL, agents, [Request("r", "e1", 1)], [make_alloc("r", "e1", {"a0": 1})])
    with pytest.raises(ValueError, match="appears twice"):
        schedule(POOL, agents, [], [make_alloc("x", "e1", {"a0": 1})] * 2)
    with pytest.raises(ValueError, match="does not have"):
        schedule(POOL, agents, [], [make_alloc("x", "e1", {"a0": ("s99",)})])
    with pytest.raises(ValueError, match="already held"):
        schedule(
            POOL,
            agents,
            [],
            [make_alloc("x", "e1", {"a0": 2}), make_alloc("y", "e1", {"a0": ("s1",)})],
        )
    with pytest.raises(ValueError, match="disagree on weight"):
        schedule(POOL, agents, [Request("r1", "e1", 1), Request("r2", "e1", 1, weight=2.0)], [])
    with pytest.raises(ValueError, match="disagree on max_slots"):
        schedule(POOL, agents, [Request("r1", "e1", 1, max_slots=2), Request("r2", "e1", 1)], [])


def test_allocations_on_unknown_agents_are_ignored(make_agents, make_alloc):
    decision = schedule(
        POOL,
        make_agents(1),
        [Request("r", "e1", 8, max_slots=8)],
        [make_alloc("gone", "e1", {"lost-agent": 8})],
    )
    assert [a.request_id for a in decision.assignments] == ["r"]


def test_pool_spec_from_config_reads_determined_keys():
    config = ResourcePoolConfig(
        pool_name="gpu",
        scheduler={
            "type": "fair_share",
            "preemption": True,
            "default_priority": 10,
            "fitting_policy": "worst",
        },
        max_cpu_containers_per_agent=7,
    )
    assert pool_spec_from_config(config) == PoolSpec(
        "gpu", "fair_share", True, 10, "worst", max_zero_slot_tasks_per_agent=7
    )
    assert pool_spec_from_config(ResourcePoolConfig(pool_name="default")) == PoolSpec("default")


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"type": "round_robin"}, "removed"),
        ({"kind": "priority"}, "unknown scheduler keys"),
        ({"type": "fifo"}, "scheduler must be one of"),
    ],
)
def test_pool_spec_from_config_rejects_bad_blocks(block, match):
    with pytest.raises(ValueError, match=match):
        pool_spec_from_config(ResourcePoolConfig(pool_name="p", scheduler=block))
    with pytest.raises(TypeError):
        pool_spec_from_config({"pool_name": "p"})
