"""ORM models of workspaces, projects, user groups, role assignments and resource-pool
bindings (issue 30; migration ``0014_teams``).

Workspace 1 and project 1, both named ``Uncategorized`` and immutable, exist in every
database (made by the migration); experiments and tasks that name no project or
workspace belong to them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base

UNCATEGORIZED_ID = 1
"""The id of the ``Uncategorized`` workspace and of its ``Uncategorized`` project."""


class WorkspaceRow(Base):
    """A workspace: projects, tasks and role assignments hang off it.

    ``name`` is unique case-insensitively (checked by the model functions: Determined's
    rule). ``agent_user_group`` is ``{agent_uid, agent_gid, agent_user, agent_group}``
    (each optional): the POSIX identity its tasks run as, overriding the user's.
    ``checkpoint_storage_config`` is a complete ``checkpoint_storage`` section merged
    under experiments' own (reference §1.2). ``user_id`` is its creator.
    """

    __tablename__ = "workspaces"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    agent_user_group: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    checkpoint_storage_config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    default_compute_pool: Mapped[str | None] = mapped_column(String(256), nullable=True)
    default_aux_pool: Mapped[str | None] = mapped_column(String(256), nullable=True)


class ProjectRow(Base):
    """A project of a workspace; experiments belong to one. ``key`` (1-5 upper-case
    letters and digits) is unique on the cluster; ``notes`` is ``[{name, contents}]``."""

    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(80))
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), index=True
    )
    description: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    key: Mapped[str] = mapped_column(String(5), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class WorkspacePinRow(Base):
    """A user's pin of a workspace (the WebUI's sidebar shows pinned ones)."""

    __tablename__ = "workspace_pins"

    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    pinned_at: Mapped[float] = mapped_column(Float)


class UserGroupRow(Base):
    """A named group of users; roles assigned to it apply to every member."""

    __tablename__ = "user_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class UserGroupMemberRow(Base):
    """A user's membership of a group."""

    __tablename__ = "user_group_members"

    group_id: Mapped[int] = mapped_column(
        ForeignKey("user_groups.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class RoleAssignmentRow(Base):
    """One role (:data:`dauntless.master.rbac.ROLES` id) given to a user or to a group
    (exactly one of ``user_id``, ``group_id``), on one workspace or, with
    ``workspace_id`` None, on the whole cluster."""

    __tablename__ = "role_assignments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    role_id: Mapped[int] = mapped_column(Integer)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=True, index=True
    )
    group_id: Mapped[int | None] = mapped_column(
        ForeignKey("user_groups.id", ondelete="CASCADE"), nullable=True, index=True
    )
    workspace_id: Mapped[int | None] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=True, index=True
    )
    created_at: Mapped[float] = mapped_column(Float)


class PoolBindingRow(Base):
    """A resource pool bound to a workspace: a pool with bindings is usable only by the
    tasks and experiments of its bound workspaces (reference §1.5)."""

    __tablename__ = "rp_workspace_bindings"

    pool_name: Mapped[str] = mapped_column(String(256), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True, index=True
    )
