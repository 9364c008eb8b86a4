"""metric folds pending

Adds ``metric_folds_pending``: one row per stored metrics report whose values are not yet
folded into ``metric_summaries``. A report is acknowledged once its ``metrics`` row and
this row are committed; the master folds the pending reports in bulk, in the background
and before any read of the summaries (``dauntless.master.metric_series``). Reports
stored before this revision were folded when stored, so nothing is moved here.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 10:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "metric_folds_pending",
        sa.Column("metric_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["metric_id"], ["metrics.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("metric_id"),
    )
    op.create_index(
        "ix_metric_folds_pending_trial_id", "metric_folds_pending", ["trial_id", "kind"]
    )


def downgrade() -> None:
    # Fold nothing here: without this table every report counts as folded, so a
    # downgraded master would chart the pending ones late; drop the summaries of the
    # trials concerned instead, and the older master rebuilds them from ``metrics``.
    op.execute(
        "DELETE FROM metric_summaries WHERE trial_id IN "
        "(SELECT DISTINCT trial_id FROM metric_folds_pending)"
    )
    op.drop_index("ix_metric_folds_pending_trial_id", table_name="metric_folds_pending")
    op.drop_table("metric_folds_pending")
