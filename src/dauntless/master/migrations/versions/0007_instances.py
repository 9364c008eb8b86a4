"""provisioned instances

Adds ``instances``: what the provisioner of each resource pool launched (local agent
processes, EC2 or Compute Engine instances), so that a restarted master neither loses
track of them nor launches duplicates.

Revision ID: 0007
Revises: 0004
Create Date: 2026-11-25 03:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=256), nullable=False),
        sa.Column("resource_pool", sa.String(length=256), nullable=False),
        sa.Column("provider", sa.String(length=16), nullable=False),
        sa.Column("provider_id", sa.String(length=256), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("launched_at", sa.Float(), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=True),
        sa.Column("idle_since", sa.Float(), nullable=True),
        sa.Column("terminated_at", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_instances_resource_pool", "instances", ["resource_pool"])
    op.create_index("ix_instances_state", "instances", ["state"])


def downgrade() -> None:
    op.drop_index("ix_instances_state", table_name="instances")
    op.drop_index("ix_instances_resource_pool", table_name="instances")
    op.drop_table("instances")
