"""Request bodies of the REST API (pydantic; unknown fields are rejected) and the JSON
views of database rows (docs/protocol.md, "Objects")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Row

from .api_spec import INT32_MAX, INT32_MIN
from .db import AgentRow, CheckpointRow, ExperimentRow, MetricRow, TaskLogRow, TrialRow


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SlotIn(_Body):
    id: str = Field(min_length=1)
    type: Literal["cpu", "cuda", "rocm"] = "cpu"
    device: str = ""


class AgentIdentityIn(_Body):
    """The Unix identity an agent runs as (issue 29): a root agent runs tasks as any
    identity, each in a private PID namespace (``pid_namespace``); a non-root agent
    only as its own."""

    uid: int = Field(ge=0, le=2**31 - 2)
    gid: int = Field(ge=0, le=2**31 - 2)
    root: bool = False
    pid_namespace: bool = False


class AgentRuntimeIn(_Body):
    """What an agent reports of its task runtime (:mod:`dauntless.agent.runtimes`)."""

    name: Literal["process", "docker", "podman"] = "process"
    containers: bool = False
    mount_namespace: bool = False
    identity: AgentIdentityIn | None = None
    prometheus_target: str | None = Field(
        default=None, max_length=300, pattern=r"^[A-Za-z0-9.:\[\]_-]+:[0-9]{1,5}$"
    )
    """``host:port`` of the agent's Prometheus page (``--prometheus-port``), for
    ``/prom/det-http-sd-config`` (issue 34)."""


class RegisterAgent(_Body):
    id: str = Field(min_length=1, max_length=256)
    resource_pool: str = "default"
    hostname: str = ""
    slots: list[SlotIn]
    running: list[str] = Field(default_factory=list)
    """Allocation part ids the agent still runs (adopted by the master)."""
    runtime: AgentRuntimeIn | None = None


class AllocationExited(_Body):
    exit_code: int | None = Field(ge=INT32_MIN, le=INT32_MAX)
    message: str | None = None
    fatal: bool = False


class ExitReport(AllocationExited):
    """One task exit carried by a heartbeat (``POST /allocations/{id}/exited``'s body
    with the allocation's id)."""

    allocation_id: str = Field(max_length=64)


class TaskResourceIn(_Body):
    """An agent's sample of one task's process tree (issue 34)."""

    allocation_id: str = Field(max_length=64)
    cpu_percent: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    rss_bytes: int = Field(ge=0, le=2**63 - 1)
    gpu_memory_bytes: int | None = Field(default=None, ge=0, le=2**63 - 1)
    processes: int = Field(ge=0, le=INT32_MAX)


class Heartbeat(_Body):
    running: list[str] = Field(default_factory=list)
    exited: list[ExitReport] = Field(default_factory=list, max_length=1000)
    resources: list[TaskResourceIn] = Field(default_factory=list, max_length=1000)


class LogLineIn(_Body):
    allocation_id: str = Field(max_length=64)
    seq: int | None = Field(default=None, ge=1, le=INT32_MAX)
    timestamp: float | None = None
    stdtype: Literal["stdout", "stderr"] = "stdout"
    rank_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    log: str


class LogBatch(_Body):
    logs: list[LogLineIn] = Field(max_length=10_000)


class OpLength(_Body):
    length: int = Field(ge=0, le=INT32_MAX)


class CompletedOperation(_Body):
    op: OpLength
    searcher_metric: float


class MetricsReport(_Body):
    group: Literal["training", "validation"]
    steps_completed: int = Field(ge=0, le=INT32_MAX)
    trial_run_id: int = Field(default=0, ge=0, le=INT32_MAX)
    metrics: dict[str, Any]
    batch_metrics: list[Any] | None = None


MAX_METRICS_BATCH = 1000
"""Most reports in one ``POST /trials/{id}/metrics/batch``."""


class MetricsReportBatch(_Body):
    reports: list[MetricsReport] = Field(min_length=1, max_length=MAX_METRICS_BATCH)


class ProgressReport(_Body):
    progress: float = Field(ge=0.0, le=1.0)


class EarlyExit(_Body):
    reason: str


class GCPolicyIn(_Body):
    save_experiment_best: int | None = Field(default=None, ge=0, le=INT32_MAX)
    save_trial_best: int | None = Field(default=None, ge=0, le=INT32_MAX)
    save_trial_latest: int | None = Field(default=None, ge=0, le=INT32_MAX)


class ResourcesPatch(_Body):
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float | None = Field(default=None, gt=0)
    max_slots: int | None = Field(default=None, ge=0, le=INT32_MAX)


class PatchExperiment(_Body):
    name: str | None = Field(default=None, max_length=512)
    description: str | None = Field(default=None, max_length=65_536)
    notes: str | None = Field(default=None, max_length=1_048_576)
    labels: list[Annotated[str, Field(min_length=1, max_length=255)]] | None = Field(
        default=None, max_length=1000
    )
    checkpoint_storage: GCPolicyIn | None = None
    resources: ResourcesPatch | None = None


class RendezvousIn(_Body):
    addr: str = Field(min_length=1, max_length=256)
    port: int = Field(ge=1, le=65535)


class AgentSwitch(_Body):
    drain: bool = False


CHECKPOINT_UUID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""A checkpoint's uuid names its directory in storage: one path component, never
``.``, ``..`` or a path."""


class CheckpointReport(_Body):
    """``POST /checkpoints``: a checkpoint's files (``resources``: relative path ->
    bytes) are refused, naming the path, when a path is absolute, holds ``..`` or a NUL,
    or is longer than 4,096 characters (a download could not unpack it safely)."""

    uuid: str = Field(min_length=1, max_length=64, pattern=CHECKPOINT_UUID_PATTERN)
    trial_id: int = Field(ge=0, le=INT32_MAX)
    allocation_id: str | None = Field(default=None, max_length=64)
    steps_completed: int = Field(ge=0, le=INT32_MAX)
    resources: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: Literal["COMPLETED", "UPLOADING"] = "COMPLETED"

    @field_validator("resources")
    @classmethod
    def _relative_paths(cls, value: dict[str, int]) -> dict[str, int]:
        for path in value:
            parts = path.replace("\\", "/").split("/")
            if (
                not path
                or len(path) > 4096
                or "\0" in path
                or path.startswith("/")
                or ".." in parts
            ):
                raise ValueError(
                    f"{path!r} is not a relative path inside the checkpoint (absolute, "
                    "'..', NUL or over 4096 characters)"
                )
        return value


# ---------------------------------------------------------------------- views


def experiment_view(exp: ExperimentRow, num_trials: int, best: float | None) -> dict[str, Any]:
    """The JSON of an experiment."""
    searcher = exp.config.get("searcher", {})
    return {
        "id": exp.id,
        "name": exp.name,
        "description": exp.description,
        "notes": exp.notes or "",
        "labels": list(exp.config.get("labels") or []),
        "state": exp.state,
        "archived": exp.archived,
        "owner": exp.owner,
        "username": exp.owner,
        "user_id": exp.owner_id,
        "project_id": exp.project_id,
        "config": exp.config,
        "seed": exp.seed,
        "progress": exp.progress,
        "start_time": exp.start_time,
        "end_time": exp.end_time,
        "num_trials": num_trials,
        "best_searcher_metric": best,
        "searcher_metric": searcher.get("metric"),
        "smaller_is_better": searcher.get("smaller_is_better", True),
    }


def trial_view(trial: TrialRow, latest_validation: MetricRow | None) -> dict[str, Any]:
    """The JSON of a trial, ``latest_validation`` being its validation report at its
    largest batch count (None: it has not validated).

    Besides the row's fields: ``target_length``, the batches (cumulative) the searcher
    last asked the trial to train to (None before its first operation), and
    ``searcher_closed``, whether the searcher has closed the trial (it trains no further:
    done, or stopped early by an adaptive search when ``total_batches`` is below the
    search's full length). ``log_policy_matches``: names of the log policies that
    matched its logs; ``failure``: its latest failed run (``{run_id, allocation_id,
    agent_id, exit_code, message, log}``, ``log`` being the last error line the run
    printed) or None. ``parent_id``: the trial it was warm-started from (a PBT clone's
    parent) and ``warm_start_checkpoint`` that parent's checkpoint, or None.
    ``latest_validation`` is that report's values and
    ``latest_validation_batches`` its batch count (the step the trial reported it at:
    Core API trials put no ``batches`` key in their values). ``metadata`` is what its
    code set with ``core.train.set_metadata`` (``{}``: nothing), ``runner_state`` the
    status it last set with ``core.train.set_status`` (None: none).
    """
    return {
        "id": trial.id,
        "experiment_id": trial.experiment_id,
        "request_id": trial.request_id,
        "state": trial.state,
        "hparams": trial.hparams,
        "seed": trial.seed,
        "restarts": trial.restarts,
        "run_id": trial.run_id,
        "total_batches": trial.total_batches,
        "target_length": trial.searcher_op_length,
        "searcher_closed": bool(trial.searcher_closed),
        "best_validation": trial.best_validation,
        "latest_validation": None if latest_validation is None else latest_validation.values,
        "latest_validation_batches": (
            None if latest_validation is None else latest_validation.total_batches
        ),
        "latest_checkpoint": trial.latest_checkpoint,
        "start_time": trial.start_time,
        "end_time": trial.end_time,
        "log_policy_matches": list((trial.log_policy_state or {}).get("names", [])),
        "failure": trial.failure,
        "parent_id": trial.parent_id,
        "warm_start_checkpoint": trial.warm_start_checkpoint,
        "metadata": trial.meta or {},
        "runner_state": trial.runner_state,
    }


def metric_view(m: MetricRow | Row[Any]) -> dict[str, Any]:
    """The JSON of one metrics report: a :class:`MetricRow`, or a row of
    ``models.trials.METRIC_REPORT_COLUMNS``."""
    return {
        "trial_id": m.trial_id,
        "group": m.kind,
        "total_batches": m.total_batches,
        "epoch": m.epoch,
        "trial_run_id": m.trial_run_id,
        "values": m.values,
        "reported_at": m.reported_at,
    }


def checkpoint_view(c: CheckpointRow, storage_dir: str | None) -> dict[str, Any]:
    """The JSON of a checkpoint; ``storage_dir`` is its directory on shared_fs storage."""
    return {
        "uuid": c.uuid,
        "trial_id": c.trial_id,
        "experiment_id": c.experiment_id,
        "total_batches": c.total_batches,
        "state": c.state,
        "resources": c.resources,
        "metadata": c.meta,
        "report_time": c.report_time,
        "storage_path": storage_dir,
    }


def agent_view(a: AgentRow, used: dict[str, str], beat: float | None = None) -> dict[str, Any]:
    """The JSON of an agent; ``used`` maps slot id to the allocation holding it, ``beat``
    is its last heartbeat in the master's memory (epoch s; None: none), shown when later
    than the row's (:class:`dauntless.master.heartbeats.Heartbeats`)."""
    return {
        "id": a.id,
        "resource_pool": a.resource_pool,
        "hostname": a.hostname,
        "state": a.state,
        "enabled": a.enabled,
        "draining": a.draining,
        "registered_at": a.registered_at,
        "last_heartbeat": a.last_heartbeat if beat is None else max(beat, a.last_heartbeat),
        "runtime": a.runtime or {"name": "process", "containers": False, "mount_namespace": False},
        "slots": [
            {
                "id": sl["id"],
                "type": sl.get("type", "cpu"),
                "device": sl.get("device", ""),
                "enabled": sl.get("enabled", True),
                "allocation_id": used.get(sl["id"]),
            }
            for sl in a.slots
        ],
    }


def log_view(line: TaskLogRow) -> dict[str, Any]:
    """The JSON of one log line."""
    return {
        "id": line.id,
        "trial_id": line.trial_id,
        "allocation_id": line.allocation_id,
        "timestamp": line.timestamp,
        "stdtype": line.stdtype,
        "rank_id": line.rank_id,
        "log": line.log,
    }
