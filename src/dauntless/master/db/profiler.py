"""The system-metrics profiler's table and the per-task resource samples (issue 34
scopes 2 and 3). Kept apart from :mod:`.models` so each stays short."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class TrialProfilerMetricRow(Base):
    """One profiler report of one group from one agent of a trial (Determined's
    ``system_metrics``, kept apart from the training and validation ``metrics``).

    ``bucket`` is the master's clock at receipt divided by
    :data:`dauntless.core.PROFILER_BUCKET_SECONDS`; a later report of the same trial,
    group and agent in the same bucket replaces the row, which bounds the table's
    growth per trial whatever the client sends.
    """

    __tablename__ = "trial_profiler_metrics"
    __table_args__ = (
        UniqueConstraint("trial_id", "group", "agent_id", "bucket"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trial_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("trials.id", ondelete="CASCADE"), index=True
    )
    group: Mapped[str] = mapped_column(String(16))
    agent_id: Mapped[str] = mapped_column(String(255))
    bucket: Mapped[int] = mapped_column(Integer)
    reported_at: Mapped[float] = mapped_column(Float)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)


class TaskResourceSampleRow(Base):
    """One sample of a running task's process tree, taken by its agent (issue 34
    scope 3): CPU (percent of one core), resident and GPU memory (bytes).

    ``bucket`` is the master's clock at receipt divided by
    :data:`dauntless.master.models.task_resources.SAMPLE_BUCKET_SECONDS`; a later sample
    of the same allocation in the same bucket replaces the row.
    """

    __tablename__ = "task_resource_samples"
    __table_args__ = (
        UniqueConstraint("allocation_id", "bucket"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    allocation_id: Mapped[str] = mapped_column(String(64), index=True)
    task_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    trial_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    agent_id: Mapped[str] = mapped_column(String(256))
    bucket: Mapped[int] = mapped_column(Integer)
    time: Mapped[float] = mapped_column(Float)
    cpu_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    rss_bytes: Mapped[int] = mapped_column(BigInteger)
    gpu_memory_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    processes: Mapped[int] = mapped_column(Integer)
