"""the model registry; trial metadata and status

New tables ``models`` and ``model_versions`` (issue 31 scope 1); ``trials`` gains
``metadata`` (``core.train.set_metadata``) and ``runner_state``
(``core.train.set_status``), both NULL for every existing trial. Columns are added with
plain ``ADD COLUMN`` (no batch copy of ``trials``, whose foreign keys would cascade).

Revision ID: 0020
Revises: 0014 (the head of this branch; the brief named 0015, the lead re-chains)
Create Date: 2026-11-28 10:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("creation_time", sa.Float(), nullable=False),
        sa.Column("last_updated_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_models_workspace_id", "models", ["workspace_id"], unique=False)
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("checkpoint_uuid", sa.String(length=64), nullable=False),
        sa.Column("checkpoint", sa.JSON(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("creation_time", sa.Float(), nullable=False),
        sa.Column("last_updated_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("model_id", "version"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_model_versions_checkpoint_uuid", "model_versions", ["checkpoint_uuid"], unique=False
    )
    op.add_column("trials", sa.Column("metadata", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("runner_state", sa.String(length=256), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "runner_state")
    op.drop_column("trials", "metadata")
    op.drop_index("ix_model_versions_checkpoint_uuid", table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index("ix_models_workspace_id", table_name="models")
    op.drop_table("models")
