"""Answers of the model registry's routes (Determined's shapes, reference
``determined-surface-platform.md`` §4.3)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open
from .checkpoints import CheckpointOut
from .teams import Pagination


class ModelOut(_Open):
    """A model: ``user_id``/``username`` its creator; times in seconds since the epoch."""

    id: int
    name: str
    description: str
    metadata: dict[str, Any]
    labels: list[str]
    notes: str
    workspace_id: int
    user_id: int | None
    username: str | None
    creation_time: float
    last_updated_time: float
    num_versions: int
    archived: bool


class ModelBody(BaseModel):
    model: ModelOut


class ModelsOut(BaseModel):
    models: list[ModelOut]
    pagination: Pagination


class ModelLabels(BaseModel):
    labels: list[str]


class ModelVersionOut(_Open):
    """A version of a model: ``model_version`` is its number (``version`` too, as
    Determined's REST answers); ``checkpoint`` the checkpoint it names (``state``
    COMPLETED while a version keeps it, also after its experiment was deleted)."""

    id: int
    version: int
    model_version: int
    model_id: int
    model_name: str
    model: ModelOut
    checkpoint: CheckpointOut
    name: str
    comment: str
    notes: str
    metadata: dict[str, Any]
    labels: list[str]
    user_id: int | None
    username: str | None
    creation_time: float
    last_updated_time: float


class ModelVersionBody(BaseModel):
    model_version: ModelVersionOut


class ModelVersionsOut(BaseModel):
    model: ModelOut
    model_versions: list[ModelVersionOut]
    pagination: Pagination
