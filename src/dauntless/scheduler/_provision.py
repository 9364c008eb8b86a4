"""Pure provisioning decisions for one resource pool with a provider (seed 004: the
master "manages provisioning and deprovisioning of agents in clouds").

:func:`provision` maps (the pool's provider limits, the instances it launched, the slot
needs of the requests the scheduler could not place, the time) to a
:class:`ProvisionDecision`: how many instances to launch, and which to terminate and
why. No I/O and no clock of its own: the master builds the inputs from its database,
carries the decision out through a provider (local processes, EC2, Compute Engine) and
records what it did; :mod:`benchmarks.provisioner_sim` drives it through a simulated day.

The rules (Determined's dynamic agents, restated):

* An instance launched more than ``max_agent_starting_period`` seconds ago whose agent
  has not registered is terminated (it is broken or stuck), so that the pending demand it
  was meant for launches a replacement in the same decision.
* Pending requests are packed first-fit-decreasing into the capacity that is already
  coming or free: the free slots of registered, idle-or-busy instances and the full slots
  of instances still starting. A request of more slots than one instance has needs
  ``ceil(slots / slots_per_instance)`` whole, empty instances (a multi-agent gang). What
  does not fit opens new instances, up to ``max_instances`` counted over every live
  (starting, running) instance. Zero-slot requests need only that some instance exists.
* ``min_instances`` are kept live at all times.
* A registered instance idle (no allocation) for ``max_idle_agent_period`` seconds or
  more is terminated, the longest idle first, unless the pending demand was packed onto
  it or terminating it would leave fewer than ``min_instances``. Busy instances are never
  terminated here: their work finishes (or is preempted by an operator) first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

InstanceState = Literal["STARTING", "RUNNING"]


@dataclass(frozen=True)
class ProvisionerSpec:
    """A pool's provider limits (Determined's ``resource_pools[].provider`` names).

    Attributes:
        slots_per_instance: slots the agent of one instance reports (>= 0; 0 for a
            CPU-only instance that runs zero-slot tasks only).
        min_instances: instances kept live even without demand (>= 0).
        max_instances: the most live instances at once (>= min_instances).
        max_idle_agent_period: seconds an instance may stay idle before it is stopped.
        max_agent_starting_period: seconds an instance may take to register its agent
            before it is terminated as broken.
    """

    slots_per_instance: int
    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period: float = 1200.0
    max_agent_starting_period: float = 1200.0

    def __post_init__(self) -> None:
        for name in ("slots_per_instance", "min_instances", "max_instances"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.max_instances < self.min_instances:
            raise ValueError(
                f"max_instances ({self.max_instances}) must be >= min_instances "
                f"({self.min_instances})"
            )
        for name in ("max_idle_agent_period", "max_agent_starting_period"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class InstanceInfo:
    """One live instance the provisioner launched.

    Attributes:
        id: the instance's name (also its agent's id).
        state: ``STARTING`` (launched, agent not registered yet) or ``RUNNING``.
        launched_at: seconds since the epoch when it was launched.
        free_slots: slots of its agent that hold no allocation (RUNNING only).
        idle_since: seconds since the epoch since which its agent holds no allocation;
            None while busy or starting.
    """

    id: str
    state: InstanceState
    launched_at: float
    free_slots: int = 0
    idle_since: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"instance id must be a non-empty str, got {self.id!r}")
        if self.state not in ("STARTING", "RUNNING"):
            raise ValueError(f"instance {self.id}: state must be STARTING or RUNNING")
        if self.free_slots < 0:
            raise ValueError(f"instance {self.id}: free_slots must be >= 0")


@dataclass(frozen=True)
class ProvisionDecision:
    """What to do now.

    Attributes:
        launch: how many new instances to launch.
        terminate: ids of instances to terminate, each with its reason
            (``never registered`` or ``idle``).
        unplaceable: slot counts of pending requests that no instance of this pool
            could ever hold within ``max_instances`` (they stay pending).
    """

    launch: int = 0
    terminate: dict[str, str] = field(default_factory=dict)
    unplaceable: tuple[int, ...] = ()


def _instances_for(slots: int, per_instance: int) -> int:
    return max(1, math.ceil(slots / per_instance)) if per_instance else 1


def provision(
    spec: ProvisionerSpec,
    instances: Sequence[InstanceInfo],
    pending_slots: Sequence[int],
    now: float,
) -> ProvisionDecision:
    """Decide launches and terminations for one pool.

    Args:
        spec: the pool's provider limits.
        instances: its live (starting or running) instances; terminated ones are left out.
        pending_slots: slots needed by each request the scheduler could not place
            (``resources.slots_per_trial``; 0 for a zero-slot task).
        now: seconds since the epoch.

    Returns:
        The decision; ``launch + len(live instances not terminated)`` never exceeds
        ``spec.max_instances`` unless already exceeded (then ``launch`` is 0).

    Raises:
        ValueError: a negative slot count, or two instances with one id.
    """
    if len({i.id for i in instances}) != len(instances):
        raise ValueError("instance ids must be unique")
    for slots in pending_slots:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
            raise ValueError(f"pending slot counts must be ints >= 0, got {slots!r}")
    per = spec.slots_per_instance
    terminate: dict[str, str] = {}
    for inst in instances:
        if inst.state == "STARTING" and now - inst.launched_at > spec.max_agent_starting_period:
            terminate[inst.id] = "never registered"
    live = [i for i in instances if i.id not in terminate]

    # Bins: capacity that exists or is coming. Each bin: [free slots, instance id, whole].
    bins: list[list] = []
    for inst in live:
        free = per if inst.state == "STARTING" else min(inst.free_slots, per)
        bins.append([free, inst.id, free == per])
    used: set[str] = set()
    new_bins: list[int] = []  # free slots left in each instance to launch
    room = spec.max_instances - len(live)
    unplaceable: list[int] = []
    for slots in sorted(pending_slots, reverse=True):
        if slots == 0:
            if bins or new_bins:
                if bins:
                    used.add(bins[0][1])
                continue
            if room > 0:
                new_bins.append(per)
                room -= 1
            else:
                unplaceable.append(slots)
            continue
        if slots > per:
            need = _instances_for(slots, per)
            whole = [b for b in bins if b[2] and b[0] == per]
            take_old = whole[:need]
            need_new = need - len(take_old)
            empty_new = [k for k, free in enumerate(new_bins) if free == per]
            take_new = empty_new[:need_new]
            launch_more = need_new - len(take_new)
            if per == 0 or launch_more > room:
                unplaceable.append(slots)
                continue
            for b in take_old:
                b[0], b[2] = 0, False
                used.add(b[1])
            for k in take_new:
                new_bins[k] = 0
            new_bins.extend([0] * launch_more)
            room -= launch_more
            continue
        fit = next((b for b in bins if b[0] >= slots), None)
        if fit is not None:
            fit[0] -= slots
            fit[2] = False
            used.add(fit[1])
            continue
        new_k = next((i for i, free in enumerate(new_bins) if free >= slots), None)
        if new_k is not None:
            new_bins[new_k] -= slots
            continue
        if room > 0:
            new_bins.append(per - slots)
            room -= 1
        else:
            unplaceable.append(slots)
    launch = len(new_bins)
    launch += max(0, spec.min_instances - len(live) - launch)
    launch = max(0, min(launch, spec.max_instances - len(live)))

    idle = sorted(
        (
            i
            for i in live
            if i.state == "RUNNING"
            and i.idle_since is not None
            and i.id not in used
            and now - i.idle_since >= spec.max_idle_agent_period
        ),
        key=lambda i: (i.idle_since, i.id),
    )
    removable = max(len(live) + launch - spec.min_instances, 0)
    for inst in idle[:removable]:
        terminate[inst.id] = "idle"
    return ProvisionDecision(launch=launch, terminate=terminate, unplaceable=tuple(unplaceable))
