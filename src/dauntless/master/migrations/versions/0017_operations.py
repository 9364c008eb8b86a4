"""the cluster message and log retention (issue 34)

New table ``cluster_messages`` (a message admins show every user, with its time window);
``experiments`` gains ``log_retention_days`` (NULL for every existing experiment: the
master's default applies).

Revision ID: 0017
Revises: 0014 (the head of main today; the lead re-chains at merge)
Create Date: 2026-11-28 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cluster_messages",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("message", sa.String(length=250), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_cluster_messages_start_time", "cluster_messages", ["start_time"])
    op.add_column("experiments", sa.Column("log_retention_days", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("experiments", "log_retention_days")
    op.drop_index("ix_cluster_messages_start_time", table_name="cluster_messages")
    op.drop_table("cluster_messages")
