"""ended trials' searcher records in a table of their own (issue 37 scope 2)

New table ``trial_searcher_records`` (experiment, request id, record): the searcher's
record of each ended trial (``TrialRecord.to_json()``), so that the master keeps no
ended trial's record in memory and the searcher's snapshot holds only live trials. It
starts empty: a snapshot written before this revision still holds every record, and the
master moves the ended ones here the next time it stores that experiment's searcher.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 10:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trial_searcher_records",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "request_id"),
    )


def downgrade() -> None:
    op.drop_table("trial_searcher_records")
