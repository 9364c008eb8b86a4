"""REST routes of projects and of moving experiments between them, under ``/api/v1``
(Determined's paths and shapes, reference §1.3-1.4; docs/protocol.md, "Workspaces,
projects and RBAC").

| route | needs | answer |
|---|---|---|
| ``GET /workspaces/{id}/projects`` | ``VIEW_PROJECT`` | ``{projects, pagination}`` |
| ``POST /workspaces/{id}/projects`` | ``CREATE_PROJECT`` | 201 ``{project}`` |
| ``GET /projects/{id}`` | ``VIEW_PROJECT`` | ``{project}`` |
| ``PATCH /projects/{id}`` | ``UPDATE_PROJECT`` | ``{project}`` |
| ``DELETE /projects/{id}`` | ``DELETE_PROJECT`` | ``{completed: true}``; 409 with experiments |
| ``POST /projects/{id}/archive|unarchive`` | ``UPDATE_PROJECT`` | ``{}`` |
| ``POST /projects/{id}/move`` | update here, ``CREATE_PROJECT`` there | ``{}`` |
| ``POST|PUT /projects/{id}/notes`` | ``UPDATE_PROJECT`` | ``{notes}`` |
| ``POST /experiments/{id}/move`` | ``UPDATE_EXPERIMENT``, ``CREATE_EXPERIMENT`` there | ``{}`` |
| ``POST /projects/{id}/experiments/move`` | the same per experiment | ``{results}`` |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from . import det_shapes
from .api_spec import INT32_MAX, BodyId, DbId
from .auth import forbidden, principal
from .authz import experiment_target, project_target, require, require_destination
from .db import ExperimentRow, ProjectRow, UserRow
from .errors import BadRequest, NotFound
from .models import projects, workspaces
from .responses import Empty
from .responses import teams as T
from .routes_workspaces import pagination

router = APIRouter(prefix="/api/v1")


class _Body(BaseModel):
    # Determined's client sends camelCase names (issue 33); ours stay accepted.
    model_config = det_shapes.body_config()


class PostProject(_Body):
    name: str = Field(max_length=1000)
    description: str | None = Field(default="", max_length=10_000)  # null: none
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    key: str | None = Field(default=None, max_length=100)


class PatchProject(_Body):
    name: str | None = Field(default=None, max_length=1000)
    description: str | None = Field(default=None, max_length=10_000)
    key: str | None = Field(default=None, max_length=100)


class NoteIn(_Body):
    name: str = Field(max_length=1000)
    contents: str = Field(max_length=65_536)


class AddNote(_Body):
    note: NoteIn
    project_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


class PutNotes(_Body):
    notes: list[NoteIn] = Field(max_length=1000)
    project_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


class MoveProject(_Body):
    destination_workspace_id: int = Field(ge=1, le=INT32_MAX)
    project_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


class MoveExperiment(_Body):
    destination_project_id: int = Field(ge=1, le=INT32_MAX)
    experiment_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


class MoveExperiments(_Body):
    destination_project_id: int = Field(ge=1, le=INT32_MAX)
    experiment_ids: list[BodyId] = Field(min_length=1, max_length=1000)
    project_id: int | None = Field(default=None, ge=0, le=INT32_MAX)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def project_views(s: Session, rows: list[ProjectRow]) -> list[dict[str, Any]]:
    """The API form of ``rows`` (counts read in ``s``)."""
    counts = projects.project_counts(s, [p.id for p in rows])
    users = {u.id: u.username for u in s.scalars(select(UserRow))} if rows else {}
    ws_names = {w: workspaces.read_workspace(s, w).name for w in {p.workspace_id for p in rows}}
    return [
        det_shapes.with_camel(
            {
                "id": p.id,
                "name": p.name,
                "key": p.key,
                "workspace_id": p.workspace_id,
                "workspace_name": ws_names[p.workspace_id],
                "description": p.description,
                "notes": p.notes,
                "archived": p.archived,
                "immutable": p.immutable,
                "user_id": p.user_id,
                "username": users.get(p.user_id) if p.user_id is not None else None,
                **counts[p.id],
                "state": "WORKSPACE_STATE_UNSPECIFIED",
                "error_message": "",
            }
        )
        for p in rows
    ]


def _one(request: Request, project_id: int) -> dict[str, Any]:
    with _ctx(request).db.read() as s:
        return {"project": project_views(s, [projects.read_project(s, project_id)])[0]}


def _parse(model: type[BaseModel], body: dict[str, Any], key: str) -> Any:
    wrapped = key and set(body) == {key} and isinstance(body.get(key), dict)
    inner = body[key] if wrapped else body
    try:
        return model.model_validate(inner)
    except ValidationError as exc:
        raise BadRequest(
            "invalid request",
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()],
        ) from None


@router.get("/workspaces/{workspace_id}/projects", response_model=T.ProjectsOut)
def list_projects(
    workspace_id: DbId,
    request: Request,
    sort_by: str = Query(
        "SORT_BY_ID",
        pattern="^(SORT_BY_(UNSPECIFIED|ID|NAME|DESCRIPTION|CREATION_TIME|"
        "LAST_EXPERIMENT_START_TIME)|id|name|description|creation_time)$",
    ),
    order_by: str = Query(
        "ORDER_BY_ASC", pattern="^(ORDER_BY_UNSPECIFIED|ORDER_BY_ASC|ORDER_BY_DESC|asc|desc)$"
    ),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: every project"),
    name: str | None = Query(None, max_length=1000),
    archived: bool | None = Query(None),
    user_ids: list[BodyId] | None = Query(None),
) -> dict[str, Any]:
    """The projects of a workspace, filtered and paged."""
    key = sort_by.upper().removeprefix("SORT_BY_").lower()
    with _ctx(request).db.read() as s:
        workspaces.read_workspace(s, workspace_id)
        rows, total = projects.list_projects(
            s,
            workspace_id,
            name=name,
            archived=archived,
            user_ids=[u for u in user_ids or [] if 0 <= u <= INT32_MAX],
            sort_by=key,
            order_by="desc" if "DESC" in order_by.upper() else "asc",
            offset=offset,
            limit=limit,
        )
        views = project_views(s, rows)
    return {"projects": views, "pagination": pagination(offset, limit, len(views), total)}


@router.post("/workspaces/{workspace_id}/projects", status_code=201, response_model=T.ProjectBody)
def create_project(workspace_id: DbId, body: PostProject, request: Request) -> dict[str, Any]:
    """Create a project; ``key`` (1-5 letters or digits) is made from the name when
    none is given."""
    if body.workspace_id not in (None, 0, workspace_id):
        raise BadRequest(
            "invalid request", [("workspace_id", f"must match the path ({workspace_id})")]
        )
    who = principal(request)
    ctx = _ctx(request)
    with ctx.db.write() as s:
        p = projects.create_project(
            s, ctx.clock(), who.user_id, workspace_id, body.name, body.description or "", body.key
        )
        pid = p.id
    return _one(request, pid)


@router.get("/projects/{project_id}", response_model=T.ProjectBody)
def get_project(project_id: DbId, request: Request) -> dict[str, Any]:
    """One project."""
    return _one(request, project_id)


@router.patch("/projects/{project_id}", response_model=T.ProjectBody)
def patch_project(project_id: DbId, request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """Rename a project, or set its description or key (the body, or ``{"project":
    {...}}``)."""
    patch = _parse(PatchProject, body, "project")
    _ctx(request).write(
        lambda s, _c: projects.patch_project(
            s, project_id, patch.name, patch.description, patch.key
        )
    )
    return _one(request, project_id)


@router.delete("/projects/{project_id}", response_model=T.Completed)
def delete_project(project_id: DbId, request: Request) -> dict[str, Any]:
    """Delete a project; refused (409) while it holds experiments."""
    _ctx(request).write(lambda s, _c: projects.delete_project(s, project_id))
    return {"completed": True}


def _archive(archived: bool):
    def route(project_id: DbId, request: Request) -> dict[str, Any]:
        _ctx(request).write(lambda s, _c: projects.set_archived(s, project_id, archived))
        return {}

    verb = "archive" if archived else "unarchive"
    route.__name__ = f"{verb}_project"
    route.__doc__ = f"{verb.capitalize()} a project" + (
        " (no new experiments in it)." if archived else "."
    )
    return route


for _verb, _flag in (("archive", True), ("unarchive", False)):
    router.add_api_route(
        f"/projects/{{project_id}}/{_verb}", _archive(_flag), methods=["POST"], response_model=Empty
    )


@router.post("/projects/{project_id}/move", response_model=Empty)
def move_project(project_id: DbId, body: MoveProject, request: Request) -> dict[str, Any]:
    """Move a project to another workspace (``CREATE_PROJECT`` there)."""
    dest = body.destination_workspace_id
    require_destination(request, dest)
    _ctx(request).write(lambda s, _c: projects.move_project(s, project_id, dest))
    return {}


def _notes(append: bool):
    def route(project_id: DbId, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        notes: list[dict[str, str]]
        if append:
            notes = [_parse(AddNote, body, "").note.model_dump()]
        else:
            notes = [n.model_dump() for n in _parse(PutNotes, body, "").notes]
        new = _ctx(request).write(lambda s, _c: projects.set_notes(s, project_id, notes, append))
        return {"notes": new}

    route.__name__ = "add_project_note" if append else "put_project_notes"
    route.__doc__ = (
        "Append a note ``{note: {name, contents}}``."
        if append
        else "Replace every note ``{notes: [{name, contents}]}``."
    )
    return route


router.add_api_route(
    "/projects/{project_id}/notes", _notes(True), methods=["POST"], response_model=T.NotesOut
)
router.add_api_route(
    "/projects/{project_id}/notes", _notes(False), methods=["PUT"], response_model=T.NotesOut
)


# ---------------------------------------------------------------------- experiments


def _move_one(request: Request, exp_id: int, dest: int, source_project: int | None = None) -> str:
    """Move one experiment after checking both ends (and, with ``source_project``, that
    it is there); '' or why not."""
    ctx = _ctx(request)
    with ctx.db.read() as s:
        source = experiment_target(s, exp_id)
        dest_target = project_target(s, dest)
    if source is None:
        raise NotFound(f"experiment {exp_id} not found")
    if dest_target is None:
        raise NotFound(f"project ({dest}) not found")
    require(request, source)
    require(request, dest_target, second=True)

    def move(s: Session, _c: Any) -> None:
        exp = s.get(ExperimentRow, exp_id)
        if exp is None:
            raise NotFound(f"experiment {exp_id} not found")
        if source_project is not None and exp.project_id != source_project:
            raise NotFound(f"experiment {exp_id} is not in project {source_project}")
        projects.move_experiment(s, exp, dest)

    ctx.write(move)
    return ""


@router.post("/experiments/{exp_id}/move", response_model=Empty)
def move_experiment(exp_id: DbId, body: MoveExperiment, request: Request) -> dict[str, Any]:
    """Move an experiment to another project (``det e move``)."""
    if body.experiment_id not in (None, 0, exp_id):
        raise BadRequest("invalid request", [("experiment_id", f"must match the path ({exp_id})")])
    _move_one(request, exp_id, body.destination_project_id)
    return {}


@router.post("/projects/{project_id}/experiments/move", response_model=T.MovedOut)
def move_experiments(project_id: DbId, body: MoveExperiments, request: Request) -> dict[str, Any]:
    """Move experiments of a project to another; each is checked on its own and the
    answer says, per experiment, why it was not moved (``error`` empty: moved)."""
    results: list[dict[str, Any]] = []
    refused = False
    for exp_id in body.experiment_ids:
        error = ""
        try:
            _move_one(request, exp_id, body.destination_project_id, project_id)
        except HTTPException as exc:
            if exc.status_code != 403:
                raise
            error, refused = str(exc.detail), True
        except NotFound as exc:
            error = str(exc)
        results.append({"id": exp_id, "error": error})
    if all(r["error"] for r in results):
        why = "no experiment was moved: " + "; ".join(r["error"] for r in results)
        if refused:
            raise forbidden(why)
        raise BadRequest(why, [("experiment_ids", "none could be moved")])
    return {"results": results}
