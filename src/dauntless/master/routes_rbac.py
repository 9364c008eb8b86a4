"""REST routes of roles, role assignments and user groups under ``/api/v1``
(Determined's paths and shapes, reference §2.5; docs/protocol.md, "Workspaces, projects
and RBAC").

| route | needs | answer |
|---|---|---|
| ``GET /permissions/summary`` | a user | the caller's roles and where they hold them |
| ``POST /roles/search``, ``/roles/search/by-ids``, ``/by-assignability`` | a user | roles |
| ``GET /roles/search/by-user/{id}`` | the user, or ``ASSIGN_ROLES`` | ``{roles}`` |
| ``GET /roles/search/by-group/{id}`` | ``ASSIGN_ROLES`` on the cluster | ``{roles}`` |
| ``POST /roles/add-assignments``, ``/remove-assignments`` | ``ASSIGN_ROLES`` where assigned | ``{}`` |
| ``GET /roles/workspace/{id}`` | ``VIEW_WORKSPACE`` | its groups, users and assignments |
| ``POST /groups``, ``PUT|DELETE /groups/{id}``, ``PATCH /users/assignments`` | ``UPDATE_GROUP`` | |
| ``POST /groups/search``, ``GET /groups/{id}`` | a user | groups |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from .api_spec import INT32_MAX, BodyId, DbId
from .auth import principal
from .authz import require, workspace_target
from .db import RoleAssignmentRow, UserGroupRow, UserRow
from .models import groups
from .models.groups import Assignment
from .rbac import ROLES, role_json
from .responses import Empty
from .responses import teams as T
from .routes_workspaces import pagination

router = APIRouter(prefix="/api/v1")

_Id = Field(ge=0, le=INT32_MAX)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoleRef(_Body):
    role_id: int = _Id


class RoleAssignment(_Body):
    role: RoleRef
    scope_workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    scope_cluster: bool | None = None


class GroupRoleAssignment(_Body):
    group_id: int = _Id
    role_assignment: RoleAssignment


class UserRoleAssignment(_Body):
    user_id: int = _Id
    role_assignment: RoleAssignment


class Assignments(_Body):
    group_role_assignments: list[GroupRoleAssignment] = Field(default_factory=list, max_length=1000)
    user_role_assignments: list[UserRoleAssignment] = Field(default_factory=list, max_length=1000)


class Page(_Body):
    offset: int = Field(default=0, ge=0, le=INT32_MAX)
    limit: int = Field(default=0, ge=0, le=10_000)


class ByIds(_Body):
    role_ids: list[BodyId] = Field(max_length=1000)


class ByAssignability(_Body):
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    offset: int = Field(default=0, ge=0, le=INT32_MAX)
    limit: int = Field(default=0, ge=0, le=10_000)


class CreateGroup(_Body):
    name: str = Field(max_length=1000)
    add_users: list[BodyId] = Field(default_factory=list, max_length=10_000)


class UpdateGroup(_Body):
    group_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    name: str | None = Field(default=None, max_length=1000)
    add_users: list[BodyId] = Field(default_factory=list, max_length=10_000)
    remove_users: list[BodyId] = Field(default_factory=list, max_length=10_000)


class SearchGroups(_Body):
    user_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    name: str | None = Field(default=None, max_length=1000)
    offset: int = Field(default=0, ge=0, le=INT32_MAX)
    limit: int = Field(default=0, ge=0, le=10_000)


class AssignGroups(_Body):
    user_ids: list[BodyId] = Field(max_length=10_000)
    add_groups: list[BodyId] = Field(default_factory=list, max_length=1000)
    remove_groups: list[BodyId] = Field(default_factory=list, max_length=1000)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def _page(items: list[Any], offset: int, limit: int) -> tuple[list[Any], dict[str, int]]:
    chosen = items[offset : offset + limit] if limit else items[offset:]
    return chosen, pagination(offset, limit, len(chosen), len(items))


def assignment_json(a: RoleAssignmentRow) -> dict[str, Any]:
    """Determined's ``RoleAssignment``: the role, and its scope."""
    return {
        "role": {"role_id": a.role_id, "name": ROLES[a.role_id].name if a.role_id in ROLES else ""},
        "scope_workspace_id": a.workspace_id,
        "scope_cluster": a.workspace_id is None,
    }


def _user_json(u: UserRow) -> dict[str, Any]:
    return {"id": u.id, "username": u.username, "display_name": u.display_name, "admin": u.admin}


# ---------------------------------------------------------------------- roles


@router.post("/roles/search", response_model=T.RolesOut)
def list_roles(request: Request, body: Page | None = None) -> dict[str, Any]:
    """Every role with its permissions, by id."""
    page = body or Page()
    roles, pag = _page([role_json(r) for r in ROLES.values()], page.offset, page.limit)
    return {"roles": roles, "pagination": pag}


@router.post("/roles/search/by-ids", response_model=T.RolesByIdOut)
def roles_by_ids(body: ByIds, request: Request) -> dict[str, Any]:
    """The roles with these ids (unknown ids are left out)."""
    return {"roles": [role_json(ROLES[i]) for i in body.role_ids if i in ROLES]}


@router.post("/roles/search/by-assignability", response_model=T.RolesOut)
def roles_by_assignability(body: ByAssignability, request: Request) -> dict[str, Any]:
    """The roles that can be assigned on a workspace (``workspace_id``: not the global
    ones), or on the cluster (every role)."""
    roles = [role_json(r) for r in ROLES.values() if body.workspace_id is None or not r.global_only]
    chosen, pag = _page(roles, body.offset, body.limit)
    return {"roles": chosen, "pagination": pag}


def _with_assignments(rows: Sequence[tuple[RoleAssignmentRow, Any]], key: str) -> list[dict]:
    by_role: dict[int, dict[str, Any]] = {}
    for a, who in rows:
        if a.role_id not in ROLES:
            continue
        entry = by_role.setdefault(
            a.role_id,
            {"role": role_json(ROLES[a.role_id]), key: []},
        )
        item: dict[str, Any] = {"role_assignment": assignment_json(a)}
        if key == "user_role_assignments":
            item["user_id"] = a.user_id
            if who is not None:
                item["via_group"] = {"group_id": who.id, "name": who.name}
        else:
            item["group_id"] = a.group_id
        entry[key].append(item)
    return list(by_role.values())


@router.get("/roles/search/by-user/{user_id}", response_model=T.RoleAssignmentsOut)
def roles_of_user(user_id: DbId, request: Request) -> dict[str, Any]:
    """The roles a user holds, directly and through their groups, with where."""
    with _ctx(request).db.read() as s:
        from .models import users

        users.read_user(s, user_id)
        rows = groups.user_assignments(s, user_id)
        return {"roles": _with_assignments(rows, "user_role_assignments")}


@router.get("/roles/search/by-group/{group_id}", response_model=T.RoleAssignmentsOut)
def roles_of_group(group_id: DbId, request: Request) -> dict[str, Any]:
    """The roles a group holds, with where."""
    with _ctx(request).db.read() as s:
        groups.read_group(s, group_id)
        rows = [(a, None) for a in groups.group_assignments(s, group_id)]
        return {"roles": _with_assignments(rows, "group_role_assignments")}


@router.get("/permissions/summary", response_model=T.PermissionsSummary)
def permissions_summary(request: Request) -> dict[str, Any]:
    """The caller's roles (with their permissions) and, per role, the workspaces where
    they hold it and whether they hold it on the cluster. An admin holds ClusterAdmin;
    under basic authz every user also holds what basic authz grants (``basic``)."""
    who = principal(request)
    az = request.app.state.authz
    rows: list[tuple[RoleAssignmentRow, Any]] = []
    if who.user_id is not None:
        with _ctx(request).db.read() as s:
            rows = groups.user_assignments(s, who.user_id)
    scopes: dict[int, dict[str, Any]] = {}
    for a, _group in rows:
        entry = scopes.setdefault(
            a.role_id, {"role_id": a.role_id, "scope_workspace_ids": [], "scope_cluster": False}
        )
        if a.workspace_id is None:
            entry["scope_cluster"] = True
        elif a.workspace_id not in entry["scope_workspace_ids"]:
            entry["scope_workspace_ids"].append(a.workspace_id)
    if who.admin:
        scopes.setdefault(1, {"role_id": 1, "scope_workspace_ids": [], "scope_cluster": True})[
            "scope_cluster"
        ] = True
    grants = az.grants(who) if who.kind == "user" else None
    return {
        "user_id": who.user_id,
        "roles": [role_json(ROLES[i]) for i in sorted(scopes) if i in ROLES],
        "assignments": [scopes[i] for i in sorted(scopes) if i in ROLES],
        "basic": az.basic,
        "cluster_permissions": sorted(int(p) for p in grants.cluster) if grants else [],
        "workspace_permissions": {
            str(ws): sorted(int(p) for p in perms)
            for ws, perms in (grants.workspaces.items() if grants else ())
        },
    }


def _items(body: Assignments) -> list[tuple[Assignment, int | None]]:
    out = []
    for g in body.group_role_assignments:
        ra = g.role_assignment
        out.append(
            (
                Assignment(ra.role.role_id, None, g.group_id, ra.scope_workspace_id or None),
                ra.scope_workspace_id or None,
            )
        )
    for u in body.user_role_assignments:
        ra = u.role_assignment
        out.append(
            (
                Assignment(ra.role.role_id, u.user_id, None, ra.scope_workspace_id or None),
                ra.scope_workspace_id or None,
            )
        )
    return out


def _assign(add: bool):
    def route(body: Assignments, request: Request) -> dict[str, Any]:
        items = _items(body)
        with _ctx(request).db.read() as s:
            for _a, ws in items:  # ASSIGN_ROLES where each role is given
                target = workspace_target(s, ws) if ws is not None else None
                if ws is not None and target is None:
                    from .errors import NotFound

                    raise NotFound(f"workspace {ws} not found")
                require(request, target)
        ctx = _ctx(request)
        assignments = [a for a, _ws in items]
        if add:
            ctx.write(lambda s, c: groups.add_assignments(s, c.clock(), assignments))
        else:
            ctx.write(lambda s, _c: groups.remove_assignments(s, assignments))
        return {}

    route.__name__ = "assign_roles" if add else "remove_assignments"
    route.__doc__ = (
        "Give roles to users and groups, each on a workspace (``scope_workspace_id``) or "
        "on the cluster; a role already given changes nothing."
        if add
        else "Take roles back from users and groups; one not given changes nothing."
    )
    return route


router.add_api_route(
    "/roles/add-assignments", _assign(True), methods=["POST"], response_model=Empty
)
router.add_api_route(
    "/roles/remove-assignments", _assign(False), methods=["POST"], response_model=Empty
)


@router.get("/roles/workspace/{workspace_id}", response_model=T.WorkspaceMembersOut)
def workspace_members(workspace_id: DbId, request: Request) -> dict[str, Any]:
    """Who holds roles on a workspace (cluster-wide roles are not listed)."""
    with _ctx(request).db.read() as s:
        from .models import workspaces

        workspaces.read_workspace(s, workspace_id)
        rows = groups.workspace_assignments(s, workspace_id)
    users: dict[int, dict[str, Any]] = {}
    group_map: dict[int, dict[str, Any]] = {}
    assignments = []
    for a, user, group in rows:
        item = assignment_json(a)
        if user is not None:
            users.setdefault(user.id, _user_json(user))
            item["user_id"] = user.id
        if group is not None:
            group_map.setdefault(group.id, {"group_id": group.id, "name": group.name})
            item["group_id"] = group.id
        assignments.append(item)
    return {
        "groups": list(group_map.values()),
        "users_assigned_directly": list(users.values()),
        "assignments": assignments,
    }


# ---------------------------------------------------------------------- groups


def _group_json(s: Session, g: UserGroupRow) -> dict[str, Any]:
    return {
        "group_id": g.id,
        "name": g.name,
        "users": [_user_json(u) for u in groups.members(s, [g.id])[g.id]],
    }


@router.post("/groups", status_code=201, response_model=T.GroupBody)
def create_group(body: CreateGroup, request: Request) -> dict[str, Any]:
    """Create a group with members (``add_users``: user ids)."""
    ctx = _ctx(request)
    with ctx.db.write() as s:
        g = groups.create_group(s, ctx.clock(), body.name, body.add_users)
        return {"group": _group_json(s, g)}


@router.post("/groups/search", response_model=T.GroupSearchOut)
def search_groups(body: SearchGroups, request: Request) -> dict[str, Any]:
    """Groups by name (of which ``user_id`` is a member; called ``name``), paged."""
    with _ctx(request).db.read() as s:
        rows, total = groups.search_groups(s, body.user_id, body.name, body.offset, body.limit)
        found = [{"group": {"group_id": g.id, "name": g.name}, "num_members": n} for g, n in rows]
    return {
        "groups": found,
        "pagination": pagination(body.offset, body.limit, len(found), total),
    }


@router.get("/groups/{group_id}", response_model=T.GroupBody)
def get_group(group_id: DbId, request: Request) -> dict[str, Any]:
    """A group and its members."""
    with _ctx(request).db.read() as s:
        return {"group": _group_json(s, groups.read_group(s, group_id))}


@router.put("/groups/{group_id}", response_model=T.GroupBody)
def update_group(group_id: DbId, body: UpdateGroup, request: Request) -> dict[str, Any]:
    """Rename a group (``name``), add and remove members (user ids)."""
    ctx = _ctx(request)
    with ctx.db.write() as s:
        g = groups.update_group(s, group_id, body.name, body.add_users, body.remove_users)
        s.flush()
        return {"group": _group_json(s, g)}


@router.delete("/groups/{group_id}", response_model=Empty)
def delete_group(group_id: DbId, request: Request) -> dict[str, Any]:
    """Delete a group with its memberships and role assignments."""
    _ctx(request).write(lambda s, _c: groups.delete_group(s, group_id))
    return {}


@router.patch("/users/assignments", response_model=Empty)
def assign_users_to_groups(body: AssignGroups, request: Request) -> dict[str, Any]:
    """Add users to groups (``add_groups``) and remove them from others."""
    _ctx(request).write(
        lambda s, _c: groups.assign_groups(s, body.user_ids, body.add_groups, body.remove_groups)
    )
    return {}
