"""Routes for Determined habits of issue 17 part A: ``POST /experiments/continue``.

(Fork is ``parent_id`` on ``POST /experiments``, in :mod:`.routes`; the create answer's
``warnings`` come from :func:`dauntless.config.config_warnings`.)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from . import authz
from . import responses as R
from .api_spec import INT32_MAX
from .models import experiment_reads, experiments

router = APIRouter(prefix="/api/v1")


class ContinueExperiment(BaseModel):
    """Body of ``POST /experiments/continue`` (Determined's ContinueExperimentRequest)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: int = Field(ge=1, le=INT32_MAX)
    override_config: str | None = Field(default=None, alias="overrideConfig")


@router.post("/experiments/continue", response_model=R.ExperimentBody)
async def continue_experiment(body: ContinueExperiment, request: Request) -> dict[str, Any]:
    """Continue a finished experiment, with config overrides (YAML text) deep-merged in.

    Only who may update it (its owner, an admin, ``UPDATE_EXPERIMENT``). 404: no such experiment; 409: not
    finished or nothing left to continue; 400: invalid overrides.
    """
    from .routes import _ctx
    from .routes_experiments import _experiment_json

    ctx = _ctx(request)
    with ctx.db.read() as s:
        experiment_reads.read_experiment(s, body.id)  # 404 first
        target = authz.experiment_target(s, body.id)
    authz.require(request, target)  # UPDATE_EXPERIMENT, or its owner
    await run_in_threadpool(
        ctx.write, experiments.continue_experiment, body.id, body.override_config
    )
    return _experiment_json(ctx, body.id)
