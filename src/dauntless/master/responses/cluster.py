"""Answers of the cluster routes: the master's info, agents and their slots, resource pools
and the job queue.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open


class MasterInfo(_Open):
    version: str
    #: Dauntless's own version (``version`` is the Determined release to its client).
    dauntless_version: str | None = None
    cluster_name: str | None = None
    cluster_id: str | None = None
    sso_providers: list[dict[str, Any]] = []
    cluster_message: str | None = None


class SlotOut(_Open):
    id: str
    type: str
    device: str
    enabled: bool
    allocation_id: str | None


class AgentOut(_Open):
    id: str
    resource_pool: str
    hostname: str
    state: str
    enabled: bool
    draining: bool
    registered_at: float
    last_heartbeat: float
    slots: list[SlotOut]


class AgentBody(BaseModel):
    agent: AgentOut


class AgentRegistered(BaseModel):
    """A registration's answer: the agent, and the credential it presents from now on
    (``X-Dauntless-Agent-Token``; issued once, stored by the master only hashed)."""

    agent: AgentOut
    token: str
    #: The master's ``agent_timeout`` (seconds): an agent that has had no heartbeat
    #: answered for most of it ends its tasks itself (docs/partitions.md, "fencing").
    agent_timeout: float | None = None


class AgentsOut(BaseModel):
    agents: list[AgentOut]


class ResourcePoolOut(_Open):
    name: str
    scheduler: str
    preemption: bool
    agents: int
    agents_lost: int
    slots_total: int
    slots_used: int
    slots_free: int
    slots_disabled: int


class ResourcePoolsOut(BaseModel):
    """Dauntless's pools, and Determined's ``GetResourcePoolsResponse`` fields
    (``resourcePools``, ``pagination``) for its client."""

    resource_pools: list[ResourcePoolOut]
    resourcePools: list[dict[str, Any]] = []
    pagination: dict[str, int] = {}


class JobOut(_Open):
    """A job of the queue (:mod:`dauntless.master.routes_jobs`): an experiment
    (``experiment-<id>``) or a task (``task-<id>``); ``priority`` None means the pool's
    default (``effective_priority``); ``submission_time`` in seconds since the epoch."""

    job_id: str
    type: str
    entity_id: str
    name: str
    owner: str
    owner_id: int | None
    resource_pool: str
    priority: int | None
    weight: float
    requested_slots: int
    allocated_slots: int
    submission_time: float
    state: str
    preemptible: bool
    effective_priority: int
    scheduler: str
    queue_position: int


class JobBody(BaseModel):
    job: JobOut


class JobsOut(BaseModel):
    jobs: list[JobOut]
