"""REST routes of config templates under ``/api/v1`` (Determined's paths and shapes,
reference §6.1; issue 31 scope 5).

| route | needs (on the template's workspace) | answer |
|---|---|---|
| ``GET /templates`` | ``VIEW_TEMPLATES`` (lists only those) | ``{templates, pagination}`` |
| ``GET /templates/{name}`` | ``VIEW_TEMPLATES`` | ``{template}`` |
| ``POST /templates/{name}`` | ``CREATE_TEMPLATES`` on the body's workspace | ``{template}`` |
| ``PUT /templates/{name}`` | create, or ``UPDATE_TEMPLATES`` on both workspaces | ``{template}`` |
| ``PATCH /templates/{name}`` | ``UPDATE_TEMPLATES`` (replaces its config) | ``{template}`` |
| ``PATCH /template/rename`` | ``UPDATE_TEMPLATES`` | ``{template}`` |
| ``DELETE /templates/{name}`` | ``DELETE_TEMPLATES`` | ``{}`` |

A ``Template`` is ``{name, config, workspace_id}`` (``workspace_id`` 0 or absent: the
Uncategorized workspace). An unknown template answers 404 whatever the caller holds;
templates are applied by experiment and task creation
(:func:`dauntless.master.models.templates.apply_template`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from dauntless.config import LimitError, check_tree

from .api_spec import INT32_MAX
from .auth import principal
from .authz import read_target, require, visible
from .db import UNCATEGORIZED_ID, TemplateRow
from .errors import BadRequest, NotFound
from .models import templates
from .rbac import Perm
from .responses import Empty
from .responses import integrations as R
from .routes_workspaces import pagination

router = APIRouter(prefix="/api/v1")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TemplateIn(_Body):
    """A template to store: ``config`` is a mapping (JSON object)."""

    name: str | None = Field(default=None, max_length=templates.MAX_NAME)
    config: dict[str, Any]
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


class PatchConfig(_Body):
    template_name: str | None = Field(default=None, max_length=templates.MAX_NAME)
    config: dict[str, Any]


class Rename(_Body):
    old_name: str = Field(max_length=templates.MAX_NAME)
    new_name: str = Field(max_length=templates.MAX_NAME)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def template_view(row: TemplateRow) -> dict[str, Any]:
    """The API form of a template."""
    return {"name": row.name, "config": row.config, "workspace_id": row.workspace_id}


def _check_config(config: dict[str, Any]) -> None:
    try:
        check_tree(config, "config")
    except LimitError as exc:
        raise BadRequest(f"invalid template config: {exc}", exc.errors) from None


def _require_on(request: Request, workspace_id: int, perm: Perm) -> None:
    target = read_target(request, "workspace", workspace_id)
    if target is None:
        raise NotFound(f"workspace {workspace_id} not found")
    require(request, target, perm=perm)


def template_for_use(request: Request, name: str) -> TemplateRow:
    """Template ``name``, once the caller may view it (``VIEW_TEMPLATES`` on its
    workspace): for experiment and task creation's ``template``.

    Raises:
        NotFound: no such template. BadRequest: a bad name. HTTPException: 403.
    """
    name = templates.check_name(name, "template")
    with _ctx(request).db.read() as s:
        row = templates.require_template(s, name)
        s.expunge(row)
    _require_on(request, row.workspace_id, Perm.VIEW_TEMPLATES)
    return row


def _existing(request: Request, name: str, perm: Perm) -> TemplateRow:
    with _ctx(request).db.read() as s:
        row = templates.require_template(s, name)
        s.expunge(row)
    _require_on(request, row.workspace_id, perm)
    return row


@router.get("/templates", response_model=R.TemplatesOut)
def list_templates(
    request: Request,
    name: str = Query("", max_length=templates.MAX_NAME, description="names containing it"),
    workspace_ids: list[int] = Query(  # noqa: B008 - FastAPI's declaration
        [], max_length=1000, description="only templates of these workspaces"
    ),
    sort_by: str = Query("SORT_BY_NAME", pattern="^(SORT_BY_(UNSPECIFIED|NAME)|name)$"),
    order_by: str = Query("ORDER_BY_ASC", pattern="^(ORDER_BY_(UNSPECIFIED|ASC|DESC)|asc|desc)$"),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000),
) -> dict[str, Any]:
    """Templates the caller may view, sorted by name (``limit`` 0: all)."""
    del sort_by  # only by name, as Determined
    if any(not 0 <= w <= INT32_MAX for w in workspace_ids):
        raise BadRequest("invalid request: workspace_ids: ids", [("workspace_ids", "ids")])
    seen = visible(request)
    with _ctx(request).db.read() as s:
        rows, total = templates.read_templates(
            s,
            visible=seen,
            name=name,
            workspace_ids=workspace_ids,
            descending=order_by.lower().endswith("desc"),
            offset=offset,
            limit=limit,
        )
        views = [template_view(r) for r in rows]
    return {"templates": views, "pagination": pagination(offset, limit, len(views), total)}


@router.get("/templates/{template_name}", response_model=R.TemplateOut)
def get_template(template_name: str, request: Request) -> dict[str, Any]:
    """One template (404 when none has that name)."""
    return {"template": template_view(_existing(request, template_name, Perm.VIEW_TEMPLATES))}


def _store(request: Request, template_name: str, body: TemplateIn, replace: bool) -> dict:
    if body.name is not None and body.name != template_name:
        raise BadRequest(
            "invalid request: name: differs from the path's template name",
            [("name", "the path's template name")],
        )
    name = templates.check_name(template_name)
    _check_config(body.config)
    ws = body.workspace_id or UNCATEGORIZED_ID
    ctx = _ctx(request)
    with ctx.db.read() as s:
        old = templates.read_template(s, name)
        old_ws = None if old is None else old.workspace_id
    if old_ws is not None and replace:
        _require_on(request, old_ws, Perm.UPDATE_TEMPLATES)
        _require_on(request, ws, Perm.UPDATE_TEMPLATES)
    else:
        _require_on(request, ws, Perm.CREATE_TEMPLATES)
    who = principal(request)
    row = ctx.write(
        lambda s, c: template_view(
            templates.create_template(
                s, name, body.config, ws, who.user_id, c.clock(), replace=replace
            )
        )
    )
    return {"template": row}


@router.post("/templates/{template_name}", response_model=R.TemplateOut)
def post_template(template_name: str, body: TemplateIn, request: Request) -> dict[str, Any]:
    """Create a template (409 when the name is taken)."""
    return _store(request, template_name, body, replace=False)


@router.put("/templates/{template_name}", response_model=R.TemplateOut)
def put_template(template_name: str, body: TemplateIn, request: Request) -> dict[str, Any]:
    """Create a template, or replace the config (and workspace) of the one of that
    name."""
    return _store(request, template_name, body, replace=True)


@router.patch("/templates/{template_name}", response_model=R.TemplateOut)
def patch_template(template_name: str, body: PatchConfig, request: Request) -> dict[str, Any]:
    """Replace a template's config."""
    _existing(request, template_name, Perm.UPDATE_TEMPLATES)
    _check_config(body.config)
    view = _ctx(request).write(
        lambda s, c: template_view(
            templates.update_config(s, template_name, body.config, c.clock())
        )
    )
    return {"template": view}


@router.patch("/template/rename", response_model=R.TemplateOut)
def rename_template(body: Rename, request: Request) -> dict[str, Any]:
    """Rename a template (409 when the new name is taken)."""
    _existing(request, body.old_name, Perm.UPDATE_TEMPLATES)
    view = _ctx(request).write(
        lambda s, c: template_view(
            templates.rename_template(s, body.old_name, body.new_name, c.clock())
        )
    )
    return {"template": view}


@router.delete("/templates/{template_name}", response_model=Empty)
def delete_template(template_name: str, request: Request) -> dict[str, Any]:
    """Delete a template (what it was applied to keeps its merged config)."""
    _existing(request, template_name, Perm.DELETE_TEMPLATES)
    _ctx(request).write(lambda s, _c: templates.delete_template(s, template_name))
    return {}
