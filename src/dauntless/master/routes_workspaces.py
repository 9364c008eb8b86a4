"""REST routes of workspaces and of resource pools bound to them, under ``/api/v1``
(Determined's paths and shapes, reference §1.4-1.5; docs/protocol.md, "Workspaces,
projects and RBAC").

| route | needs | answer |
|---|---|---|
| ``GET /workspaces`` | lists what the caller may view | ``{workspaces, pagination}`` |
| ``POST /workspaces`` | ``CREATE_WORKSPACE`` | 201 ``{workspace}`` |
| ``GET /workspaces/{id}`` | ``VIEW_WORKSPACE`` | ``{workspace}`` |
| ``PATCH /workspaces/{id}`` | ``UPDATE_WORKSPACE`` (+ per field) | ``{workspace}`` |
| ``DELETE /workspaces/{id}`` | ``DELETE_WORKSPACE`` | ``{completed: true}``; 409 non-empty |
| ``POST /workspaces/{id}/archive|unarchive|pin|unpin`` | update / view | ``{}`` |
| ``GET /workspaces/{id}/available-resource-pools`` | view | ``{resource_pools}`` |
| ``GET|POST|PUT|DELETE /resource-pools/{pool}/workspace-bindings`` | bindings: ClusterAdmin | |

Who may call each route is declared in :mod:`dauntless.master.permissions`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from dauntless.config import CheckpointStorageConfig
from dauntless.storage import build_storage

from . import det_shapes
from .api_spec import INT32_MAX, BodyId, DbId
from .auth import principal
from .authz import authorizer, require, visible, workspace_target
from .db import UserRow, WorkspaceRow
from .errors import BadRequest, NotFound
from .models import pool_bindings, workspaces
from .rbac import Perm
from .responses import Empty
from .responses import teams as T

router = APIRouter(prefix="/api/v1")

_SECRET_KEYS = ("secret_key", "access_key", "connection_string", "credential")
"""Checkpoint storage fields shown as ``********`` (never sent back)."""

_STORAGE = TypeAdapter(CheckpointStorageConfig)

DEFAULT_POOLS = ("default",)
"""Pools that cannot be bound: the cluster's default pool (tasks that name no pool and
whose workspace has no default run there), as Determined's default pools."""


class _Body(BaseModel):
    # Determined's client sends camelCase names (issue 33); ours stay accepted.
    model_config = det_shapes.body_config()


class AgentUserGroup(_Body):
    agent_uid: int | None = Field(default=None, ge=0, le=INT32_MAX)
    agent_gid: int | None = Field(default=None, ge=0, le=INT32_MAX)
    agent_user: str | None = Field(default=None, max_length=32)
    agent_group: str | None = Field(default=None, max_length=32)


class PostWorkspace(_Body):
    name: str = Field(max_length=1000)
    agent_user_group: AgentUserGroup | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    # null as Determined's client sends an unset field (the same as "": none).
    default_compute_pool: str | None = Field(default="", max_length=256)
    default_aux_pool: str | None = Field(default="", max_length=256)
    cluster_namespace_meta: dict[str, Any] | None = None
    cluster_quota_pairs: dict[str, Any] | None = None


class PatchWorkspace(_Body):
    name: str | None = Field(default=None, max_length=1000)
    agent_user_group: AgentUserGroup | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    default_compute_resource_pool: str | None = Field(default=None, max_length=256)
    default_aux_resource_pool: str | None = Field(default=None, max_length=256)
    default_compute_pool: str | None = Field(default=None, max_length=256)
    default_aux_pool: str | None = Field(default=None, max_length=256)
    cluster_namespace_meta: dict[str, Any] | None = None


class Bindings(_Body):
    workspace_ids: list[BodyId] = Field(default_factory=list, max_length=10_000)
    workspace_names: list[str] = Field(default_factory=list, max_length=10_000)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def _pools(request: Request) -> list[str]:
    return [p.pool_name for p in request.app.state.config.resource_pools]


def pagination(offset: int, limit: int, count: int, total: int) -> dict[str, int]:
    """Determined's ``pagination`` of a page of ``count`` items at ``offset``."""
    return det_shapes.with_camel(
        {
            "offset": offset,
            "limit": limit,
            "start_index": offset if count else 0,
            "end_index": offset + count,
            "total": total,
        }
    )


def redact_storage(storage: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint storage config with its secrets shown as ``********``."""
    if not storage:
        return None
    return {k: ("********" if k in _SECRET_KEYS and v else v) for k, v in storage.items()}


def workspace_views(s: Session, rows: list[WorkspaceRow], user_id: int | None) -> list[dict]:
    """The API form of ``rows`` (counts and pins read in ``s``)."""
    counts = workspaces.workspace_counts(s, [w.id for w in rows], user_id)
    names = _usernames(s, {w.user_id for w in rows})
    return [
        det_shapes.with_camel(
            {
                "id": w.id,
                "name": w.name,
                "archived": w.archived,
                "immutable": w.immutable,
                "user_id": w.user_id,
                "username": names.get(w.user_id),
                **counts[w.id],
                "state": "WORKSPACE_STATE_UNSPECIFIED",
                "error_message": "",
                "agent_user_group": w.agent_user_group,
                "checkpoint_storage_config": redact_storage(w.checkpoint_storage_config),
                "default_compute_pool": w.default_compute_pool or "",
                "default_aux_pool": w.default_aux_pool or "",
            }
        )
        for w in rows
    ]


def _usernames(s: Session, ids: set[int | None]) -> dict[int | None, str]:
    real = [i for i in ids if i is not None]
    if not real:
        return {}
    from sqlalchemy import select

    return dict(s.execute(select(UserRow.id, UserRow.username).where(UserRow.id.in_(real))).all())


def _one(request: Request, workspace_id: int) -> dict[str, Any]:
    who = principal(request)
    with _ctx(request).db.read() as s:
        ws = workspaces.read_workspace(s, workspace_id)
        return {"workspace": workspace_views(s, [ws], who.user_id)[0]}


def check_storage(value: dict[str, Any] | None, field: str) -> dict[str, Any] | None:
    """A workspace's checkpoint storage, checked complete and usable by this master.

    Raises:
        BadRequest: naming ``field``.
    """
    if not value:
        return None
    try:
        parsed = _STORAGE.validate_python(value)
    except ValidationError as exc:
        errors = [(".".join([field, *(str(p) for p in e["loc"])]), e["msg"]) for e in exc.errors()]
        raise BadRequest("invalid checkpoint storage config", errors) from None
    try:
        build_storage(parsed)
    except (ImportError, ValueError) as exc:
        raise BadRequest("invalid checkpoint storage config", [(field, str(exc))]) from None
    return parsed.model_dump(mode="json", exclude_none=True)


def _no_namespaces(value: dict[str, Any] | None, field: str) -> None:
    if value:
        raise BadRequest(
            f"{field}: Kubernetes namespaces apply to Determined's Kubernetes resource "
            "manager; this master has none",
            [(field, "not supported by this master")],
        )


# ---------------------------------------------------------------------- workspaces


@router.get("/workspaces", response_model=T.WorkspacesOut)
def list_workspaces(
    request: Request,
    sort_by: str = Query(
        "SORT_BY_ID", pattern="^(SORT_BY_UNSPECIFIED|SORT_BY_ID|SORT_BY_NAME|id|name)$"
    ),
    order_by: str = Query(
        "ORDER_BY_ASC", pattern="^(ORDER_BY_UNSPECIFIED|ORDER_BY_ASC|ORDER_BY_DESC|asc|desc)$"
    ),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: every workspace"),
    name: str | None = Query(None, max_length=1000),
    name_case_sensitive: str | None = Query(
        None, alias="nameCaseSensitive", max_length=1000, description="only the one named so"
    ),
    archived: bool | None = Query(None),
    user_ids: list[BodyId] | None = Query(None, description="only those these users created"),
    pinned: bool | None = Query(None, description="true: only those the caller pinned"),
) -> dict[str, Any]:
    """The workspaces the caller may view (``VIEW_WORKSPACE``), filtered and paged."""
    who = principal(request)
    scope = visible(request)
    with _ctx(request).db.read() as s:
        rows, total = workspaces.list_workspaces(
            s,
            scope,
            name=name_case_sensitive or name,
            archived=archived,
            user_ids=[u for u in user_ids or [] if 0 <= u <= INT32_MAX],
            pinned_by=who.user_id if pinned else None,
            sort_by="name" if "NAME" in sort_by.upper() else "id",
            order_by="desc" if "DESC" in order_by.upper() else "asc",
            offset=offset,
            limit=limit,
        )
        views = workspace_views(s, rows, who.user_id)
    if name_case_sensitive:
        # Names are unique case-insensitively: at most one matched; keep it if exact.
        views = [v for v in views if v["name"] == name_case_sensitive]
        total = len(views)
    return {"workspaces": views, "pagination": pagination(offset, limit, len(views), total)}


@router.post("/workspaces", status_code=201, response_model=T.WorkspaceBody)
def create_workspace(body: PostWorkspace, request: Request) -> dict[str, Any]:
    """Create a workspace; its creator gets ``security.authz.workspace_creator_assign_role``
    on it (WorkspaceAdmin by default). An agent user group needs
    ``SET_WORKSPACE_AGENT_USER_GROUP`` (admins); under RBAC a checkpoint storage needs
    ``SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG`` on the cluster."""
    _no_namespaces(body.cluster_namespace_meta, "cluster_namespace_meta")
    _no_namespaces(body.cluster_quota_pairs, "cluster_quota_pairs")
    group = body.agent_user_group.model_dump(exclude_none=True) if body.agent_user_group else None
    if group:
        require(request, None, perm=Perm.SET_WORKSPACE_AGENT_USER_GROUP)
    storage = check_storage(body.checkpoint_storage_config, "checkpoint_storage_config")
    if storage and not authorizer(request).basic:
        require(request, None, perm=Perm.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG)
    who = principal(request)
    config = request.app.state.config
    assign = config.security.authz.workspace_creator_assign_role
    ctx = _ctx(request)
    with ctx.db.write() as s:
        ws = workspaces.create_workspace(
            s,
            ctx.clock(),
            who.user_id,
            body.name,
            agent_user_group=group,
            checkpoint_storage_config=storage,
            default_compute_pool=body.default_compute_pool or None,
            default_aux_pool=body.default_aux_pool or None,
            pools=_pools(request),
            creator_role=assign.role_id if assign.enabled else None,
        )
        ws_id = ws.id
    # Determined's PostWorkspaceResponse also names the namespace bindings (none here).
    return _one(request, ws_id) | {"namespaceBindings": {}}


@router.get("/workspaces/{workspace_id}", response_model=T.WorkspaceBody)
def get_workspace(workspace_id: DbId, request: Request) -> dict[str, Any]:
    """One workspace."""
    return _one(request, workspace_id)


@router.patch("/workspaces/{workspace_id}", response_model=T.WorkspaceBody)
def patch_workspace(workspace_id: DbId, request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """Rename a workspace, or set its agent user group (``SET_WORKSPACE_AGENT_USER_GROUP``),
    checkpoint storage (``SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG``; ``{}`` clears it) or
    default pools (``SET_WORKSPACE_DEFAULT_RESOURCE_POOL``; ``""`` clears one). The body
    is the fields, or ``{"workspace": {...fields}}``."""
    inner = body.get("workspace") if set(body) == {"workspace"} else body
    try:
        patch = PatchWorkspace.model_validate(inner)
    except ValidationError as exc:
        raise BadRequest(
            "invalid request",
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()],
        ) from None
    _no_namespaces(patch.cluster_namespace_meta, "cluster_namespace_meta")
    ctx = _ctx(request)
    with ctx.db.read() as s:
        target = workspace_target(s, workspace_id)
    if target is None:
        raise NotFound(f"workspace {workspace_id} not found")
    fields = patch.model_fields_set
    if "agent_user_group" in fields:
        require(request, target, perm=Perm.SET_WORKSPACE_AGENT_USER_GROUP)
    storage = None
    if "checkpoint_storage_config" in fields:
        require(request, target, perm=Perm.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG)
        storage = check_storage(patch.checkpoint_storage_config, "checkpoint_storage_config")
    compute = patch.default_compute_resource_pool
    aux = patch.default_aux_resource_pool
    compute = compute if compute is not None else patch.default_compute_pool
    aux = aux if aux is not None else patch.default_aux_pool
    if compute is not None or aux is not None:
        require(request, target, perm=Perm.SET_WORKSPACE_DEFAULT_RESOURCE_POOL)
    with ctx.db.write() as s:
        ws = workspaces.read_workspace(s, workspace_id)
        workspaces.refuse_archived(ws)
        if patch.name is not None:
            workspaces.rename_workspace(s, ws, patch.name)
        if "agent_user_group" in fields:
            group = patch.agent_user_group
            ws.agent_user_group = workspaces.check_agent_user_group(
                group.model_dump(exclude_none=True) if group else None
            )
        if "checkpoint_storage_config" in fields:
            ws.checkpoint_storage_config = storage
        workspaces.set_default_pools(s, ws, compute, aux, _pools(request))
    return _one(request, workspace_id)


@router.delete("/workspaces/{workspace_id}", response_model=T.Completed)
def delete_workspace(workspace_id: DbId, request: Request) -> dict[str, Any]:
    """Delete a workspace with its empty projects; refused (409) while it holds
    experiments or tasks that have not ended."""
    _ctx(request).write(lambda s, _c: workspaces.delete_workspace(s, workspace_id))
    return {"completed": True}


def _archive(archived: bool):
    def route(workspace_id: DbId, request: Request) -> dict[str, Any]:
        _ctx(request).write(lambda s, _c: workspaces.set_archived(s, workspace_id, archived))
        return {}

    verb = "archive" if archived else "unarchive"
    route.__name__ = f"{verb}_workspace"
    route.__doc__ = f"{verb.capitalize()} a workspace" + (
        " (no new projects or experiments in it)." if archived else "."
    )
    return route


def _pin(pinned: bool):
    def route(workspace_id: DbId, request: Request) -> dict[str, Any]:
        who = principal(request)
        ctx = _ctx(request)
        if who.user_id is None:
            raise BadRequest("only users pin workspaces")
        uid = who.user_id
        ctx.write(lambda s, c: workspaces.pin(s, workspace_id, uid, pinned, c.clock()))
        return {}

    verb = "pin" if pinned else "unpin"
    route.__name__ = f"{verb}_workspace"
    route.__doc__ = f"{verb.capitalize()} a workspace for the caller (the WebUI's sidebar)."
    return route


for _verb, _fn in (
    ("archive", _archive(True)),
    ("unarchive", _archive(False)),
    ("pin", _pin(True)),
    ("unpin", _pin(False)),
):
    router.add_api_route(
        f"/workspaces/{{workspace_id}}/{_verb}", _fn, methods=["POST"], response_model=Empty
    )


@router.get("/workspaces/{workspace_id}/available-resource-pools", response_model=T.PoolsOut)
def available_pools(workspace_id: DbId, request: Request) -> dict[str, Any]:
    """The resource pools the workspace's tasks may use (unbound, or bound to it)."""
    with _ctx(request).db.read() as s:
        workspaces.read_workspace(s, workspace_id)
        return {"resource_pools": pool_bindings.available_pools(s, workspace_id, _pools(request))}


# ---------------------------------------------------------------------- pool bindings


def _binding_ids(s: Session, body: Bindings) -> list[int]:
    ids = list(body.workspace_ids)
    for name in body.workspace_names:
        ws = workspaces.workspace_by_name(s, name)
        if ws is None:
            raise NotFound(f"workspace {name!r} not found")
        ids.append(ws.id)
    return ids


def _change(mode: str):
    def route(pool_name: str, body: Bindings, request: Request) -> dict[str, Any]:
        pools = _pools(request)

        def change(s: Session, _c: Any) -> None:
            ids = _binding_ids(s, body)
            pool_bindings.change_bindings(s, pool_name, ids, mode, pools, DEFAULT_POOLS)

        _ctx(request).write(change)
        return {}

    route.__name__ = f"{mode}_pool_bindings"
    route.__doc__ = {
        "add": "Bind a resource pool to workspaces (``workspace_ids``/``workspace_names``).",
        "remove": "Unbind workspaces from a pool (running tasks go on; new ones are refused).",
        "replace": "Bind a pool to exactly these workspaces.",
    }[mode]
    return route


for _method, _mode in (("POST", "add"), ("DELETE", "remove"), ("PUT", "replace")):
    router.add_api_route(
        "/resource-pools/{pool_name}/workspace-bindings",
        _change(_mode),
        methods=[_method],
        response_model=Empty,
    )


@router.get("/resource-pools/{pool_name}/workspace-bindings", response_model=T.BoundWorkspacesOut)
def list_bound_workspaces(pool_name: str, request: Request) -> dict[str, Any]:
    """The workspaces a pool is bound to (those the caller may view)."""
    if pool_name not in _pools(request):
        raise NotFound(f"resource pool {pool_name!r} not found")
    who = principal(request)
    with _ctx(request).db.read() as s:
        rows = pool_bindings.pool_workspaces(s, pool_name, visible(request))
        views = workspace_views(s, rows, who.user_id)
    return {"workspace_ids": [w["id"] for w in views], "workspaces": views}
