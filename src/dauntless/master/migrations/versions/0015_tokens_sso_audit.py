"""access tokens, single sign-on users and the audit trail

``user_sessions`` gains ``token_type`` (``USER_SESSION`` for every existing row: they are
all login sessions), ``description`` and ``revoked``; ``users`` gains ``remote`` (users
who sign in only through single sign-on; false for every existing user). New tables:
``audit_log`` (the hash-chained audit trail), ``audit_checkpoints`` (signed retention
cuts of it) and ``user_sso_groups`` (the groups the identity provider named for a user).

Columns are added with plain ``ALTER TABLE ... ADD COLUMN`` and a server default, never a
batch "copy and move": on SQLite that drops and recreates the table, and dropping
``users`` with foreign keys on would cascade-delete every session (and more).

Revision ID: 0015
Revises: 0009
Create Date: 2026-11-27 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "user_sessions",
        sa.Column(
            "token_type", sa.String(length=32), server_default="USER_SESSION", nullable=False
        ),
    )
    op.add_column("user_sessions", sa.Column("description", sa.String(length=1024), nullable=True))
    op.add_column(
        "user_sessions",
        sa.Column("revoked", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column(
        "users", sa.Column("remote", sa.Boolean(), server_default=sa.false(), nullable=False)
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("username", sa.String(length=256), nullable=True),
        sa.Column("token_kind", sa.String(length=32), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("route", sa.String(length=512), nullable=False),
        sa.Column("action", sa.String(length=128), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=True),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"], unique=False)
    op.create_index("ix_audit_log_user_id", "audit_log", ["user_id"], unique=False)
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("cut_id", sa.Integer(), nullable=False),
        sa.Column("head_hash", sa.String(length=64), nullable=False),
        sa.Column("removed", sa.Integer(), nullable=False),
        sa.Column("signature", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "user_sso_groups",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id", "group_name"),
    )


def downgrade() -> None:
    op.drop_table("user_sso_groups")
    op.drop_table("audit_checkpoints")
    op.drop_index("ix_audit_log_user_id", table_name="audit_log")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    # Access tokens cannot be kept by an older master: it would take them for sessions.
    op.execute("DELETE FROM user_sessions WHERE token_type <> 'USER_SESSION'")
    for table, column in (
        ("users", "remote"),
        ("user_sessions", "revoked"),
        ("user_sessions", "description"),
        ("user_sessions", "token_type"),
    ):
        if op.get_bind().dialect.name == "sqlite":
            # SQLite 3.35+ drops a column in place (no table copy, so no cascade).
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)
