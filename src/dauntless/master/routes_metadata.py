"""REST routes of metadata and status set after the fact, under ``/api/v1``
(Determined's paths, reference appendix; issue 31 scope 3):

| route | who | body -> answer |
|---|---|---|
| ``POST /trials/{id}/runner/metadata`` | the trial | ``{metadata: {state}}`` -> ``{}`` |
| ``POST /runs/{id}/metadata`` | the trial, ``UPDATE_EXPERIMENT_METADATA`` | ``{metadata}`` -> ``{metadata}`` (merged) |
| ``GET /runs/{id}/metadata`` | the trial, ``VIEW_EXPERIMENT_METADATA`` | -> ``{metadata}`` |
| ``POST /checkpoints/{uuid}/metadata`` | ``UPDATE_EXPERIMENT_METADATA`` | ``{checkpoint: {metadata}}`` -> ``{checkpoint: {uuid, metadata}}`` |

A run is a trial here (Determined's run ids are its trial ids).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from .api_spec import DbId
from .models import metadata
from .responses import Empty
from .routes import _ctx

router = APIRouter(prefix="/api/v1")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunnerState(_Body):
    state: str = Field(max_length=metadata.MAX_STATUS)


class RunnerMetadata(_Body):
    metadata: RunnerState
    trial_id: int | None = None


class RunMetadata(_Body):
    metadata: dict[str, Any]
    run_id: int | None = None


class CheckpointMetadataIn(BaseModel):
    model_config = ConfigDict(extra="ignore")  # the whole Checkpoint may come back

    metadata: dict[str, Any]
    uuid: str | None = None


class CheckpointMetadata(_Body):
    checkpoint: CheckpointMetadataIn


class MetadataOut(BaseModel):
    metadata: dict[str, Any]


class CheckpointMetadataOut(BaseModel):
    checkpoint: dict[str, Any]


@router.post("/trials/{trial_id}/runner/metadata", response_model=Empty)
def post_runner_metadata(trial_id: DbId, body: RunnerMetadata, request: Request) -> dict:
    """The status the trial's code set (``core.train.set_status``)."""
    _ctx(request).write(lambda s, _c: metadata.set_trial_status(s, trial_id, body.metadata.state))
    return {}


@router.post("/runs/{trial_id}/metadata", response_model=MetadataOut)
def post_run_metadata(trial_id: DbId, body: RunMetadata, request: Request) -> dict:
    """Merge metadata into the trial's (``core.train.set_metadata``); the result."""
    merged = _ctx(request).write(
        lambda s, _c: metadata.merge_trial_metadata(s, trial_id, body.metadata)
    )
    return {"metadata": merged}


@router.get("/runs/{trial_id}/metadata", response_model=MetadataOut)
def get_run_metadata(trial_id: DbId, request: Request) -> dict:
    """The trial's metadata (``core.train.get_metadata``)."""
    with _ctx(request).db.read() as s:
        return {"metadata": metadata.read_trial_metadata(s, trial_id)}


@router.post("/checkpoints/{uuid}/metadata", response_model=CheckpointMetadataOut)
def post_checkpoint_metadata(uuid: str, body: CheckpointMetadata, request: Request) -> dict:
    """Replace a checkpoint's metadata; refused (409) for a registered checkpoint."""
    new = _ctx(request).write(
        lambda s, _c: metadata.set_checkpoint_metadata(s, uuid, body.checkpoint.metadata)
    )
    return {"checkpoint": {"uuid": uuid, "metadata": new}}
