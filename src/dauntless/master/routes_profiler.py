"""The system-metrics profiler's routes and the per-task resource samples under
``/api/v1`` (issue 34 scopes 2 and 3; :mod:`dauntless.master.models.profiler`,
:mod:`dauntless.master.models.task_resources`). The profiler's read paths are
Determined's; agents send task samples on their heartbeats:

| route | who | body / answer |
|---|---|---|
| ``POST /trials/{id}/profiler/metrics`` | the trial's own task token | ``{reports: [{group, agent_id, metrics}]}`` -> ``{stored}`` |
| ``GET /trials/{id}/profiler/metrics`` | VIEW_EXPERIMENT_METADATA | ``?group&agent_id&after_id&limit`` -> ``{metrics: [{id, group, agent_id, time, values}], next_after_id}`` |
| ``GET /trials/{id}/profiler/available_series`` | VIEW_EXPERIMENT_METADATA | ``{series: [{group, agent_id, names, time, latest}]}`` |
| ``GET /tasks/{id}/resource_metrics`` | VIEW_NSC on the task | ``?after_id&limit`` -> ``{memory_request_bytes, over_request, peak_rss_bytes, latest, samples, next_after_id}`` |
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from .api_spec import DbId
from .models import profiler, task_resources
from .responses._base import StoredCount, _Open
from .routes import _read, _write

router = APIRouter(prefix="/api/v1")

MAX_PROFILER_REPORTS = 32
"""Most rows in one ``POST /trials/{id}/profiler/metrics`` (an agent sends at most one
per group)."""

Group = Literal["cpu", "memory", "disk", "network", "gpu", "timing"]
"""One of :data:`dauntless.config.PROFILING_GROUPS` (a unit test keeps them equal)."""


class ProfilerReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: Group
    agent_id: str = Field(min_length=1, max_length=255)
    metrics: dict[str, Any]


class ProfilerReportBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reports: list[ProfilerReport] = Field(min_length=1, max_length=MAX_PROFILER_REPORTS)


class ProfilerRowOut(_Open):
    id: int
    group: str
    agent_id: str
    time: float
    values: dict[str, Any]


class ProfilerMetricsOut(_Open):
    metrics: list[ProfilerRowOut]
    next_after_id: int


class ProfilerSeries(_Open):
    group: str
    agent_id: str
    names: list[str]
    time: float
    latest: dict[str, Any]


class ProfilerSeriesOut(_Open):
    series: list[ProfilerSeries]


@router.post("/trials/{trial_id}/profiler/metrics", response_model=StoredCount)
def post_profiler_metrics(trial_id: DbId, body: ProfilerReportBatch, request: Request) -> dict:
    """One profiler report of the trial (replaces the agent's rows of the same groups
    in the current 10-second bucket)."""
    reports = [r.model_dump() for r in body.reports]
    stored = _write(
        request,
        lambda s, ctx: profiler.report_profiler_metrics(s, ctx.clock(), trial_id, reports),
    )
    return {"stored": stored}


@router.get("/trials/{trial_id}/profiler/metrics", response_model=ProfilerMetricsOut)
def get_profiler_metrics(
    trial_id: DbId,
    request: Request,
    group: Group | None = Query(None),
    agent_id: str | None = Query(None, max_length=255),
    after_id: int = Query(0, ge=0),
    limit: int = Query(1_000, ge=1, le=profiler.MAX_READ_ROWS),
) -> dict[str, Any]:
    """The trial's profiler rows after ``after_id``, oldest first (page on with
    ``next_after_id``)."""
    rows = _read(
        request, profiler.read_profiler_metrics, trial_id, group, agent_id, after_id, limit
    )
    return {
        "metrics": [
            {
                "id": r.id,
                "group": r.group,
                "agent_id": r.agent_id,
                "time": r.reported_at,
                "values": r.values,
            }
            for r in rows
        ],
        "next_after_id": rows[-1].id if rows else after_id,
    }


@router.get("/trials/{trial_id}/profiler/available_series", response_model=ProfilerSeriesOut)
def get_available_series(trial_id: DbId, request: Request) -> dict[str, Any]:
    """The groups, agents and value names the trial's profiler reported."""
    return {"series": _read(request, profiler.available_series, trial_id)}


class TaskResourceSample(_Open):
    id: int
    time: float
    allocation_id: str
    agent_id: str
    cpu_percent: float | None = None
    rss_bytes: int
    gpu_memory_bytes: int | None = None
    processes: int


class TaskResourcesOut(_Open):
    task_id: str
    memory_request_bytes: int | None = None
    over_request: bool
    peak_rss_bytes: int | None = None
    latest: TaskResourceSample | None = None
    samples: list[TaskResourceSample]
    next_after_id: int


@router.get("/tasks/{task_id}/resource_metrics", response_model=TaskResourcesOut)
def get_task_resources(
    task_id: str,
    request: Request,
    after_id: int = Query(0, ge=0),
    limit: int = Query(1_000, ge=1, le=task_resources.MAX_READ_SAMPLES),
) -> dict[str, Any]:
    """A task's CPU, memory and GPU memory over time (its agent's samples of its
    process tree, one per 10 s) and whether it uses more memory than it requested."""
    return _read(request, task_resources.read_task_resources, task_id, after_id, limit)
