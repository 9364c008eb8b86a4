"""REST routes of generic tasks: commands, notebooks, shells and TensorBoards
(docs/protocol.md, "Generic tasks"; Determined's ``/api/v1/commands``, ``/notebooks``,
``/shells``, ``/tensorboards`` and ``/tasks`` families).

Creating takes a multipart form (like ``POST /experiments``): ``config`` (YAML or JSON
text, optional), ``context`` (a gzipped tar, optional, at most 95 MiB), and for commands
``entrypoint`` (JSON: an argv list or a string for ``sh -c``), and ``experiment_ids``
and ``trial_ids`` (JSON lists): for TensorBoards what they show (at least one), for the
other types what the task covers (optional; shown as links on the WebUI's Tasks page);
``workspace_id`` (the task's workspace, default 1: Uncategorized; ``CREATE_NSC`` there).

Determined's client sends a JSON body instead (``LaunchCommandRequest`` and its
siblings: ``config`` a mapping whose ``entrypoint`` is a command's, ``files`` the context
directory as ``File`` objects, ``templateName``, ``workspaceId``, a TensorBoard's
``experimentIds``/``trialIds``), read into the same fields by
:func:`dauntless.master.routes_det_tasks.read_launch`; a request in Determined's dialect
(:mod:`dauntless.master.det_dialect`) is answered in its shapes
(:mod:`dauntless.master.det_shapes_tasks`): launches, task lists and the task log stream
(``{"result": TaskLogsResponse}`` lines).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from dauntless.config import LimitError, load_json, load_yaml

from . import authz, det_shapes_tasks
from . import responses as R
from . import routes_det_tasks as det_tasks
from .api_spec import INT32_MAX
from .auth import forbidden, principal
from .context_archive import check_context_archive, read_upload
from .db import UNCATEGORIZED_ID
from .det_dialect import speaks_determined
from .errors import MAX_CONTEXT_BYTES, BadRequest
from .models import agents as agent_models
from .models import task_services, tasks
from .models.jobs import TASK_PREFIX
from .models.templates import apply_template
from .rbac import Perm
from .routes import _ctx, _read, _write
from .routes_templates import template_for_use
from .shell_ssh import META_KEY, NotOwner, new_key_pair, owner_key
from .task_states import NotFound, TaskConflict

router = APIRouter(prefix="/api/v1")

FAMILIES = {
    "commands": "COMMAND",
    "notebooks": "NOTEBOOK",
    "shells": "SHELL",
    "tensorboards": "TENSORBOARD",
}
"""REST family -> task type."""


def install_task_error_handlers(app: FastAPI) -> None:
    """Answer an unknown task with 404 and a forbidden state change with 409."""

    @app.exception_handler(NotFound)
    async def _not_found(_req: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(TaskConflict)
    async def _conflict(_req: Request, exc: TaskConflict) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})


def _json_field(form: Any, name: str, default: Any) -> Any:
    raw = form.get(name)
    if raw is None:
        return default
    if not isinstance(raw, str):
        raise BadRequest(f"invalid request: {name}: expected JSON text", [(name, "expected JSON")])
    try:
        return load_json(raw, name)
    except LimitError as exc:
        raise BadRequest(f"invalid request: {exc}", exc.errors) from None


def _ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 < x <= INT32_MAX for x in value
    ):
        raise BadRequest(
            f"invalid request: {name}: expected a list of positive ids", [(name, "list of ids")]
        )
    return list(value)


async def _read_form(request: Request) -> tuple[Any, dict[str, Any] | None, bytes | None]:
    async with request.form(max_part_size=MAX_CONTEXT_BYTES + 1) as form:
        config: dict[str, Any] | None = None
        text = form.get("config")
        if text is not None:
            if not isinstance(text, str):
                raise BadRequest("invalid request: config: expected text", [("config", "text")])
            try:
                config = load_yaml(text) if text.strip() else None
            except LimitError as exc:
                errors = [(f or "config", m) for f, m in exc.errors]
                raise BadRequest(f"invalid task config: {exc}", errors) from None
            if config is not None and not isinstance(config, dict):
                raise BadRequest(
                    "invalid task config: expected a mapping", [("config", "a mapping")]
                )
        context = form.get("context")
        data: bytes | None = None
        if context is not None:
            if isinstance(context, str):
                raise BadRequest(
                    "invalid request: context: expected a file", [("context", "expected a file")]
                )
            data = await read_upload(context)
        fields = {
            k: form.get(k)
            for k in ("entrypoint", "experiment_ids", "trial_ids", "workspace_id", "template_name")
        }
    if data is not None:
        await run_in_threadpool(check_context_archive, data)  # 400 unsafe, 413 too large
    return fields, config, data


async def _require_subjects(
    request: Request, experiment_ids: list[int], trial_ids: list[int], perm: Perm
) -> None:
    """Check that the experiments and trials a task names exist (404 naming the first
    that does not) and that the caller holds ``perm`` on each (403): a TensorBoard's
    sources (``VIEW_EXPERIMENT_ARTIFACTS``: their event files), or what a notebook,
    shell or command covers (``VIEW_EXPERIMENT_METADATA``: the task's row links them)."""
    subjects = [("experiment", e) for e in experiment_ids] + [("trial", t) for t in trial_ids]
    for kind, ident in subjects:
        source = await run_in_threadpool(authz.read_target, request, kind, ident)
        if source is None:
            raise NotFound(f"{kind} {ident} not found")
        authz.require(request, source, perm=perm)


def _make_create(family: str, task_type: str):
    async def create(request: Request, response: Response) -> dict[str, Any]:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media == "application/json" or (not media and speaks_determined(request)):
            # Determined's Launch...Request (its client sends no Content-Type)
            fields, config, context = await det_tasks.read_launch(request, task_type)
        else:
            fields, config, context = await _read_form(request)
        who = principal(request)
        owner = who.username or "determined"
        workspace_id = _workspace_id(fields)
        target = await run_in_threadpool(authz.read_target, request, "workspace", workspace_id)
        if target is None:
            raise NotFound(f"workspace {workspace_id} not found")
        authz.require(request, target)  # CREATE_NSC there
        template = fields.get("template_name")
        if template:  # merged under the config (reference §6.1)
            config = await run_in_threadpool(_with_template, request, config, template)
        entrypoint = None
        meta: dict[str, Any] = {}
        if task_type == "COMMAND":
            entrypoint = _json_field(fields, "entrypoint", None)
            if entrypoint is None:
                raise BadRequest(
                    "invalid task: entrypoint: a command to run",
                    [("entrypoint", "required: an argv list or a string")],
                )
        if task_type == "TENSORBOARD":
            exp_ids = _ids(_json_field(fields, "experiment_ids", []), "experiment_ids")
            trial_ids = _ids(_json_field(fields, "trial_ids", []), "trial_ids")
            exp_ids, trial_ids, logdirs = await run_in_threadpool(
                _read, request, task_services.tensorboard_logdirs, exp_ids, trial_ids
            )
            await _require_subjects(request, exp_ids, trial_ids, Perm.VIEW_EXPERIMENT_ARTIFACTS)
            found = await run_in_threadpool(
                _read, request, task_services.find_tensorboard, owner, exp_ids, trial_ids
            )
            if found is not None:
                response.status_code = 200
                if speaks_determined(request):
                    return det_tasks.launched(family, {"task": found, "warnings": []})
                return {"task": found, "warnings": [], "reused": True}
            meta = {"experiment_ids": exp_ids, "trial_ids": trial_ids, "logdirs": logdirs}
        else:  # what a notebook, shell or command covers, where its launcher says
            exp_ids = sorted(set(_ids(_json_field(fields, "experiment_ids", []), "experiment_ids")))
            trial_ids = sorted(set(_ids(_json_field(fields, "trial_ids", []), "trial_ids")))
            if exp_ids or trial_ids:
                await _require_subjects(request, exp_ids, trial_ids, Perm.VIEW_EXPERIMENT_METADATA)
                meta = {"experiment_ids": exp_ids, "trial_ids": trial_ids}
        if task_type == "SHELL":  # issue 34: its own key pair for its sshd
            ssh = request.app.state.ctx.config.security.ssh
            meta[META_KEY] = await run_in_threadpool(new_key_pair, ssh.key_type, ssh.rsa_key_size)
        answer = await run_in_threadpool(
            _write,
            request,
            tasks.create_task,
            task_type,
            owner,
            config,
            entrypoint,
            context,
            meta,
            workspace_id,
        )
        if speaks_determined(request):
            return det_tasks.launched(family, answer)
        answer["reused"] = False
        return answer

    create.__name__ = f"create_{family}"
    create.__doc__ = (
        f"Start a {task_type.lower()} (multipart form, see the module); 201 "
        '``{"task": Task, "warnings": [str], "reused": false}``'
        + (
            "; an existing TensorBoard of the same set answers 200 with reused true"
            if task_type == "TENSORBOARD"
            else ""
        )
        + "."
    )
    return create


def _with_template(request: Request, config: dict[str, Any] | None, name: Any) -> dict:
    """``config`` merged over template ``name`` (``VIEW_TEMPLATES`` on its workspace).

    Raises:
        BadRequest: not a name. NotFound: no such template. HTTPException: 403.
    """
    if not isinstance(name, str):
        raise BadRequest(
            "invalid request: template_name: a template name", [("template_name", "a name")]
        )
    return apply_template(template_for_use(request, name), config or {})


def _workspace_id(fields: dict[str, Any]) -> int:
    """The form's ``workspace_id`` (Uncategorized when absent).

    Raises:
        BadRequest: not an id.
    """
    raw = fields.get("workspace_id")
    if raw is None or raw == "":
        return UNCATEGORIZED_ID
    if isinstance(raw, str) and raw.strip().isdigit() and int(raw) <= INT32_MAX:
        return int(raw)
    raise BadRequest(
        "invalid request: workspace_id: expected a workspace id", [("workspace_id", "an id")]
    )


def _make_list(family: str, task_type: str):
    def list_family(
        request: Request,
        workspace_id: int | None = Query(None, ge=0, le=INT32_MAX, description="only its"),
        offset: int = Query(0, ge=0, le=INT32_MAX),
        limit: int = Query(0, ge=0, le=10_000, description="0: every one"),
    ) -> dict[str, Any]:
        scope = authz.visible(request)
        if not speaks_determined(request):
            return _read(
                request, tasks.read_tasks, task_type, None, scope, workspace_id, offset, limit
            )
        # Determined's GetCommandsRequest and siblings: workspaceId, users, userIds.
        q = request.query_params
        if q.get("workspaceId"):
            workspace_id = det_tasks.query_int(q["workspaceId"], "workspaceId")
        users = set(q.getlist("users"))
        user_ids = {det_tasks.query_int(x, "userIds") for x in q.getlist("userIds")}
        found = _read(
            request, tasks.read_tasks, task_type, None, scope, workspace_id, offset, limit
        )
        items = [
            det_shapes_tasks.ntsc(t, f"{TASK_PREFIX}{t['id']}")
            for t in found["tasks"]
            if (not users or t["owner"] in users) and (not user_ids or t["user_id"] in user_ids)
        ]
        return JSONResponse({family: items})  # type: ignore[return-value]

    list_family.__name__ = f"list_{task_type.lower()}s"
    list_family.__doc__ = (
        f"The {task_type.lower()} tasks the caller may view, oldest first (Determined's "
        "``users``/``userIds``/``workspaceId`` filters and shape in its dialect)."
    )
    return list_family


for _family, _type in FAMILIES.items():
    router.add_api_route(
        f"/{_family}",
        _make_create(_family, _type),
        methods=["POST"],
        status_code=201,
        response_model=R.TaskCreated,
        responses=(
            {
                200: {
                    "model": R.TaskCreated,
                    "description": "an existing TensorBoard of the same set, reused",
                }
            }
            if _type == "TENSORBOARD"
            else None
        ),
    )
    router.add_api_route(
        f"/{_family}", _make_list(_family, _type), methods=["GET"], response_model=R.TasksOut
    )


@router.get("/tasks", response_model=R.TasksOut)
def list_tasks(
    request: Request,
    type: str | None = Query(None, description="COMMAND, NOTEBOOK, SHELL or TENSORBOARD"),
    owner: str | None = Query(None, max_length=256, description="only this user's tasks"),
    workspace_id: int | None = Query(None, ge=0, le=INT32_MAX, description="only its tasks"),
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(0, ge=0, le=10_000, description="0: every one"),
) -> dict[str, Any]:
    """A page of the generic tasks the caller may view (``VIEW_NSC``), oldest first, and
    how many matched."""
    scope = authz.visible(request)
    kind = type.upper() if type else None
    return _read(request, tasks.read_tasks, kind, owner, scope, workspace_id, offset, limit)


@router.get("/tasks/{task_id}", response_model=R.TaskBody)
def get_task(task_id: str, request: Request) -> dict[str, Any]:
    """One task, with Determined's ``Task`` fields beside (``taskId``, ``taskType``,
    ``allocations`` with ``isReady``; no name clashes)."""
    view = _read(request, tasks.read_task_view, task_id)
    return {"task": view | det_shapes_tasks.generic_task(view)}


def _own_task_token(request: Request, task_id: str, what: str) -> None:
    """A task's session token may act only on its own task (users were checked by the
    permission table)."""
    who = principal(request)
    _read(request, tasks.read_task, task_id)  # NotFound first: 404 beats 403 for an unknown id
    if who.kind == "trial" and who.task_id != task_id:
        raise forbidden(f"a task's session token may {what} only its own task, not {task_id}")


@router.get("/shells/{task_id}/ssh_key", response_model=R.ShellKeyOut)
def shell_ssh_key(task_id: str, request: Request) -> dict[str, Any]:
    """A shell's SSH key pair (OpenSSH formats), for its owner only (403 for anyone
    else, admins included; 404 for another kind of task); :mod:`.shell_ssh`."""
    row = _read(request, tasks.read_task, task_id)
    try:
        return owner_key(row, principal(request))
    except NotOwner as exc:
        raise forbidden(str(exc)) from None


class _Kill(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="killed", max_length=500)


@router.post("/tasks/{task_id}/kill", response_model=R.TaskBody)
def kill_task(task_id: str, request: Request, body: _Kill | None = None) -> dict[str, Any]:
    """Kill a task (its owner, an admin, or the task itself, e.g. when idle)."""
    _own_task_token(request, task_id, "kill")
    return {"task": _write(request, tasks.kill_task, task_id, (body or _Kill()).reason)}


def _make_kill(family: str):
    def kill_family(task_id: str, request: Request) -> dict[str, Any]:
        return {"task": _write(request, tasks.kill_task, task_id)}

    kill_family.__name__ = f"kill_{family}"
    kill_family.__doc__ = f"Kill a task (the ``/{family}`` spelling of ``/tasks/{{id}}/kill``)."
    return kill_family


for _family in FAMILIES:
    router.add_api_route(
        f"/{_family}/{{task_id}}/kill",
        _make_kill(_family),
        methods=["POST"],
        response_model=R.TaskBody,
    )


@router.get("/tasks/{task_id}/logs", response_model=R.TaskLogsOut)
def task_logs(
    task_id: str,
    request: Request,
    after_id: int = Query(0, ge=0, le=2**63 - 1),
    limit: int = Query(1000, ge=1, le=10_000),
) -> dict[str, Any]:
    """A task's log lines with ids above ``after_id``; poll with the last id to follow.
    In Determined's dialect its ``TaskLogs`` stream
    (:func:`dauntless.master.routes_det_tasks.task_logs`)."""
    if speaks_determined(request):
        return det_tasks.task_logs(request, task_id)  # type: ignore[return-value]
    return _read(request, tasks.read_task_logs, task_id, after_id, limit)


@router.get("/tasks/{task_id}/context")
def task_context(task_id: str, request: Request) -> Response:
    """The task's context directory (gzipped tar) for its agent, its owner or an admin;
    404 when it has none."""
    who = principal(request)
    if who.kind == "agent" and who.agent_id is not None:  # only the agent it was placed on
        with _ctx(request).db.read() as s:
            agent_models.runs_work_of(s, who.agent_id, who.part_id, task_id=task_id)
    data = _read(request, tasks.read_task_context, task_id)
    if data is None:
        raise NotFound(f"task {task_id} has no context directory")
    return Response(data, media_type="application/gzip")


class _Service(BaseModel):
    model_config = ConfigDict(extra="forbid")
    addr: str | None = Field(default=None, max_length=256)
    port: int | None = Field(default=None, ge=1, le=65535)
    error: str | None = Field(default=None, max_length=4000)


@router.post("/tasks/{task_id}/service", response_model=R.Empty)
def task_service(task_id: str, body: _Service, request: Request) -> dict[str, Any]:
    """The task's own process reports where its service listens, or why it could not
    start it (only with the task's session token)."""
    who = principal(request)
    if who.kind != "trial" or who.task_id != task_id or who.allocation_id is None:
        raise forbidden(f"only task {task_id}'s own session token may report its service")
    if body.error is None and (body.addr is None or body.port is None):
        raise BadRequest(
            "invalid request: give addr and port, or error", [("port", "required with addr")]
        )
    _write(
        request,
        task_services.service_ready,
        task_id,
        who.allocation_id,
        body.addr,
        body.port,
        body.error,
    )
    return {}
