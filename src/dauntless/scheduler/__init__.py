"""Pure scheduling decisions for one resource pool.

:func:`schedule` maps (pool settings, agents, pending requests, running allocations) to
a :class:`Decision` (assignments and preemptions). No I/O, no clocks: the master builds
the inputs from its database and carries the decision out.
"""

from ._config import pool_spec_from_config
from ._fair_share import fair_shares
from ._model import (
    AgentState,
    Allocation,
    Assignment,
    Decision,
    FittingPolicy,
    PoolSpec,
    Request,
    SchedulerType,
)
from ._provision import InstanceInfo, ProvisionDecision, ProvisionerSpec, provision
from ._schedule import schedule

__all__ = [
    "AgentState",
    "Allocation",
    "Assignment",
    "Decision",
    "FittingPolicy",
    "InstanceInfo",
    "PoolSpec",
    "ProvisionDecision",
    "ProvisionerSpec",
    "Request",
    "SchedulerType",
    "fair_shares",
    "pool_spec_from_config",
    "provision",
    "schedule",
]
