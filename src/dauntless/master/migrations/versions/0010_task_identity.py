"""task identity and agent credentials

Adds the user's link to a Unix identity (Determined's ``agent_user_group``:
``users.agent_uid``, ``agent_gid``, ``agent_user``, ``agent_group``, each null when
unset) and ``agents.token_hash``, the SHA-256 of the credential the master issues to an
agent when it registers (the cluster secret is used only to register; issue 29).
Existing users have no link (their tasks run as ``security.default_task``); existing
agents have no credential until they register again, which every agent does at start.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("agent_uid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("agent_gid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("agent_user", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("agent_group", sa.String(length=64), nullable=True))
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("token_hash", sa.String(length=64), nullable=True))
        batch.create_index("ix_agents_token_hash", ["token_hash"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_index("ix_agents_token_hash")
        batch.drop_column("token_hash")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("agent_group")
        batch.drop_column("agent_user")
        batch.drop_column("agent_gid")
        batch.drop_column("agent_uid")
