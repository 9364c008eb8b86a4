"""users, login sessions, experiment owners and allocation tokens

Adds ``users`` and ``user_sessions``; ``experiments.owner_id``; ``allocations.token_hash``
(the SHA-256 of each part's trial session token).

The built-in users ``admin`` (administrator) and ``determined`` are inserted here with no
password hash; the master sets their password at its next start
(``security.initial_user_password``, else empty), so a new cluster and one migrated from
before users existed start alike. Existing experiments were all recorded as owned by
``determined`` (the ``owner`` column's only value until now), so they get that user's id;
any other name is mapped to ``determined`` too.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 07:40:00.000000
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    users = op.create_table(
        "users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=256), nullable=False),
        sa.Column("password_hash", sa.String(length=512), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("display_name", sa.String(length=256), nullable=True),
        sa.Column("modified_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username"),
    )
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("user_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_user_sessions_user_id"), ["user_id"], unique=False)

    now = time.time()
    op.bulk_insert(
        users,
        [
            {
                "id": 1,
                "username": "admin",
                "password_hash": None,
                "admin": True,
                "active": True,
                "display_name": None,
                "modified_at": now,
            },
            {
                "id": 2,
                "username": "determined",
                "password_hash": None,
                "admin": False,
                "active": True,
                "display_name": None,
                "modified_at": now,
            },
        ],
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SELECT setval(pg_get_serial_sequence('users', 'id'), 2)")

    # Plain ADD COLUMN, never a batch "copy and move": on SQLite that drops and
    # recreates the table, and dropping ``experiments`` with foreign keys on would
    # cascade-delete every trial.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE experiments ADD COLUMN owner_id INTEGER REFERENCES users (id)")
    else:
        op.add_column("experiments", sa.Column("owner_id", sa.Integer(), nullable=True))
        op.create_foreign_key(
            "fk_experiments_owner_id_users", "experiments", "users", ["owner_id"], ["id"]
        )
    op.create_index("ix_experiments_owner_id", "experiments", ["owner_id"], unique=False)
    op.execute("UPDATE experiments SET owner_id = 1 WHERE owner = 'admin'")
    op.execute("UPDATE experiments SET owner = 'determined', owner_id = 2 WHERE owner_id IS NULL")

    op.add_column("allocations", sa.Column("token_hash", sa.String(length=64), nullable=True))
    op.create_index("ix_allocations_token_hash", "allocations", ["token_hash"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_allocations_token_hash", table_name="allocations")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_column("token_hash")
    op.drop_index("ix_experiments_owner_id", table_name="experiments")
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_column("owner_id")
    with op.batch_alter_table("user_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_user_sessions_user_id"))
    op.drop_table("user_sessions")
    op.drop_table("users")
