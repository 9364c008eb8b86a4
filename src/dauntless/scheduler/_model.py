"""Inputs and outputs of a scheduling pass: frozen, validated dataclasses.

Every type here is plain data: the master builds them from its database rows, hands
them to :func:`dauntless.scheduler.schedule` and acts on the returned
:class:`Decision`. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

SchedulerType = Literal["priority", "fair_share"]
FittingPolicy = Literal["best", "worst"]

_SCHEDULERS = ("priority", "fair_share")
_FITTING_POLICIES = ("best", "worst")


def _check_id(value: object, name: str) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")


def _check_int(value: object, name: str, *, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_bool(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")


def _check_weight(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")


def _check_slot_ids(value: object, name: str) -> None:
    if not isinstance(value, tuple):
        raise TypeError(f"{name} must be a tuple of slot ids, got {type(value).__name__}")
    for slot in value:
        _check_id(slot, f"{name} entry")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} lists a slot id twice: {value!r}")


@dataclass(frozen=True)
class PoolSpec:
    """How one resource pool schedules (Determined's ``resource_pools[].scheduler``).

    Attributes:
        name: the pool's name; agents whose ``pool`` differs are ignored.
        scheduler: ``"priority"`` (lower priority value first, then submission order,
            back-filling) or ``"fair_share"`` (weighted max-min fair share of slots).
        preemption: for ``priority`` only: whether a waiting request may preempt running,
            preemptible allocations of strictly worse priority. ``fair_share`` always
            preempts over-share groups gracefully, as Determined's does.
        default_priority: priority of requests and allocations that give none (42).
        fitting_policy: ``"best"`` packs (the agent with the fewest free slots that fit);
            ``"worst"`` spreads (the agent with the most free slots).
        max_zero_slot_tasks_per_agent: how many zero-slot tasks one agent may run
            (Determined's ``max_cpu_containers_per_agent``, 100).

    Raises:
        TypeError: a field has the wrong type.
        ValueError: an unknown scheduler or fitting policy, or a negative limit.
    """

    name: str
    scheduler: SchedulerType = "priority"
    preemption: bool = False
    default_priority: int = 42
    fitting_policy: FittingPolicy = "best"
    max_zero_slot_tasks_per_agent: int = 100

    def __post_init__(self) -> None:
        _check_id(self.name, "PoolSpec.name")
        if self.scheduler not in _SCHEDULERS:
            raise ValueError(
                f"PoolSpec.scheduler must be one of {_SCHEDULERS}, got {self.scheduler!r}"
            )
        _check_bool(self.preemption, "PoolSpec.preemption")
        _check_int(self.default_priority, "PoolSpec.default_priority")
        if self.fitting_policy not in _FITTING_POLICIES:
            raise ValueError(
                f"PoolSpec.fitting_policy must be one of {_FITTING_POLICIES}, "
                f"got {self.fitting_policy!r}"
            )
        _check_int(
            self.max_zero_slot_tasks_per_agent, "PoolSpec.max_zero_slot_tasks_per_agent", minimum=0
        )


@dataclass(frozen=True)
class AgentState:
    """One agent as the scheduler sees it.

    Which slots are busy is derived from the running allocations handed to
    :func:`~dauntless.scheduler.schedule`; ``busy_slots`` adds slots held by anything
    else (say, an allocation whose exit is not yet recorded).

    Attributes:
        id: the agent's id.
        pool: the resource pool the agent serves.
        slots: all its slot ids, in the order slots are handed out.
        disabled_slots: slots an operator disabled: never assigned.
        busy_slots: slots held by work that is not among the running allocations.
        enabled: a disabled agent gets no new work.
        draining: a draining agent keeps its running work but gets no new work.
        features: what the agent can provide to requests that need it (opaque names the
            master derives from the agent's registered runtime: a container engine, a
            Unix identity it may run tasks as); see :attr:`Request.needs`.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: a slot id repeats, or a disabled/busy slot is not one of ``slots``.
    """

    id: str
    pool: str
    slots: tuple[str, ...]
    disabled_slots: frozenset[str] = field(default_factory=frozenset)
    busy_slots: frozenset[str] = field(default_factory=frozenset)
    enabled: bool = True
    draining: bool = False
    features: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        _check_id(self.id, "AgentState.id")
        _check_id(self.pool, "AgentState.pool")
        _check_slot_ids(self.slots, f"AgentState({self.id}).slots")
        if not isinstance(self.features, frozenset):
            raise TypeError(f"AgentState({self.id}).features must be a frozenset of names")
        for name in ("disabled_slots", "busy_slots"):
            value = getattr(self, name)
            if not isinstance(value, frozenset):
                raise TypeError(f"AgentState({self.id}).{name} must be a frozenset of slot ids")
            unknown = sorted(value - set(self.slots))
            if unknown:
                raise ValueError(
                    f"AgentState({self.id}).{name} names slots {unknown} that are not in "
                    f"its slots {self.slots!r}"
                )
        _check_bool(self.enabled, f"AgentState({self.id}).enabled")
        _check_bool(self.draining, f"AgentState({self.id}).draining")

    @property
    def accepts_work(self) -> bool:
        """True when the agent may be given new work (enabled and not draining)."""
        return self.enabled and not self.draining


@dataclass(frozen=True)
class Request:
    """A pending request for slots (one trial, command, notebook ...).

    Attributes:
        id: the request's id (the allocation id it will run under).
        group_id: the job it belongs to (an experiment id); fair share, ``max_slots``
            and ``weight`` apply per group.
        slots_needed: slots wanted, all or none (gang); 0 for a zero-slot task.
        priority: lower runs sooner; None uses the pool's ``default_priority``.
        weight: fair-share weight of the group (> 0); every pending request of a group
            must give the same value.
        max_slots: cap on the group's slots in this pool, running ones included; None for
            no cap; every pending request of a group must give the same value.
        submitted_at: orders requests of equal priority (seconds since the epoch, or an
            index); ties break by ``id``.
        preemptible: whether the allocation it becomes may later be preempted.
        needs: features every agent it runs on must have (:attr:`AgentState.features`).
        avoid_agents: agents it must not run on (an ``exclude_node`` log policy keeps a
            trial off the agents where it failed); such a request is placed after the
            others, on the slots still free, and preempts nobody.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: a negative slot count or cap, a non-positive or non-finite weight,
            or a non-finite ``submitted_at``.
    """

    id: str
    group_id: str
    slots_needed: int
    priority: int | None = None
    weight: float = 1.0
    max_slots: int | None = None
    submitted_at: float = 0.0
    preemptible: bool = True
    needs: frozenset[str] = field(default_factory=frozenset)
    avoid_agents: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        _check_id(self.id, "Request.id")
        for name in ("needs", "avoid_agents"):
            if not isinstance(getattr(self, name), frozenset):
                raise TypeError(f"Request({self.id}).{name} must be a frozenset of names")
        _check_id(self.group_id, f"Request({self.id}).group_id")
        _check_int(self.slots_needed, f"Request({self.id}).slots_needed", minimum=0)
        if self.priority is not None:
            _check_int(self.priority, f"Request({self.id}).priority")
        _check_weight(self.weight, f"Request({self.id}).weight")
        if self.max_slots is not None:
            _check_int(self.max_slots, f"Request({self.id}).max_slots", minimum=0)
        if isinstance(self.submitted_at, bool) or not isinstance(self.submitted_at, (int, float)):
            raise TypeError(f"Request({self.id}).submitted_at must be a number")
        if not math.isfinite(self.submitted_at):
            raise ValueError(f"Request({self.id}).submitted_at must be finite")
        _check_bool(self.preemptible, f"Request({self.id}).preemptible")


@dataclass(frozen=True)
class Allocation:
    """A running allocation: the slots a former request holds now.

    Attributes:
        id: the allocation's id (the id of the request it came from).
        group_id: the job it belongs to (an experiment id).
        slots: agent id -> slot ids held there; a zero-slot task maps its agent to ``()``.
        priority: None means the pool's ``default_priority``.
        weight: the group's fair-share weight when it was started (> 0).
        preemptible: False keeps it from ever being chosen for preemption.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: no agent given, a slot id repeated, or a bad weight.
    """

    id: str
    group_id: str
    slots: Mapping[str, tuple[str, ...]]
    priority: int | None = None
    weight: float = 1.0
    preemptible: bool = True

    def __post_init__(self) -> None:
        _check_id(self.id, "Allocation.id")
        _check_id(self.group_id, f"Allocation({self.id}).group_id")
        if not isinstance(self.slots, Mapping) or not self.slots:
            raise ValueError(
                f"Allocation({self.id}).slots must map at least one agent id to slot ids"
            )
        for agent_id, slot_ids in self.slots.items():
            _check_id(agent_id, f"Allocation({self.id}).slots key")
            _check_slot_ids(slot_ids, f"Allocation({self.id}).slots[{agent_id!r}]")
        if self.priority is not None:
            _check_int(self.priority, f"Allocation({self.id}).priority")
        _check_weight(self.weight, f"Allocation({self.id}).weight")
        _check_bool(self.preemptible, f"Allocation({self.id}).preemptible")

    @property
    def slot_count(self) -> int:
        """Total slots held, over all agents."""
        return sum(len(slot_ids) for slot_ids in self.slots.values())


@dataclass(frozen=True)
class Assignment:
    """Start a request on these slots.

    Attributes:
        request_id: the pending request to start.
        slots: agent id -> slot ids, agents in id order; a zero-slot request maps its
            agent to ``()``.
    """

    request_id: str
    slots: Mapping[str, tuple[str, ...]]

    @property
    def slot_count(self) -> int:
        """Total slots assigned, over all agents."""
        return sum(len(slot_ids) for slot_ids in self.slots.values())


@dataclass(frozen=True)
class Decision:
    """The outcome of one scheduling pass.

    Attributes:
        assignments: requests to start now, in the order they were decided.
        preemptions: ids of running allocations to preempt gracefully (signal, let them
            checkpoint and exit); their slots are not reassigned in the same pass.
    """

    assignments: tuple[Assignment, ...] = ()
    preemptions: tuple[str, ...] = ()
