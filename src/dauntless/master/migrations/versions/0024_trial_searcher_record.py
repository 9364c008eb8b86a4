"""ended trials' searcher records in their rows (issue 37 scope 2)

New column ``trials.searcher_record`` (JSON, NULL until the trial ends): the searcher's
record of the trial (``TrialRecord.to_json()``) once it ended, so that the master keeps
no ended trial's record in memory and the searcher's snapshot holds only live trials.
Existing rows stay NULL: a snapshot written before this revision still holds every
record, and the master moves the ended ones to their rows the next time it stores that
experiment's searcher.

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
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("searcher_record", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("searcher_record")
