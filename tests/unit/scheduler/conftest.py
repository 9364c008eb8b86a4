"""Builders shared by the scheduler tests, as fixtures that return functions."""

from __future__ import annotations

import pytest

from dauntless.scheduler import AgentState, Allocation, Decision


def _make_agents(
    count: int, slots: int = 8, pool: str = "default", prefix: str = "a", **kwargs
) -> list[AgentState]:
    """``count`` agents named ``<prefix>0..`` with slots ``s0..s<slots-1>``."""
    return [
        AgentState(f"{prefix}{i}", pool, tuple(f"s{j}" for j in range(slots)), **kwargs)
        for i in range(count)
    ]


def _make_alloc(
    alloc_id: str, group: str, placement: dict[str, int | tuple[str, ...]], **kwargs
) -> Allocation:
    """An allocation; an int in ``placement`` means that many slots from ``s0`` up."""
    slots = {
        agent: tuple(f"s{j}" for j in range(spec)) if isinstance(spec, int) else spec
        for agent, spec in placement.items()
    }
    return Allocation(alloc_id, group, slots, **kwargs)


def _placed(decision: Decision) -> dict[str, dict[str, tuple[str, ...]]]:
    """request id -> {agent id: slot ids} of every assignment."""
    return {a.request_id: dict(a.slots) for a in decision.assignments}


def _order(decision: Decision) -> list[str]:
    """Request ids in the order they were assigned."""
    return [a.request_id for a in decision.assignments]


@pytest.fixture
def make_agents():
    """:func:`_make_agents`: ``count`` agents of ``slots`` slots each."""
    return _make_agents


@pytest.fixture
def make_alloc():
    """:func:`_make_alloc`: an allocation from a compact placement."""
    return _make_alloc


@pytest.fixture
def placed():
    """:func:`_placed`: request id -> slots of a decision's assignments."""
    return _placed


@pytest.fixture
def order():
    """:func:`_order`: request ids in assignment order."""
    return _order
