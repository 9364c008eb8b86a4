"""Answers of the generic task routes (commands, notebooks, shells, TensorBoards)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open


class TaskOut(_Open):
    """A generic task (command, notebook, shell or TensorBoard; docs/protocol.md,
    "Generic tasks"): ``slots`` it asks for, its latest allocation's ``agent_id`` and
    ``allocation_id`` (None before one), ``service_url`` (the proxy path of a notebook,
    shell or TensorBoard; None for a command), times in seconds since the epoch."""

    id: str
    type: str
    state: str
    owner: str
    user_id: int | None
    description: str
    config: dict[str, Any]
    entrypoint: str | list[str] | None
    resource_pool: str
    slots: int
    agent_id: str | None
    allocation_id: str | None
    ready: bool
    service_url: str | None
    experiment_ids: list[int]
    trial_ids: list[int]
    exit_code: int | None
    exit_message: str | None
    created_at: float
    start_time: float | None
    end_time: float | None


class ShellKeyOut(BaseModel):
    """``GET /shells/{id}/ssh_key``: the shell's SSH key pair in OpenSSH's formats
    (the private key unencrypted: keep it mode 0600)."""

    id: str
    private_key: str
    public_key: str


class TaskBody(BaseModel):
    task: TaskOut


class TasksOut(BaseModel):
    """A page of tasks (every one without ``limit``) and how many matched in all."""

    tasks: list[TaskOut]
    total: int


class TaskCreated(BaseModel):
    """``POST /{commands,notebooks,shells,tensorboards}``: the task, one warning per
    config field the agent's runtime ignores, and whether an existing TensorBoard of the
    same experiments and trials was ``reused`` (always False for the other families)."""

    task: TaskOut
    warnings: list[str]
    reused: bool


class TaskLogLineOut(_Open):
    """A task's log line (as a trial's, with ``task_id`` in place of ``trial_id``)."""

    id: int
    task_id: str
    allocation_id: str
    timestamp: float
    stdtype: str
    rank_id: int | None
    log: str


class TaskLogsOut(BaseModel):
    logs: list[TaskLogLineOut]
    task_state: str
