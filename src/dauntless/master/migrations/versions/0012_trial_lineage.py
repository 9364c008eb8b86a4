"""trial lineage

Adds ``trials.parent_id`` (the trial this one was warm-started from: a PBT clone's
parent, or the parent a custom search method named in its ``Create``) and
``trials.warm_start_checkpoint`` (the uuid of the parent's checkpoint the trial starts
from, chosen when the searcher created it).

Revision ID: 0012
Revises: 0009
Create Date: 2026-11-28 07:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("warm_start_checkpoint", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("warm_start_checkpoint")
        batch.drop_column("parent_id")
