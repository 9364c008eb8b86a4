"""The job queue, under ``/api/v1`` (Determined's ``GetJobs``/``UpdateJobQueue``, the
``det job list`` / ``det job update`` commands and the WebUI's Queue page):

- ``GET /job-queues?resource_pool=NAME``: every job waiting for or holding slots, per
  resource pool, in the order that pool's scheduler considers them.
- ``PATCH /jobs/{job_id}`` with ``{"priority": 1..99}`` or ``{"weight": > 0}``: change a
  job's scheduling priority or fair-share weight; the next scheduling pass uses it.

A job is an experiment (id ``experiment-<id>``: its trials share the experiment's
``resources``) or a generic task (``task-<task id>``: a notebook, command, shell or
TensorBoard). A job is listed while it is not finished: an ACTIVE experiment with trials
that are not finished, or a task that is QUEUED, ASSIGNED or RUNNING. Paused experiments
hold no slots and wait for nobody, so they are not in the queue (as in Determined).

Queue order is the one :mod:`dauntless.scheduler` uses: under the ``priority`` scheduler
by (priority, or the pool's ``default_priority`` when unset; submission time; id), a
smaller priority first; under ``fair_share`` by submission time (the share itself comes
from the weights, shown beside each job). ``queue_position`` is 1-based within the pool.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dauntless.scheduler import pool_spec_from_config

from . import authz
from . import responses as R
from .api_spec import ErrorBody
from .context import MasterContext
from .errors import BadRequest, NotFound
from .models import experiments, jobs
from .models.jobs import EXPERIMENT_PREFIX, TASK_PREFIX
from .rbac import Perm

router = APIRouter(prefix="/api/v1")


class JobUpdate(BaseModel):
    """``PATCH /jobs/{job_id}``: exactly one of ``priority`` (1..99, smaller runs first
    under the priority scheduler) and ``weight`` (> 0, the fair-share weight)."""

    model_config = ConfigDict(extra="forbid")
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float | None = Field(default=None, gt=0, le=1e6)

    @model_validator(mode="after")
    def _one(self) -> JobUpdate:
        if (self.priority is None) == (self.weight is None):
            raise ValueError("priority, weight: give exactly one of them")
        return self


def _ctx(request: Request) -> MasterContext:
    return request.app.state.ctx


def _pools(ctx: MasterContext) -> dict[str, Any]:
    return {p.pool_name: pool_spec_from_config(p) for p in ctx.config.resource_pools}


def list_jobs(ctx: MasterContext, resource_pool: str | None = None) -> list[dict[str, Any]]:
    """Every unfinished job, pool by pool (in the master config's pool order), each pool's
    jobs in its scheduler's order with ``queue_position`` (1-based) set.

    Args:
        ctx: the master's context.
        resource_pool: only this pool's jobs (None: all pools).

    Raises:
        NotFound: ``resource_pool`` is not a pool of this master (404).
    """
    pools = _pools(ctx)
    if resource_pool is not None and resource_pool not in pools:
        raise NotFound(f"no resource pool {resource_pool!r}; pools: {sorted(pools)}")
    with ctx.db.read() as s:
        found = jobs.experiment_jobs(s, ctx) + jobs.task_jobs(s)
    out: list[dict[str, Any]] = []
    for name, spec in pools.items():
        if resource_pool is not None and name != resource_pool:
            continue
        mine = [j for j in found if j["resource_pool"] == name]
        for j in mine:
            j["effective_priority"] = (
                j["priority"] if j["priority"] is not None else spec.default_priority
            )
            j["scheduler"] = spec.scheduler
        if spec.scheduler == "priority":
            mine.sort(key=lambda j: (j["effective_priority"], j["submission_time"], j["job_id"]))
        else:
            mine.sort(key=lambda j: (j["submission_time"], j["job_id"]))
        for i, j in enumerate(mine, 1):
            j["queue_position"] = i
        out.extend(mine)
    return out


@router.get(
    "/job-queues",
    response_model=R.JobsOut,
    responses={404: {"model": ErrorBody, "description": "No such resource pool"}},
)
def get_job_queue(
    request: Request,
    resource_pool: str | None = Query(
        None, min_length=1, max_length=256, description="only this pool"
    ),
) -> dict[str, Any]:
    """The job queue of every pool (or of ``resource_pool``): ``{"jobs": [...]}``, each
    with ``job_id``, ``type``, ``name``, ``owner``, ``resource_pool``, ``queue_position``,
    ``state`` (QUEUED or SCHEDULED), ``priority`` (None: the pool's default, given as
    ``effective_priority``), ``weight``, ``requested_slots``, ``allocated_slots``,
    ``submission_time`` (seconds since the epoch) and ``scheduler``.

    Only the jobs of experiments and tasks the caller may view are listed; each keeps
    its position in its pool's queue (as Determined's, whose queue shows the others as
    restricted jobs), ``workspace_id`` says where it belongs.

    Raises:
        NotFound: no such pool (404).
    """
    exp_ws = authz.visible(request, Perm.VIEW_EXPERIMENT_METADATA)
    task_ws = authz.visible(request, Perm.VIEW_NSC)
    jobs_ = [
        j
        for j in list_jobs(_ctx(request), resource_pool)
        if (scope := exp_ws if j["type"] == "EXPERIMENT" else task_ws) is None
        or j["workspace_id"] in scope
    ]
    return {"jobs": jobs_}


@router.patch("/jobs/{job_id}", response_model=R.JobBody)
def update_job(job_id: str, body: JobUpdate, request: Request) -> dict[str, Any]:
    """Set a job's priority (priority scheduler) or weight (fair-share scheduler).

    Who may is declared in :mod:`dauntless.master.permissions` (update the experiment
    or task; ``CONTROL_STRICT_JOB_QUEUE`` with ``security.authz.strict_job_queue_control``).
    A priority in a fair-share pool, or a weight in a priority pool, would change nothing
    there: refused with 400 naming the field.

    Raises:
        NotFound: no such unfinished job (404).
        BadRequest: the field does not apply to the job's pool (400).
        HTTPException: 403 for another user's job.
    """
    ctx = _ctx(request)
    by_id = {j["job_id"]: j for j in list_jobs(ctx)}
    job = by_id.get(job_id)
    if job is None:
        raise NotFound(
            f"no queued or running job {job_id!r} (ids look like "
            f"{EXPERIMENT_PREFIX}<experiment id> or {TASK_PREFIX}<task id>; see GET /job-queues)"
        )
    field, value = (
        ("priority", body.priority) if body.priority is not None else ("weight", body.weight)
    )
    wanted = "priority" if field == "priority" else "fair_share"
    if job["scheduler"] != wanted:
        raise BadRequest(
            f"{field} applies under the {wanted} scheduler",
            [
                (
                    field,
                    f"resource pool {job['resource_pool']!r} uses the {job['scheduler']} scheduler",
                )
            ],
        )
    if job["type"] == "EXPERIMENT":
        experiments.patch_experiment(ctx, int(job["entity_id"]), None, None, None, {field: value})
    else:
        ctx.write(jobs.set_task_scheduling, job["entity_id"], field, value)
    return {"job": {j["job_id"]: j for j in list_jobs(ctx)}.get(job_id, job)}
