"""ids never reused; preemption deadlines, log policies and failure causes

- SQLite: ``experiments`` and ``trials`` are rebuilt with ``AUTOINCREMENT``, so the id
  of a deleted experiment or trial is never handed out again (SQLite otherwise reuses
  the largest id once its row is gone). PostgreSQL already draws them from sequences
  (``SERIAL``), which never go back.
- ``allocations.preempt_requested_at``: when the master first saw a stop request of the
  part, the start of its ``preemption_timeout``.
- ``trials.log_policy_state``: what the experiment's ``log_policies`` matched in the
  trial's logs (names, ``cancel_retries``, agents excluded).
- ``trials.failure``: the latest failed run of the trial (run id, exit, its last error
  line), shown by ``det trial describe``.
- ``trials.progress``: the fraction of its training the trial last reported (0..1),
  counted into its experiment's progress while it runs.

The rebuild runs with foreign keys off (migrations/env.py), as SQLite's documented way
to change a table requires, so dropping the old ``experiments`` does not cascade.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 03:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        for table in ("experiments", "trials"):
            with op.batch_alter_table(
                table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
            ):
                pass
    op.add_column("allocations", sa.Column("preempt_requested_at", sa.Float(), nullable=True))
    op.add_column("trials", sa.Column("log_policy_state", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("failure", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("progress", sa.Float(), nullable=True))
    if sqlite:
        broken = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"foreign keys broken by the rebuild: {broken[:5]}")


def downgrade() -> None:
    op.drop_column("trials", "progress")
    op.drop_column("trials", "failure")
    op.drop_column("trials", "log_policy_state")
    op.drop_column("allocations", "preempt_requested_at")
