"""Answers of the checkpoint routes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open


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


class CheckpointDeleted(BaseModel):
    """``DELETE /checkpoints/{uuid}``: the checkpoint and its new state: ``DELETED``, or
    ``DELETING`` while its storage fails (the master retries until the files are gone)."""

    uuid: str
    state: str
