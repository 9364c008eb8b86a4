"""Answers of the workspace, project, role and group routes (Determined's shapes,
reference §1.4 and §2.5)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open


class Pagination(_Open):
    """Where a page lies: ``offset``, ``limit`` (0: no limit), the first and last
    indexes it holds, and how many matched in all."""

    offset: int
    limit: int
    start_index: int
    end_index: int
    total: int


class WorkspaceOut(_Open):
    """A workspace. ``pinned``/``pinned_at`` are the caller's; ``user_id``/``username``
    its creator; ``agent_user_group`` ``{agent_uid, agent_gid, agent_user,
    agent_group}``."""

    id: int
    name: str
    archived: bool
    immutable: bool
    user_id: int | None
    username: str | None
    num_projects: int
    num_experiments: int
    pinned: bool
    pinned_at: float | None
    state: str
    error_message: str
    agent_user_group: dict[str, Any] | None
    checkpoint_storage_config: dict[str, Any] | None
    default_compute_pool: str
    default_aux_pool: str


class WorkspaceBody(BaseModel):
    workspace: WorkspaceOut
    namespaceBindings: dict[str, Any] | None = None


class WorkspacesOut(BaseModel):
    workspaces: list[WorkspaceOut]
    pagination: Pagination


class Note(BaseModel):
    name: str
    contents: str


class ProjectOut(_Open):
    """A project; ``last_experiment_started_at`` in seconds since the epoch."""

    id: int
    name: str
    key: str
    workspace_id: int
    workspace_name: str
    description: str
    notes: list[Note]
    archived: bool
    immutable: bool
    user_id: int | None
    username: str | None
    num_experiments: int
    num_active_experiments: int
    last_experiment_started_at: float | None
    state: str
    error_message: str


class ProjectBody(BaseModel):
    project: ProjectOut


class ProjectsOut(BaseModel):
    projects: list[ProjectOut]
    pagination: Pagination


class NotesOut(BaseModel):
    notes: list[Note]


class Completed(BaseModel):
    """``completed``: the deletion is done (it always is here: deletion is refused while
    anything is left)."""

    completed: bool


class MovedOut(BaseModel):
    """Per experiment of a bulk move: its id and an error (empty: moved)."""

    results: list[dict[str, Any]]


class PoolsOut(BaseModel):
    resource_pools: list[str]


class BoundWorkspacesOut(BaseModel):
    workspace_ids: list[int]
    workspaces: list[dict[str, Any]]


class RoleOut(_Open):
    """A role: ``{role_id, name, permissions: [{id, name, scope_type_mask}],
    scope_type_mask: {cluster, workspace}}``."""

    role_id: int
    name: str
    permissions: list[dict[str, Any]]
    scope_type_mask: dict[str, bool]


class RolesOut(BaseModel):
    roles: list[RoleOut]
    pagination: Pagination


class RolesByIdOut(BaseModel):
    roles: list[dict[str, Any]]


class RoleAssignmentsOut(BaseModel):
    """Each of the roles a user or group holds, with where: ``{role, user_role_assignments
    | group_role_assignments}`` (Determined's ``RoleWithAssignments``)."""

    roles: list[dict[str, Any]]


class PermissionsSummary(BaseModel):
    """The caller's roles and, per role, where it holds it; ``basic``: whether basic
    authz applies; the permission ids the caller holds on the cluster and per workspace
    (what the WebUI uses to hide what the caller may not do)."""

    user_id: int | None
    roles: list[dict[str, Any]]
    assignments: list[dict[str, Any]]
    basic: bool
    cluster_permissions: list[int]
    workspace_permissions: dict[str, list[int]]


class WorkspaceMembersOut(BaseModel):
    """Who holds roles on a workspace: its groups, its users assigned directly, and the
    assignments."""

    groups: list[dict[str, Any]]
    users_assigned_directly: list[dict[str, Any]]
    assignments: list[dict[str, Any]]


class GroupOut(_Open):
    """A group and its members (``users``: ``[{id, username, ...}]``)."""

    group_id: int
    name: str
    users: list[dict[str, Any]]


class GroupBody(BaseModel):
    group: GroupOut


class GroupSearchOut(BaseModel):
    groups: list[dict[str, Any]]
    pagination: Pagination
