"""workspaces, projects, user groups, role assignments and pool bindings

Adds ``workspaces``, ``projects``, ``workspace_pins``, ``user_groups``,
``user_group_members``, ``role_assignments`` and ``rp_workspace_bindings``;
``experiments.project_id`` and ``tasks.workspace_id`` (issue 30).

Every database gets workspace 1 and its project 1, both named ``Uncategorized`` and
immutable (Determined's); every existing experiment moves to project 1 and every task
to workspace 1 (the columns' default).

Users keep what they could do (the "owner or admin" rules before this revision): under
``security.authz.type: basic``, the default, those rules are unchanged; for ``rbac``,
every administrator gets the ``ClusterAdmin`` role (1) and every other user who has
signed in the ``Viewer`` role (4) on the whole cluster (they saw everything), and owners
keep their rights on what they own (``dauntless.master.rbac.OWNER_PERMISSIONS``). A new
database's ``determined`` (no password yet) gets no role, as Determined's.

Revision ID: 0014
Revises: 0009
Create Date: 2026-11-30 09:00:00.000000
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLUSTER_ADMIN, VIEWER = 1, 4


def upgrade() -> None:
    workspaces = op.create_table(
        "workspaces",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("immutable", sa.Boolean(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("agent_user_group", sa.JSON(), nullable=True),
        sa.Column("checkpoint_storage_config", sa.JSON(), nullable=True),
        sa.Column("default_compute_pool", sa.String(length=256), nullable=True),
        sa.Column("default_aux_pool", sa.String(length=256), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    projects = op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("immutable", sa.Boolean(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(length=5), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
        sa.UniqueConstraint("workspace_id", "name"),
    )
    op.create_index("ix_projects_workspace_id", "projects", ["workspace_id"])
    op.create_table(
        "workspace_pins",
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("pinned_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "user_id"),
    )
    op.create_table(
        "user_groups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "user_group_members",
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["group_id"], ["user_groups.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("group_id", "user_id"),
    )
    op.create_index("ix_user_group_members_user_id", "user_group_members", ["user_id"])
    assignments = op.create_table(
        "role_assignments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("group_id", sa.Integer(), nullable=True),
        sa.Column("workspace_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["group_id"], ["user_groups.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    for column in ("user_id", "group_id", "workspace_id"):
        op.create_index(f"ix_role_assignments_{column}", "role_assignments", [column])
    op.create_table(
        "rp_workspace_bindings",
        sa.Column("pool_name", sa.String(length=256), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pool_name", "workspace_id"),
    )
    op.create_index(
        "ix_rp_workspace_bindings_workspace_id", "rp_workspace_bindings", ["workspace_id"]
    )

    now = time.time()
    op.bulk_insert(
        workspaces,
        [
            {
                "id": 1,
                "name": "Uncategorized",
                "archived": False,
                "immutable": True,
                "user_id": None,
                "created_at": now,
            }
        ],
    )
    op.bulk_insert(
        projects,
        [
            {
                "id": 1,
                "name": "Uncategorized",
                "workspace_id": 1,
                "description": "",
                "notes": [],
                "archived": False,
                "immutable": True,
                "user_id": None,
                "key": "UNCAT",
                "created_at": now,
            }
        ],
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("SELECT setval(pg_get_serial_sequence('workspaces', 'id'), 1)")
        op.execute("SELECT setval(pg_get_serial_sequence('projects', 'id'), 1)")

    # Plain ADD COLUMN on SQLite (migrations run with its foreign keys off, which lets a
    # REFERENCES column have a non-null default); a batch copy would lose the tables'
    # AUTOINCREMENT (ids never reused, 0004).
    for table, column, parent in (
        ("experiments", "project_id", "projects"),
        ("tasks", "workspace_id", "workspaces"),
    ):
        if bind.dialect.name == "sqlite":
            op.execute(
                f"ALTER TABLE {table} ADD COLUMN {column} INTEGER NOT NULL DEFAULT 1 "
                f"REFERENCES {parent} (id)"
            )
        else:
            op.add_column(
                table,
                sa.Column(column, sa.Integer(), nullable=False, server_default=sa.text("1")),
            )
            op.create_foreign_key(f"fk_{table}_{column}_{parent}", table, parent, [column], ["id"])
        op.create_index(f"ix_{table}_{column}", table, [column])

    users = sa.table(
        "users",
        sa.column("id", sa.Integer),
        sa.column("admin", sa.Boolean),
        sa.column("password_hash", sa.String),
    )
    rows = bind.execute(
        sa.select(users.c.id, users.c.admin, users.c.password_hash).order_by(users.c.id)
    ).all()
    op.bulk_insert(
        assignments,
        [
            {
                "role_id": CLUSTER_ADMIN if admin else VIEWER,
                "user_id": user_id,
                "group_id": None,
                "workspace_id": None,
                "created_at": now,
            }
            for user_id, admin, password_hash in rows
            # A user without a password hash never signed in: the built-ins of a new
            # database (the master sets their password at its first start). On a new
            # cluster `determined` holds no role, as in Determined; `admin` is an admin.
            if admin or password_hash is not None
        ],
    )


def downgrade() -> None:
    for table, column in (("tasks", "workspace_id"), ("experiments", "project_id")):
        op.drop_index(f"ix_{table}_{column}", table_name=table)
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column(column)
    op.drop_index("ix_rp_workspace_bindings_workspace_id", table_name="rp_workspace_bindings")
    op.drop_table("rp_workspace_bindings")
    for column in ("user_id", "group_id", "workspace_id"):
        op.drop_index(f"ix_role_assignments_{column}", table_name="role_assignments")
    op.drop_table("role_assignments")
    op.drop_index("ix_user_group_members_user_id", table_name="user_group_members")
    op.drop_table("user_group_members")
    op.drop_table("user_groups")
    op.drop_table("workspace_pins")
    op.drop_index("ix_projects_workspace_id", table_name="projects")
    op.drop_table("projects")
    op.drop_table("workspaces")
