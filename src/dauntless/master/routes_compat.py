"""Routes for Determined habits of issue 17 part A: ``POST /experiments/continue``.

(Fork is ``parent_id`` on ``POST /experiments``, in :mod:`.routes`; the create answer's
``warnings`` come from :func:`dauntless.config.config_warnings`.)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from . import responses as R
from .api_spec import INT32_MAX
from .auth import principal
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

    Only the experiment's owner or an admin may. 404: no such experiment; 409: not
    finished or nothing left to continue; 400: invalid overrides.
    """
    from .routes import _ctx
    from .routes_experiments import _experiment_json

    ctx = _ctx(request)
    who = principal(request)
    with ctx.db.read() as s:
        exp = experiment_reads.read_experiment(s, body.id)
        if not who.admin and exp.owner_id != who.user_id:
            raise HTTPException(
                403,
                f"only the owner of experiment {exp.id} ({exp.owner}) or an admin may continue it",
            )
    await run_in_threadpool(
        ctx.write, experiments.continue_experiment, body.id, body.override_config
    )
    return _experiment_json(ctx, body.id)
