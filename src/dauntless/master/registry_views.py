"""The API form of the model registry's models and versions (Dauntless's shape;
Determined's is made from it by :mod:`dauntless.master.det_shapes`), read through the
registry's model functions."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .db import ModelRow, ModelVersionRow
from .models import registered, registry
from .routes import _storage_url
from .schemas import checkpoint_view


def model_views(s: Session, rows: list[ModelRow]) -> list[dict[str, Any]]:
    """The API form of models (version counts and creators read in ``s``)."""
    counts = registry.version_counts(s, [m.id for m in rows])
    users = registered.usernames(s, {m.user_id for m in rows})
    return [
        {
            "id": m.id,
            "name": m.name,
            "description": m.description,
            "metadata": m.meta or {},
            "labels": m.labels or [],
            "notes": m.notes,
            "workspace_id": m.workspace_id,
            "user_id": m.user_id,
            "username": users.get(m.user_id) if m.user_id is not None else None,
            "creation_time": m.creation_time,
            "last_updated_time": m.last_updated_time,
            "num_versions": counts.get(m.id, 0),
            "archived": m.archived,
        }
        for m in rows
    ]


def version_checkpoint(s: Session, v: ModelVersionRow) -> dict[str, Any]:
    """The checkpoint a version names: its row while its experiment lives, else the
    copy the version keeps (state COMPLETED: its files stay while a version names it)."""
    storage = {"checkpoint_storage": v.checkpoint.get("storage") or {}}
    row = registered.checkpoint_row(s, v.checkpoint_uuid)
    if row is not None:
        return checkpoint_view(row, _storage_url(storage, row.uuid))
    c = v.checkpoint
    return {
        "uuid": v.checkpoint_uuid,
        "trial_id": c.get("trial_id", 0),
        "experiment_id": c.get("experiment_id", 0),
        "total_batches": c.get("total_batches", 0),
        "state": "COMPLETED",
        "resources": c.get("resources") or {},
        "metadata": c.get("metadata") or {},
        "report_time": c.get("report_time", 0.0),
        "storage_path": _storage_url(storage, v.checkpoint_uuid),
    }


def version_views(s: Session, model: ModelRow, rows: list[ModelVersionRow]) -> list[dict]:
    """The API form of a model's versions."""
    mview = model_views(s, [model])[0]
    users = registered.usernames(s, {v.user_id for v in rows})
    return [
        {
            "id": v.id,
            "version": v.version,
            "model_version": v.version,
            "model_id": model.id,
            "model_name": model.name,
            "model": mview,
            "checkpoint": version_checkpoint(s, v),
            "name": v.name,
            "comment": v.comment,
            "notes": v.notes,
            "metadata": v.meta or {},
            "labels": v.labels or [],
            "user_id": v.user_id,
            "username": users.get(v.user_id) if v.user_id is not None else None,
            "creation_time": v.creation_time,
            "last_updated_time": v.last_updated_time,
        }
        for v in rows
    ]
