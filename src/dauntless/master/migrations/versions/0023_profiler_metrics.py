"""the system-metrics profiler and per-task resource samples (issue 34 scopes 2, 3)

New table ``trial_profiler_metrics``: one row per trial, group, agent and 10-second
bucket of the master's clock (the profiler's ``cpu``, ``memory``, ``disk``, ``network``,
``gpu`` and ``timing`` reports). New table ``task_resource_samples``: one row per
allocation and 10-second bucket (its agent's sample of the task's process tree).

Revision ID: 0023
Revises: 0017 (the head of main today; the lead re-chains at merge)
Create Date: 2026-11-28 14:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trial_profiler_metrics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("group", sa.String(length=16), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("reported_at", sa.Float(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("trial_id", "group", "agent_id", "bucket"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_trial_profiler_metrics_trial_id", "trial_profiler_metrics", ["trial_id"])
    op.create_table(
        "task_resource_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("allocation_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("agent_id", sa.String(length=256), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("cpu_percent", sa.Float(), nullable=True),
        sa.Column("rss_bytes", sa.BigInteger(), nullable=False),
        sa.Column("gpu_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("processes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("allocation_id", "bucket"),
        sqlite_autoincrement=True,
    )
    for column in ("allocation_id", "task_id", "trial_id"):
        op.create_index(f"ix_task_resource_samples_{column}", "task_resource_samples", [column])


def downgrade() -> None:
    for column in ("allocation_id", "task_id", "trial_id"):
        op.drop_index(f"ix_task_resource_samples_{column}", table_name="task_resource_samples")
    op.drop_table("task_resource_samples")
    op.drop_index("ix_trial_profiler_metrics_trial_id", table_name="trial_profiler_metrics")
    op.drop_table("trial_profiler_metrics")
