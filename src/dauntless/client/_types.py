"""The objects the master's REST API returns (docs/protocol.md, "Objects").

They are :class:`typing.TypedDict` views of the decoded JSON: plain dicts at run time, so
``--json`` output is the master's answer unchanged, and fields the master adds later pass
through untouched. Times are float seconds since the epoch; lengths are batches; sizes
are bytes.
"""

from __future__ import annotations

from typing import Any, TypedDict

#: Experiment states after which nothing more happens (the follow loops stop there).
TERMINAL_EXPERIMENT_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})
#: Trial states after which the trial produces no more logs or metrics.
TERMINAL_TRIAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR"})


class AgentUserGroup(TypedDict):
    """A user's link to a Unix identity (Determined's ``agent_user_group``)."""

    agent_uid: int | None
    agent_gid: int | None
    agent_user: str | None
    agent_group: str | None


class User(TypedDict):
    """A user (``GET /me``, ``GET /users``); ``modified_at`` in seconds since the epoch;
    ``agent_user_group`` None when the user has no link."""

    id: int
    username: str
    admin: bool
    active: bool
    display_name: str | None
    modified_at: float | None
    agent_user_group: AgentUserGroup | None


class MasterInfo(TypedDict):
    """``GET /master``."""

    version: str
    cluster_name: str
    cluster_id: str


class Experiment(TypedDict):
    """An experiment; ``config`` is the resolved config (defaults filled in)."""

    id: int
    name: str | None
    description: str | None
    state: str
    archived: bool
    config: dict[str, Any]
    seed: int
    owner: str | None
    progress: float | None
    start_time: float | None
    end_time: float | None
    num_trials: int
    best_searcher_metric: float | None
    searcher_metric: str | None
    smaller_is_better: bool


class CreatedExperiment(Experiment):
    """A new experiment, with the master's warnings about its config (one
    ``"<field>: <why>"`` per deprecated or ignored field)."""

    warnings: list[str]


class Trial(TypedDict):
    """A trial; ``total_batches`` counts the batches trained so far;
    ``latest_validation`` holds the values of its latest validation and
    ``latest_validation_batches`` that validation's batch count."""

    id: int
    experiment_id: int
    request_id: str
    state: str
    hparams: dict[str, Any]
    seed: int
    restarts: int
    run_id: int
    total_batches: int
    best_validation: float | None
    latest_validation: dict[str, Any] | None
    latest_validation_batches: int | None
    latest_checkpoint: str | None
    start_time: float | None
    end_time: float | None


class ExperimentDetail(TypedDict):
    """``GET /experiments/{id}``: the experiment and its trials."""

    experiment: Experiment
    trials: list[Trial]


class ExperimentPage(TypedDict):
    """``GET /experiments``: one page and the total number that matched."""

    experiments: list[Experiment]
    total: int


class Metric(TypedDict):
    """One report of training or validation metrics at ``total_batches``."""

    trial_id: int
    group: str
    total_batches: int
    epoch: float | None
    trial_run_id: int
    values: dict[str, Any]
    reported_at: float


class Checkpoint(TypedDict):
    """A checkpoint; ``resources`` maps relative paths to sizes in bytes."""

    uuid: str
    trial_id: int
    experiment_id: int
    total_batches: int
    state: str
    resources: dict[str, int]
    metadata: dict[str, Any]
    report_time: float | None
    storage_path: str | None


class Slot(TypedDict):
    """One slot of an agent; ``allocation_id`` is None when the slot is free."""

    id: str
    type: str
    device: str
    enabled: bool
    allocation_id: str | None


class AgentRuntime(TypedDict):
    """How an agent runs tasks: ``name`` (process, docker or podman), whether it runs
    container images, and whether it can make bind mounts for tasks without one."""

    name: str
    containers: bool
    mount_namespace: bool


class Agent(TypedDict):
    """An agent, its slots and its task runtime."""

    id: str
    resource_pool: str
    hostname: str
    state: str
    registered_at: float
    last_heartbeat: float
    slots: list[Slot]
    runtime: AgentRuntime


class LogLine(TypedDict):
    """One line of a trial's output; ``id`` grows monotonically per master."""

    id: int
    trial_id: int
    allocation_id: str
    timestamp: float
    stdtype: str
    rank_id: int | None
    log: str


class TrialLogs(TypedDict):
    """``GET /trials/{id}/logs``: lines after ``after_id`` and the trial's state."""

    logs: list[LogLine]
    trial_state: str
