"""searcher events

Issue 37: a searcher event no longer rewrites the whole searcher snapshot. New table
``searcher_events`` (an experiment's searcher events after its stored snapshot, in
``seq`` order); ``experiments`` gains ``searcher_seq`` (events applied) and
``searcher_snapshot_seq`` (events the snapshot holds), both 0 for existing rows, whose
snapshot holds everything. ``trials`` gains an index on ``(experiment_id, state)`` and
``allocations`` one on ``(agent_id, state)``, so an experiment's live trials and an
agent's live allocation parts are found without reading the ended ones.

Columns are added with plain ``ALTER TABLE ... ADD COLUMN`` and a server default, never a
batch "copy and move" (on SQLite that recreates ``experiments``, and with foreign keys on
dropping it would cascade to its trials).

Revision ID: 0016
Revises: 0014 (the head on main: 0015 -> 0010 -> 0014)
Create Date: 2026-11-28 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "experiments",
        sa.Column("searcher_seq", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "experiments",
        sa.Column(
            "searcher_snapshot_seq", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
    )
    op.create_table(
        "searcher_events",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "seq"),
    )
    op.create_index("ix_trials_experiment_state", "trials", ["experiment_id", "state"])
    op.create_index("ix_allocations_agent_state", "allocations", ["agent_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_allocations_agent_state", table_name="allocations")
    op.drop_index("ix_trials_experiment_state", table_name="trials")
    op.drop_table("searcher_events")
    # Plain DROP COLUMN (SQLite 3.35+), not a batch copy: see the module docstring.
    op.drop_column("experiments", "searcher_snapshot_seq")
    op.drop_column("experiments", "searcher_seq")
