"""ORM models of the model registry (issue 31 scope 1; migration ``0020``): models and
the versions registered from checkpoints (Determined's ``models`` and ``model_versions``,
reference ``determined-surface-platform.md`` §4).

A version keeps ``checkpoint``, a copy of what its checkpoint was when it was registered
(``uuid``, ``trial_id``, ``experiment_id``, ``total_batches``, ``resources``,
``metadata``, ``report_time`` and the experiment's ``checkpoint_storage`` section), so the
checkpoint stays readable and downloadable after its experiment (and so its row) is
deleted: a registered checkpoint's files are never deleted while a version names it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class ModelRow(Base):
    """A model of the registry. ``name`` is unique (case-sensitive, Determined's rule);
    ``labels`` a list of strings; ``metadata`` a JSON object; ``notes`` Markdown."""

    __tablename__ = "models"
    __table_args__ = ({"sqlite_autoincrement": True},)  # ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="RESTRICT"), index=True
    )
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    creation_time: Mapped[float] = mapped_column(Float)
    last_updated_time: Mapped[float] = mapped_column(Float)


class ModelVersionRow(Base):
    """A version of a model: one checkpoint, numbered per model from 1 (the highest
    number so far plus one; a number is never reused after the highest is deleted,
    Determined's rule). ``checkpoint`` is the copy of the checkpoint described in the
    module docstring."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "version"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    checkpoint_uuid: Mapped[str] = mapped_column(String(64), index=True)
    checkpoint: Mapped[dict[str, Any]] = mapped_column(JSON)
    name: Mapped[str] = mapped_column(String(256), default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    creation_time: Mapped[float] = mapped_column(Float)
    last_updated_time: Mapped[float] = mapped_column(Float)
