"""generic tasks: commands, notebooks, shells and TensorBoards

Adds ``tasks`` and lets an allocation belong to a task instead of a trial
(``allocations.task_id``; ``allocations.trial_id`` becomes nullable).

Revision ID: 0005
Revises: 0007
Create Date: 2026-11-25 03:55:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("description", sa.String(length=512), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("entrypoint", sa.JSON(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("context", sa.LargeBinary(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kill_requested", sa.Boolean(), nullable=False),
        sa.Column("service_addr", sa.String(length=256), nullable=True),
        sa.Column("service_port", sa.Integer(), nullable=True),
        sa.Column("service_token", sa.String(length=128), nullable=True),
        sa.Column("user_session_id", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=True),
        sa.Column("ready_time", sa.Float(), nullable=True),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_type"), ["type"], unique=False)
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("task_id", sa.String(length=64), nullable=True))
        batch_op.alter_column("trial_id", existing_type=sa.Integer(), nullable=True)
        batch_op.create_index(batch_op.f("ix_allocations_task_id"), ["task_id"], unique=False)
        batch_op.create_foreign_key(
            "fk_allocations_task_id_tasks", "tasks", ["task_id"], ["id"], ondelete="CASCADE"
        )


def downgrade() -> None:
    op.execute("DELETE FROM allocations WHERE task_id IS NOT NULL")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_constraint("fk_allocations_task_id_tasks", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_allocations_task_id"))
        batch_op.alter_column("trial_id", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column("task_id")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tasks_type"))
        batch_op.drop_index(batch_op.f("ix_tasks_state"))
        batch_op.drop_index(batch_op.f("ix_tasks_owner_id"))
    op.drop_table("tasks")
