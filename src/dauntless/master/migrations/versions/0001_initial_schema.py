"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 04:18:40.220889
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=256), nullable=False),
        sa.Column("resource_pool", sa.String(length=256), nullable=False),
        sa.Column("hostname", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.Column("slots", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=False),
        sa.Column("last_heartbeat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "cluster",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("original_config", sa.Text(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("searcher_state", sa.JSON(), nullable=True),
        sa.Column("searcher_shutdown", sa.Boolean(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_experiments_state"), ["state"], unique=False)

    op.create_table(
        "task_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("allocation_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("stdtype", sa.String(length=8), nullable=False),
        sa.Column("rank_id", sa.Integer(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("allocation_id", "seq"),
    )
    with op.batch_alter_table("task_logs", schema=None) as batch_op:
        batch_op.create_index("ix_task_logs_trial_id_id", ["trial_id", "id"], unique=False)

    op.create_table(
        "model_definitions",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("hparams", sa.JSON(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("total_batches", sa.Integer(), nullable=False),
        sa.Column("searcher_op_length", sa.Integer(), nullable=True),
        sa.Column("searcher_completed_length", sa.Integer(), nullable=True),
        sa.Column("searcher_closed", sa.Boolean(), nullable=False),
        sa.Column("early_exit_reason", sa.String(length=32), nullable=True),
        sa.Column("best_validation", sa.Float(), nullable=True),
        sa.Column("latest_checkpoint", sa.String(length=64), nullable=True),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("experiment_id", "request_id"),
    )
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_trials_experiment_id"), ["experiment_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_trials_state"), ["state"], unique=False)

    op.create_table(
        "allocations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("group_id", sa.String(length=64), nullable=False),
        sa.Column("part_index", sa.Integer(), nullable=False),
        sa.Column("num_parts", sa.Integer(), nullable=False),
        sa.Column("rank_offset", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(length=256), nullable=False),
        sa.Column("slot_ids", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rendezvous_addr", sa.String(length=256), nullable=True),
        sa.Column("rendezvous_port", sa.Integer(), nullable=True),
        sa.Column("kill_requested", sa.Boolean(), nullable=False),
        sa.Column("preempt_requested", sa.Boolean(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_allocations_agent_id"), ["agent_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_group_id"), ["group_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocations_trial_id"), ["trial_id"], unique=False)

    op.create_table(
        "checkpoints",
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sa.String(length=64), nullable=True),
        sa.Column("total_batches", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("report_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("uuid"),
    )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_checkpoints_experiment_id"), ["experiment_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_checkpoints_trial_id"), ["trial_id"], unique=False)

    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("total_batches", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Float(), nullable=True),
        sa.Column("trial_run_id", sa.Integer(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("batch_metrics", sa.JSON(), nullable=True),
        sa.Column("reported_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("trial_id", "kind", "total_batches"),
    )


def downgrade() -> None:

    op.drop_table("metrics")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checkpoints_trial_id"))
        batch_op.drop_index(batch_op.f("ix_checkpoints_experiment_id"))

    op.drop_table("checkpoints")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_allocations_trial_id"))
        batch_op.drop_index(batch_op.f("ix_allocations_state"))
        batch_op.drop_index(batch_op.f("ix_allocations_group_id"))
        batch_op.drop_index(batch_op.f("ix_allocations_agent_id"))

    op.drop_table("allocations")
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trials_state"))
        batch_op.drop_index(batch_op.f("ix_trials_experiment_id"))

    op.drop_table("trials")
    op.drop_table("model_definitions")
    with op.batch_alter_table("task_logs", schema=None) as batch_op:
        batch_op.drop_index("ix_task_logs_trial_id_id")

    op.drop_table("task_logs")
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_experiments_state"))

    op.drop_table("experiments")
    op.drop_table("cluster")
    op.drop_table("agents")
