"""Response models of the routes that answer fixed shapes (docs/protocol.md), so that the
OpenAPI spec describes the answers and FastAPI checks them.

Models of objects allow fields beyond those listed (``extra="allow"``): the listed ones
are promised; a newer master may add more without breaking clients.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Empty(BaseModel):
    """``{}``: the request was applied."""

    model_config = ConfigDict(extra="forbid")


class MasterInfo(_Open):
    version: str
    cluster_name: str | None = None
    cluster_id: str | None = None


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


class Stored(BaseModel):
    """Whether the report was new (False: a repeat, ignored)."""

    stored: bool


class StoredMany(BaseModel):
    stored: list[bool]


class StoredCount(BaseModel):
    stored: int


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


class TrialOut(_Open):
    id: int
    experiment_id: int
    request_id: str
    state: str
    hparams: dict[str, Any]
    seed: int
    restarts: int
    run_id: int
    total_batches: int
    target_length: int | None
    searcher_closed: bool
    best_validation: float | None
    latest_validation: dict[str, Any] | None
    latest_checkpoint: str | None
    start_time: float
    end_time: float | None
    log_policy_matches: list[str]
    failure: dict[str, Any] | None


class TrialBody(BaseModel):
    trial: TrialOut


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


class ExperimentOut(_Open):
    id: int
    name: str
    description: str | None
    state: str
    archived: bool
    owner: str
    username: str
    user_id: int | None
    config: dict[str, Any]
    seed: int
    progress: float
    start_time: float
    end_time: float | None
    num_trials: int
    best_searcher_metric: float | None
    searcher_metric: str | None
    smaller_is_better: bool


class ExperimentBody(BaseModel):
    experiment: ExperimentOut


class ExperimentDetail(BaseModel):
    experiment: ExperimentOut
    trials: list[TrialOut]


class ExperimentPage(BaseModel):
    experiments: list[ExperimentOut]
    total: int


class TrialsOut(BaseModel):
    trials: list[TrialOut]


class CheckpointOut(_Open):
    uuid: str
    trial_id: int
    experiment_id: int
    total_batches: int
    state: str
    resources: dict[str, Any]
    metadata: dict[str, Any]
    report_time: float
    storage_path: str | None


class CheckpointBody(BaseModel):
    checkpoint: CheckpointOut


class CheckpointsOut(BaseModel):
    checkpoints: list[CheckpointOut]


class MetricOut(_Open):
    trial_id: int
    group: str
    total_batches: int
    epoch: float | None
    trial_run_id: int
    values: dict[str, Any]
    reported_at: float


class MetricSeriesOut(_Open):
    group: str
    name: str
    batches: list[int]
    values: list[float]
    raw_points: int
    downsampled: bool


class MetricsOut(BaseModel):
    metrics: list[MetricOut]
    next_after_batches: int | None = None
    series: list[MetricSeriesOut] | None = None
    downsampling: str | None = None


class LogLineOut(_Open):
    id: int
    trial_id: int | None
    allocation_id: str
    timestamp: float
    stdtype: str
    rank_id: int | None
    log: str


class LogsOut(BaseModel):
    logs: list[LogLineOut]
    trial_state: str


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
    resource_pools: list[ResourcePoolOut]


class UserOut(_Open):
    """A user (never its password hash); ``modified_at`` in seconds since the epoch."""

    id: int
    username: str
    admin: bool
    active: bool
    display_name: str | None
    modified_at: float


class UserBody(BaseModel):
    user: UserOut


class UsersOut(BaseModel):
    users: list[UserOut]


class LoginOut(BaseModel):
    """A new session: the bearer token (also set as a cookie) and its user."""

    token: str
    user: UserOut


class ExperimentCreated(BaseModel):
    """``POST /experiments``: the new experiment (None for ``validate_only``) and one
    warning per deprecated or ignored config field (``"<field>: <why>"``)."""

    experiment: ExperimentOut | None
    warnings: list[str]


class TrialSeriesOut(BaseModel):
    """One trial's series of a metric: ``batches`` (x) and ``values`` (y), downsampled
    when ``downsampled`` (``raw_points`` stored points)."""

    trial_id: int
    batches: list[int | float]
    values: list[int | float | None]
    raw_points: int
    downsampled: bool


class ExperimentSeriesOut(BaseModel):
    """``GET /experiments/{id}/metrics``: one metric of an experiment's trials."""

    experiment_id: int
    group: str
    name: str
    max_points: int
    downsampling: str
    series: list[TrialSeriesOut]


class MetricNamesOut(BaseModel):
    """The numeric metric names of an experiment's trials' latest reports, by group."""

    training: list[str]
    validation: list[str]


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


class TaskBody(BaseModel):
    task: TaskOut


class TasksOut(BaseModel):
    tasks: list[TaskOut]


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


class LabelsOut(BaseModel):
    """An experiment's labels after the change."""

    labels: list[str]


class CheckpointDeleted(BaseModel):
    """``DELETE /checkpoints/{uuid}``: the checkpoint and its new state (``DELETED``)."""

    uuid: str
    state: str


class PreviewTrialOut(BaseModel):
    """One trial a search would create: its hyperparameters and the cumulative lengths
    (batches) it would train to and validate at."""

    hparams: dict[str, Any]
    lengths: list[int]


class PreviewFinalLength(BaseModel):
    """``trials`` trials would end after ``batches`` batches."""

    batches: int
    trials: int


class PreviewBracket(BaseModel):
    """An ``adaptive_asha`` bracket: its rung lengths in ``unit``, trials, and how many
    it runs at once."""

    rungs: list[int]
    unit: str
    trials: int
    max_concurrent: int


class PreviewSummary(_Open):
    """Totals of a previewed search (``brackets`` for ``adaptive_asha`` only)."""

    searcher: str
    seed: int
    num_trials: int
    total_batches: int
    final_lengths: list[PreviewFinalLength]
    length_unit: str
    brackets: list[PreviewBracket] | None = None


class PreviewOut(BaseModel):
    """``POST /preview-hp-search``: see :func:`dauntless.searcher.preview_document`."""

    trials: list[PreviewTrialOut]
    summary: PreviewSummary


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


class ModelDefEntry(BaseModel):
    """A file (``type`` ``file``, ``size`` in bytes) or directory (``dir``, size 0) of an
    experiment's model definition, by its path inside the context directory."""

    path: str
    size: int
    type: str


class ModelDefTree(BaseModel):
    """``GET /experiments/{id}/model_def/tree``: every entry, sorted by path."""

    files: list[ModelDefEntry]


class BatchSeriesOut(BaseModel):
    """One per-batch training metric of a trial: ``values[i]`` at batch ``batches[i]``;
    ``raw_points`` stored points, ``downsampled`` when M4 kept fewer."""

    name: str
    batches: list[int]
    values: list[float]
    raw_points: int
    downsampled: bool


class BatchMetricsOut(BaseModel):
    """``GET /trials/{id}/batch-metrics``: the metric names and one series per name."""

    names: list[str]
    series: list[BatchSeriesOut]
