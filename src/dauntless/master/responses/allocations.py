"""Answers of the routes of allocations and of a running trial's harness: the agent's
heartbeat, searcher operations, preemption and rendezvous.
"""

from __future__ import annotations

from pydantic import BaseModel

from ._base import _Open


class OpLengthOut(BaseModel):
    length: int


class SearcherOperation(BaseModel):
    """The trial's next operation (``op``: train to ``length`` batches) or none;
    ``completed``: the searcher closed the trial."""

    op: OpLengthOut | None
    completed: bool


class PreemptionSignal(BaseModel):
    preempt: bool


class RendezvousInfo(_Open):
    addr: str
    port: int
    world_size: int
    num_parts: int


class RendezvousOut(BaseModel):
    rendezvous: RendezvousInfo | None


class TaskSpec(_Open):
    """What an agent starts. A trial's run has ``trial_id``, ``experiment_id`` and a
    ``context_url``; a command, notebook, shell or TensorBoard (``task_type``) has no
    trial or experiment, and a context only when one was uploaded."""

    allocation_id: str
    task_id: str
    task_type: str = "TRIAL"
    trial_id: int | None
    experiment_id: int | None
    slot_ids: list[str]
    entrypoint: str | list[str] | None
    env: dict[str, str]
    context_url: str | None


class HeartbeatOut(BaseModel):
    start: list[TaskSpec]
    kill: list[str]
    #: The master's ``agent_timeout`` in seconds (see ``AgentRegistered``).
    agent_timeout: float | None = None


class AllocationOut(_Open):
    """An allocation part; ``trial_id``/``experiment_id`` are None for a command, notebook,
    shell or TensorBoard."""

    id: str
    trial_id: int | None
    experiment_id: int | None
    task_id: str | None = None
    agent_id: str
    slot_ids: list[str]
    state: str
    run_id: int
    exit_code: int | None
    exit_message: str | None
    created_at: float
    started_at: float | None
    ended_at: float | None


class AllocationsOut(BaseModel):
    allocations: list[AllocationOut]
