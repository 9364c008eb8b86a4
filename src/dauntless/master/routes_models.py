"""REST routes of the model registry under ``/api/v1`` (Determined's paths and shapes,
reference ``determined-surface-platform.md`` §4.3; docs/protocol.md, "Model registry").

A path's ``{model_name}`` is a model's name, or its id when all digits. Rights follow
the model's workspace (:data:`dauntless.master.permissions.ROUTES`); registering a
version also needs ``VIEW_EXPERIMENT_ARTIFACTS`` on the checkpoint's experiment, moving
``CREATE_MODEL_REGISTRY`` on the destination, and deleting what another user made
``DELETE_OTHER_USER_MODEL_REGISTRY`` / ``_VERSION`` (its owner's right otherwise).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError, model_validator

from . import det_shapes
from . import routes_det_models as det_models
from .api_spec import INT32_MAX, BodyId
from .auth import principal
from .authz import Target, read_target, require, require_destination, visible
from .det_dialect import speaks_determined
from .errors import BadRequest, NotFound
from .models import checkpoints, registered, registry
from .rbac import Perm
from .registry_views import model_views, version_views
from .responses import Empty
from .responses import registry as R
from .routes_det_experiments import page as det_page
from .routes_workspaces import pagination

router = APIRouter(prefix="/api/v1")

_TEXT = 65_536  # the longest description, comment or notes, in characters

VersionNum = Annotated[
    int, Path(ge=-1, le=INT32_MAX, description="a version number; -1: the highest")
]


class _Body(BaseModel):
    # Determined's client names the fields in camelCase (checkpointUuid, workspaceName)
    # and sends null for each it leaves unset: null is taken as absent.
    model_config = det_shapes.body_config()

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class PostModel(_Body):
    name: str = Field(max_length=1000)
    description: str = Field(default="", max_length=_TEXT)
    metadata: dict[str, Any] = Field(default_factory=dict)
    labels: list[str] = Field(default_factory=list, max_length=1000)
    notes: str = Field(default="", max_length=_TEXT)
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    workspace_name: str | None = Field(default=None, max_length=1000)


class PatchModel(_Body):
    name: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=_TEXT)
    metadata: dict[str, Any] | None = None
    labels: list[str] | None = Field(default=None, max_length=1000)
    notes: str | None = Field(default=None, max_length=_TEXT)
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    workspace_name: str | None = Field(default=None, max_length=1000)


class MoveModel(_Body):
    destination_workspace_id: int = Field(ge=1, le=INT32_MAX)
    model_name: str | None = Field(default=None, max_length=1000)


class PostVersion(_Body):
    checkpoint_uuid: str = Field(min_length=1, max_length=64)
    name: str = Field(default="", max_length=256)
    comment: str = Field(default="", max_length=_TEXT)
    metadata: dict[str, Any] = Field(default_factory=dict)
    labels: list[str] = Field(default_factory=list, max_length=1000)
    notes: str = Field(default="", max_length=_TEXT)
    model_name: str | None = Field(default=None, max_length=1000)


class PatchVersion(_Body):
    name: str | None = Field(default=None, max_length=256)
    comment: str | None = Field(default=None, max_length=_TEXT)
    metadata: dict[str, Any] | None = None
    labels: list[str] | None = Field(default=None, max_length=1000)
    notes: str | None = Field(default=None, max_length=_TEXT)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def _parse(model: type[BaseModel], body: dict[str, Any], key: str) -> Any:
    """``body``, or ``body[key]`` when the body is ``{key: {...}}`` (Determined's PATCH
    shape), validated.

    Raises:
        BadRequest: naming each bad field.
    """
    inner = body[key] if set(body) == {key} and isinstance(body.get(key), dict) else body
    try:
        return model.model_validate(inner)
    except ValidationError as exc:
        raise BadRequest(
            "invalid request",
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()],
        ) from None


def _one(request: Request, ident: str | int) -> dict[str, Any]:
    with _ctx(request).db.read() as s:
        view = model_views(s, [registry.read_model(s, ident)])[0]
    if speaks_determined(request):
        return JSONResponse({"model": det_shapes.model(view)})  # type: ignore[return-value]
    return {"model": view}


def _version(request: Request, ident: str | int, number: int) -> dict[str, Any]:
    with _ctx(request).db.read() as s:
        model = registry.read_model(s, ident)
        v = registry.read_version(s, model, number)
        view = version_views(s, model, [v])[0]
        if speaks_determined(request):
            (det,) = det_models.det_versions(s, [view])
            return JSONResponse({"modelVersion": det})  # type: ignore[return-value]
    return {"model_version": view}


def _order(order_by: str) -> str:
    return "desc" if "DESC" in order_by.upper() else "asc"


@router.get("/models", response_model=R.ModelsOut)
def list_models(
    request: Request,
    sort_by: str = Query(
        "SORT_BY_NAME",
        pattern="^(SORT_BY_)?(UNSPECIFIED|NAME|DESCRIPTION|CREATION_TIME|LAST_UPDATED_TIME|"
        "NUM_VERSIONS|WORKSPACE|name|description|creation_time|last_updated_time|"
        "num_versions|workspace)$",
    ),
    order_by: str = Query(
        "ORDER_BY_ASC", pattern="^(ORDER_BY_UNSPECIFIED|ORDER_BY_ASC|ORDER_BY_DESC|asc|desc)$"
    ),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: every model"),
    name: str | None = Query(None, max_length=1000),
    description: str | None = Query(None, max_length=1000),
    labels: list[str] | None = Query(None, max_length=100),
    archived: bool | None = Query(None),
    users: list[str] | None = Query(None, max_length=100),
    user_ids: list[BodyId] | None = Query(None, max_length=100),
    id: int | None = Query(None, ge=0, le=INT32_MAX),
    workspace_names: list[str] | None = Query(None, max_length=100),
    workspace_ids: list[BodyId] | None = Query(None, max_length=100),
) -> dict[str, Any]:
    """The models the caller may view, filtered (``name``/``description``: substrings,
    any case; ``labels``: all of them), sorted and paged. In Determined's dialect the
    camelCase parameters (``sortBy``, ``workspaceNames``...) are read and the answer is
    its ``GetModelsResponse``."""
    det = speaks_determined(request)
    sort_by = det_models.det_param(request, "sort_by", sort_by)
    order_by = det_models.det_param(request, "order_by", order_by)
    workspace_names = det_models.det_param(request, "workspace_names", workspace_names, many=True)
    if det and "workspaceIds" in request.query_params:
        workspace_ids = [
            det_models.query_id(x, "workspace_ids")
            for x in request.query_params.getlist("workspaceIds")
        ]
    if det and "userIds" in request.query_params:
        user_ids = [
            det_models.query_id(x, "user_ids") for x in request.query_params.getlist("userIds")
        ]
    key = det_models.sort_key(sort_by, det_models.MODEL_SORTS)
    key = "name" if key == "unspecified" else key
    with _ctx(request).db.read() as s:
        ws_ids = list(workspace_ids or [])
        if workspace_names:  # unknown names match nothing (-1 is no workspace's id)
            ws_ids += registry.workspace_ids_named(s, workspace_names) or [-1]
        rows, total = registry.list_models(
            s,
            visible=visible(request),
            name=name,
            description=description,
            labels=labels or [],
            archived=archived,
            user_ids=user_ids or [],
            usernames=users or [],
            model_id=id,
            workspace_ids=ws_ids,
            sort_by=key,
            order_by=_order(order_by),
            offset=offset,
            limit=limit,
        )
        views = model_views(s, rows)
    if det:
        body: dict[str, Any] = {
            "models": [det_shapes.model(v) for v in views],
            "pagination": det_page(offset, len(views), total, limit),
        }
        return JSONResponse(body)  # type: ignore[return-value]
    return {"models": views, "pagination": pagination(offset, limit, len(views), total)}


@router.post("/models", response_model=R.ModelBody)
def create_model(body: PostModel, request: Request) -> dict[str, Any]:
    """Create a model (in workspace 1 unless ``workspace_id``/``workspace_name`` says)."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        ws_id = registry.model_workspace(s, body.workspace_id, body.workspace_name)
    require(request, read_target(request, "workspace", ws_id))
    who = principal(request)
    with ctx.db.write() as s:
        m = registry.create_model(
            s,
            ctx.clock(),
            who.user_id,
            body.name,
            ws_id,
            body.description,
            body.metadata,
            body.labels,
            body.notes,
        )
        mid = m.id
    return _one(request, mid)


@router.get("/model/labels", response_model=R.ModelLabels)
def model_labels(
    request: Request, workspace_id: int | None = Query(None, ge=0, le=INT32_MAX)
) -> dict[str, Any]:
    """Every label of the models the caller may view, the most used first."""
    with _ctx(request).db.read() as s:
        return {"labels": registry.model_labels(s, visible(request), workspace_id)}


@router.get("/models/{model_name}", response_model=R.ModelBody)
def get_model(model_name: str, request: Request) -> dict[str, Any]:
    """One model."""
    return _one(request, model_name)


@router.patch("/models/{model_name}", response_model=R.ModelBody)
def patch_model(model_name: str, request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """Change a model (the body, or ``{"model": {...}}``); a ``workspace_id`` or
    ``workspace_name`` other than its own moves it (as ``POST .../move``)."""
    patch = _parse(PatchModel, body, "model")
    fields = patch.model_dump(exclude_unset=True, exclude_none=True)
    ctx = _ctx(request)
    with ctx.db.read() as s:
        model = registry.read_model(s, model_name)
        mid, ws_now = model.id, model.workspace_id
        ws = fields.pop("workspace_id", None)
        ws_name = fields.pop("workspace_name", None)
        dest = registry.model_workspace(s, ws, ws_name) if ws or ws_name else ws_now
    if dest != ws_now:
        require(request, read_target(request, "workspace", dest), perm=Perm.CREATE_MODEL_REGISTRY)
    with ctx.db.write() as s:
        model = registry.read_model(s, mid)
        registry.patch_model(s, ctx.clock(), model, fields)
        if dest != ws_now:
            registry.move_model(s, ctx.clock(), model, dest)
    return _one(request, mid)


def _archive(archived: bool):
    def route(model_name: str, request: Request) -> dict[str, Any]:
        ctx = _ctx(request)
        with ctx.db.write() as s:
            registry.set_archived(s, ctx.clock(), registry.read_model(s, model_name), archived)
        return {}

    verb = "archive" if archived else "unarchive"
    route.__name__ = f"{verb}_model"
    route.__doc__ = f"{verb.capitalize()} a model" + (
        " (read-only: no edits, no new versions)." if archived else "."
    )
    return route


for _verb, _flag in (("archive", True), ("unarchive", False)):
    router.add_api_route(
        f"/models/{{model_name}}/{_verb}", _archive(_flag), methods=["POST"], response_model=Empty
    )


@router.post("/models/{model_name}/move", response_model=Empty)
def move_model(model_name: str, body: MoveModel, request: Request) -> dict[str, Any]:
    """Move a model to another workspace (``CREATE_MODEL_REGISTRY`` there)."""
    dest = body.destination_workspace_id
    require_destination(request, dest)
    ctx = _ctx(request)
    with ctx.db.write() as s:
        registry.move_model(s, ctx.clock(), registry.read_model(s, model_name), dest)
    return {}


def _require_owner_or(request: Request, owner_id: int | None, perm: Perm, ident: str) -> None:
    """Deleting what another user made needs ``perm`` (an owner's own is theirs)."""
    who = principal(request)
    if who.kind == "user" and owner_id is not None and owner_id == who.user_id:
        return
    require(request, read_target(request, "model", ident), perm=perm)


def _remove_released(released: list[tuple[dict[str, Any], str]]) -> None:
    for storage, uuid in released:
        checkpoints.remove_checkpoints({"checkpoint_storage": storage}, [uuid])


@router.delete("/models/{model_name}", response_model=Empty)
def delete_model(model_name: str, request: Request) -> dict[str, Any]:
    """Delete a model and its versions; a checkpoint they alone kept after its
    experiment was deleted is deleted from storage."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        model = registry.read_model(s, model_name)
        owner, mid = model.user_id, model.id
    _require_owner_or(request, owner, Perm.DELETE_OTHER_USER_MODEL_REGISTRY, str(mid))
    with ctx.db.write() as s:
        released = registry.delete_model(s, registry.read_model(s, mid))
    _remove_released(released)
    return {}


@router.get("/models/{model_name}/versions", response_model=R.ModelVersionsOut)
def list_versions(
    model_name: str,
    request: Request,
    sort_by: str = Query(
        "SORT_BY_VERSION",
        pattern="^(SORT_BY_)?(UNSPECIFIED|VERSION|CREATION_TIME|version|creation_time)$",
    ),
    order_by: str = Query(
        "ORDER_BY_ASC", pattern="^(ORDER_BY_UNSPECIFIED|ORDER_BY_ASC|ORDER_BY_DESC|asc|desc)$"
    ),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: every version"),
) -> dict[str, Any]:
    """A model and its versions, sorted and paged (Determined's ``sortBy``/``orderBy``
    and its ``GetModelVersionsResponse`` in its dialect)."""
    sort_by = det_models.det_param(request, "sort_by", sort_by)
    order_by = det_models.det_param(request, "order_by", order_by)
    key = (
        "creation_time"
        if det_models.sort_key(sort_by, det_models.VERSION_SORTS) == "creation_time"
        else "version"
    )
    with _ctx(request).db.read() as s:
        model = registry.read_model(s, model_name)
        rows = registry.list_versions(s, model, key, _order(order_by))
        page = rows[offset : offset + limit] if limit else rows[offset:]
        views = version_views(s, model, page)
        mview = model_views(s, [model])[0]
        if speaks_determined(request):
            body = {
                "model": det_shapes.model(mview),
                "modelVersions": det_models.det_versions(s, views),
                "pagination": det_page(offset, len(views), len(rows), limit),
            }
            return JSONResponse(body)  # type: ignore[return-value]
    return {
        "model": mview,
        "model_versions": views,
        "pagination": pagination(offset, limit, len(views), len(rows)),
    }


@router.post("/models/{model_name}/versions", response_model=R.ModelVersionBody)
def register_version(model_name: str, body: PostVersion, request: Request) -> dict[str, Any]:
    """Register a COMPLETED checkpoint as the model's next version (the caller needs
    ``VIEW_EXPERIMENT_ARTIFACTS`` on its experiment)."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        ckpt = registered.checkpoint_row(s, body.checkpoint_uuid)
        exp_id = ckpt.experiment_id if ckpt is not None else None
    if exp_id is None:
        raise NotFound(f"checkpoint {body.checkpoint_uuid} not found")
    require(
        request, read_target(request, "experiment", exp_id), perm=Perm.VIEW_EXPERIMENT_ARTIFACTS
    )
    who = principal(request)
    with ctx.db.write() as s:
        model = registry.read_model(s, model_name)
        v = registry.create_version(
            s,
            ctx.clock(),
            who.user_id,
            model,
            body.checkpoint_uuid,
            body.name,
            body.comment,
            body.metadata,
            body.labels,
            body.notes,
        )
        mid, number = model.id, v.version
    return _version(request, mid, number)


@router.get("/models/{model_name}/versions/{model_version_num}", response_model=R.ModelVersionBody)
def get_version(model_name: str, model_version_num: VersionNum, request: Request) -> dict[str, Any]:
    """One version (``-1``: the highest)."""
    return _version(request, model_name, model_version_num)


@router.patch(
    "/models/{model_name}/versions/{model_version_num}", response_model=R.ModelVersionBody
)
def patch_version(
    model_name: str, model_version_num: VersionNum, request: Request, body: dict[str, Any]
) -> dict[str, Any]:
    """Change a version's name, comment, notes, metadata or labels (the body, or
    ``{"model_version": {...}}``)."""
    patch = _parse(PatchVersion, body, "model_version")
    fields = patch.model_dump(exclude_unset=True, exclude_none=True)
    ctx = _ctx(request)
    with ctx.db.write() as s:
        model = registry.read_model(s, model_name)
        v = registry.read_version(s, model, model_version_num)
        registry.patch_version(s, ctx.clock(), model, v, fields)
        mid, number = model.id, v.version
    return _version(request, mid, number)


@router.delete("/models/{model_name}/versions/{model_version_num}", response_model=Empty)
def delete_version(
    model_name: str, model_version_num: VersionNum, request: Request
) -> dict[str, Any]:
    """Delete a version (``DELETE_MODEL_VERSION``: its own or its model's owner holds
    it; another user's version needs ``DELETE_OTHER_USER_MODEL_VERSION`` too). Its
    checkpoint is released: its experiment's GC may collect it, and when the experiment
    is gone and no other version names it, its files are deleted now."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        model = registry.read_model(s, model_name)
        v = registry.read_version(s, model, model_version_num)
        owners = ((model.user_id, "model"), (v.user_id, "model"))
        target = Target("model", f"model {model.name!r} (#{model.id})", model.workspace_id, owners)
        mid, number, uuid = model.id, v.version, v.checkpoint_uuid
        ckpt = registered.checkpoint_row(s, uuid)
        exp_id = ckpt.experiment_id if ckpt is not None else None
    require(request, target)
    who = principal(request)
    if not (who.kind == "user" and who.user_id == v.user_id):
        require(request, target, perm=Perm.DELETE_OTHER_USER_MODEL_VERSION)
    with ctx.db.write() as s:
        v = registry.read_version(s, registry.read_model(s, mid), number)
        released = registry.delete_version(s, v)
    _remove_released(released)
    if exp_id is not None:  # its experiment's GC policy applies to it again
        ctx.gc_due.add(exp_id)
        ctx.wake.set()
    return {}
