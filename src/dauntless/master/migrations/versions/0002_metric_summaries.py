"""metric summaries

Adds ``metric_summaries``: per (trial, group, metric name) the M4 summary of the series
that the chart route reads instead of the ``metrics`` table. Reports stored before this
revision are summarised on first use (no data is moved here).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 05:04:02.647822
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "metric_summaries",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("raw_points", sa.Integer(), nullable=False),
        sa.Column("batches", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", "kind", "name"),
    )


def downgrade() -> None:
    op.drop_table("metric_summaries")
