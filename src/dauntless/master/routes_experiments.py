"""REST routes of experiments under ``/api/v1``: create, list, read (trials,
checkpoints, model definition), actions, edit and delete (docs/protocol.md).

Split out of :mod:`dauntless.master.routes`, which keeps the error handlers and the
JSON view helpers the route modules share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from . import authz, det_create
from . import responses as R
from . import routes_det_experiments as det_views
from .api_spec import INT32_MAX, DbId, method_not_allowed
from .auth import principal
from .context import MasterContext
from .context_archive import read_upload
from .det_dialect import speaks_determined
from .errors import BadRequest, NotFound
from .models import agents, experiment_reads, experiments, lifecycle, projects
from .models.experiment_checks import check_experiment
from .rbac import Perm
from .routes import (
    _checkpoint_views,
    _ctx,
    _experiment_views,
    _get_experiment,
    _read,
    trial_list_response,
    trial_view_pages,
)
from .schemas import PatchExperiment
from .stream_framing import dumps_json

router = APIRouter(prefix="/api/v1")


_CREATE_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["config"],
                    "properties": {
                        "config": {
                            "type": "string",
                            "description": "the experiment config, YAML text",
                        },
                        "context": {
                            "type": "string",
                            "format": "binary",
                            "description": "the context directory, tar.gz",
                        },
                        "activate": {"type": "boolean", "default": True},
                        "validate_only": {"type": "boolean", "default": False},
                        "template": {
                            "type": "string",
                            "description": "a config template merged under the config",
                        },
                    },
                }
            }
        },
    }
}

_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def _form_bool(form: Any, name: str, default: bool) -> bool:
    value = form.get(name)
    if value is None:
        return default
    text = value.strip().lower() if isinstance(value, str) else ""
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise BadRequest(
        f"invalid request: {name}: expected true or false", [(name, "expected true or false")]
    )


@router.post(
    "/experiments",
    status_code=201,
    openapi_extra=_CREATE_FORM,
    response_model=R.ExperimentCreated,
)
async def create_experiment(request: Request) -> dict[str, Any]:
    """Submit an experiment: its config and context directory (multipart form: ``config``,
    ``context``, ``activate``, ``validate_only``, ``parent_id``: fork, the parent's
    context when none is sent; ``template``: a config template merged under the config,
    reference §6.1).

    The answer is ``{"experiment": ..., "warnings": [...]}``: one warning per deprecated
    or ignored config field (``dauntless.config.config_warnings``).

    The form is read here, after authentication: declared as form parameters it would be
    parsed (a context of up to 95 MiB spooled to disk) before the caller is known.
    """
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media in ("", "application/json"):
        # Determined's CreateExperimentRequest as JSON (its client sends no Content-Type).
        det = await det_create.read_create(request)
        config, data, activate = det.config, det.context, det.activate
        validate_only, parent_id, project_id = det.validate_only, det.parent_id, det.project_id
        template = None  # Determined's client names no template here
    else:
        form = await _read_form(request)
        config, data, activate, validate_only, parent_id, project_id, template = form
    ctx = _ctx(request)
    owner = principal(request)
    if template:  # merged under the config before anything reads it (reference §6.1)
        config = await run_in_threadpool(_with_template, request, config, template)
    project = await run_in_threadpool(_authorize_create, request, config, project_id, parent_id)
    if validate_only:  # every check of create (experiment_checks), nothing stored
        await run_in_threadpool(
            check_experiment, ctx, config, data, parent_id, owner.username or "determined", project
        )
        return {"experiment": None, "warnings": _config_warnings(config)}
    exp_id = await run_in_threadpool(
        experiments.create_experiment,
        ctx,
        config,
        data,
        activate,
        owner.username or "determined",
        parent_id,
        project,
    )
    if speaks_determined(request):
        created = det_views.experiment_created(request, exp_id, _config_warnings(config))
        return created  # type: ignore[return-value]
    with ctx.db.read() as s:
        exp = _get_experiment(s, exp_id)
        view = _experiment_views(s, [exp])[0]
    return {"experiment": view, "warnings": _config_warnings(config)}


async def _read_form(
    request: Request,
) -> tuple[str, bytes | None, bool, bool, int | None, int | None, str | None]:
    """Dauntless's multipart create form: config, context, activate, validate_only,
    parent_id, project_id, template (a config template's name)."""
    async with request.form(max_files=1, max_fields=16) as form:
        config = form.get("config")
        if not isinstance(config, str):
            raise BadRequest(
                "invalid request: config: Field required", [("config", "Field required")]
            )
        activate = _form_bool(form, "activate", True)
        validate_only = _form_bool(form, "validate_only", False)
        parent_id = _form_int(form, "parent_id")
        project_id = _form_int(form, "project_id")
        template = form.get("template")
        if template is not None and not isinstance(template, str):
            raise BadRequest("invalid request: template: expected a name", [("template", "text")])
        context = form.get("context")
        if isinstance(context, str):
            raise BadRequest(
                "invalid request: context: expected a file", [("context", "expected a file")]
            )
        data = None if context is None else await read_upload(context)
    return config, data, activate, validate_only, parent_id, project_id, template


def _authorize_create(
    request: Request, config: str, project_id: int | None, parent_id: int | None
) -> int:
    """The project the new experiment goes to (``project_id``, else the config's
    ``workspace`` and ``project``, else Uncategorized), once the caller may create
    experiments there and may read what it starts from (a forked experiment's model
    definition, a warm-start checkpoint: ``VIEW_EXPERIMENT_ARTIFACTS``).

    Raises:
        BadRequest: a config over the parsing limits or not YAML (naming the field),
            ``workspace``/``project`` not text, or only one given.
        NotFound: no such project.
        HTTPException: 403 naming the permission.
    """
    from dauntless.config import LimitError, load_yaml

    try:
        raw = load_yaml(config)  # within the parsing limits, as create parses it
    except LimitError as exc:
        raise BadRequest("invalid experiment config", exc.errors) from None
    raw = raw if isinstance(raw, dict) else {}
    names = []
    for key in ("workspace", "project"):
        value = raw.get(key) or ""
        if not isinstance(value, str):
            raise BadRequest("invalid experiment config", [(key, "a name (text)")])
        names.append(value)
    with _ctx(request).db.read() as s:
        project = projects.project_for_create(s, project_id, names[0], names[1])
        target = authz.project_target(s, project)
        sources = [parent_id] if parent_id is not None else []
        searcher = raw.get("searcher")
        searcher = searcher if isinstance(searcher, dict) else {}
        sources += experiment_reads.warm_start_experiments(
            s, searcher.get("source_trial_id"), searcher.get("source_checkpoint_uuid")
        )
        source_targets = [authz.experiment_target(s, e) for e in sources]
    authz.require(request, target)
    for source in source_targets:
        if source is not None:
            authz.require(request, source, perm=Perm.VIEW_EXPERIMENT_ARTIFACTS)
    return project


def _with_template(request: Request, config: str, template: Any) -> str:
    """The config text with template ``template`` merged under it.

    Raises:
        BadRequest: ``template`` not a name, a config over the parsing limits or not a
            mapping. NotFound: no such template. HTTPException: 403 without
            ``VIEW_TEMPLATES`` on the template's workspace.
    """
    import yaml

    from dauntless.config import LimitError, load_yaml

    from .models.templates import apply_template
    from .routes_templates import template_for_use

    if not isinstance(template, str):
        raise BadRequest("invalid request: template: a template name", [("template", "a name")])
    row = template_for_use(request, template)
    try:
        raw = load_yaml(config) or {}
    except LimitError as exc:
        raise BadRequest("invalid experiment config", exc.errors) from None
    if not isinstance(raw, dict):
        raise BadRequest("invalid experiment config: expected a mapping", [("", "a mapping")])
    return yaml.safe_dump(apply_template(row, raw), sort_keys=False)


def _config_warnings(config: str) -> list[str]:
    from dauntless.config import config_warnings, load_yaml

    raw = load_yaml(config)  # already parsed once by create: valid and within limits
    return config_warnings(raw) if isinstance(raw, dict) else []


def _form_int(form: Any, name: str) -> int | None:
    value = form.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if not 0 <= number <= INT32_MAX:
        raise BadRequest(
            f"invalid request: {name}: expected an id (0 .. 2**31 - 1)", [(name, "an id")]
        )
    return number


@router.get("/experiments/{exp_id}", response_model=R.ExperimentDetail)
def get_experiment(exp_id: DbId, request: Request) -> dict[str, Any]:
    """One experiment with its trials (Determined's shape to its client)."""
    if speaks_determined(request):
        return det_views.experiment(request, exp_id)  # type: ignore[return-value]
    ctx = _ctx(request)
    with ctx.db.read() as s:
        view = _experiment_views(s, [_get_experiment(s, exp_id)])[0]
    return trial_list_response(ctx, exp_id, view)  # type: ignore[return-value]


def experiment_detail_json(request: Request, exp_id: int) -> Iterator[str]:
    """The live stream's ``experiment`` event (:mod:`.routes_stream`): the JSON text
    :func:`~.stream_framing.dumps_json` writes of ``{"experiment": view, "trials":
    [trial views]}``, in pieces: the experiment, then its trials a page
    (:data:`~.routes.TRIAL_PAGE`) at a time, each page read in a read session of its
    own (issue 37: built whole, the body of a 10,000-trial experiment was held at once,
    and the last one sent stayed held for the stream's life). The experiment is read
    first: its ``num_trials`` may miss trials created while the pages are read.

    Raises:
        NotFound: no such experiment (when the first piece is asked for).
    """
    ctx = _ctx(request)
    with ctx.db.read() as s:
        view = _experiment_views(s, [_get_experiment(s, exp_id)])[0]
    yield '{"experiment":' + dumps_json(view) + ',"trials":['
    sep = ""
    for views in trial_view_pages(ctx, exp_id):
        yield sep + ",".join(dumps_json(v) for v in views)
        sep = ","
    yield "]}"


@router.get("/experiments/{exp_id}/trials", response_model=R.TrialsOut)
def get_experiment_trials(exp_id: DbId, request: Request) -> dict[str, Any]:
    """The trials of an experiment (Determined's shape to its client)."""
    if speaks_determined(request):
        return det_views.experiment_trials(request, exp_id)  # type: ignore[return-value]
    ctx = _ctx(request)
    with ctx.db.read() as s:
        _get_experiment(s, exp_id)
    return trial_list_response(ctx, exp_id)  # type: ignore[return-value]


@router.get("/experiments/{exp_id}/checkpoints", response_model=R.CheckpointsOut)
def get_experiment_checkpoints(exp_id: DbId, request: Request) -> dict[str, Any]:
    """The checkpoints of an experiment, oldest first."""
    with _ctx(request).db.read() as s:
        exp = _get_experiment(s, exp_id)
        rows = experiment_reads.experiment_checkpoints(s, exp_id)
        if speaks_determined(request):
            return det_views.checkpoints_of(request, exp, rows, s)  # type: ignore[return-value]
        return {"checkpoints": _checkpoint_views(s, exp, rows)}


@router.get("/experiments/{exp_id}/model_def")
def get_model_def(exp_id: DbId, request: Request) -> Response:
    """The experiment's context directory as a gzipped tar (for an agent: only of an
    experiment one of whose trials it runs)."""
    who = principal(request)
    if who.kind == "agent" and who.agent_id is not None:
        _read(request, agents.runs_work_of, who.agent_id, who.part_id, exp_id)
    content = _read(request, experiments.model_definition, exp_id)
    if content is None:
        raise NotFound(f"experiment {exp_id} was created without a context directory")
    return Response(content=content, media_type="application/gzip")


_ACTIONS: dict[str, Callable[[Session, MasterContext, int], None]] = {
    "pause": lifecycle.pause_experiment,
    "activate": lifecycle.activate_experiment,
    "cancel": lifecycle.cancel_experiment,
    "kill": lambda s, c, i: lifecycle.cancel_experiment(s, c, i, kill=True),
    "archive": lambda s, c, i: experiments.archive_experiment(s, c, i, True),
    "unarchive": lambda s, c, i: experiments.archive_experiment(s, c, i, False),
}
"""The experiment actions: model functions run in one write transaction."""


def _experiment_json(ctx: MasterContext, exp_id: int) -> dict[str, Any]:
    with ctx.db.read() as s:
        return {"experiment": _experiment_views(s, [_get_experiment(s, exp_id)])[0]}


@router.post("/experiments/{exp_id}/{action}", response_model=R.ExperimentBody)
def experiment_action(exp_id: DbId, action: str, request: Request) -> dict[str, Any]:
    """pause | activate | cancel | kill | archive | unarchive an experiment.

    Illegal for the experiment's state: 409 naming the state and what is allowed.
    """
    fn = _ACTIONS.get(action)
    if fn is None:
        # e.g. POST /experiments/1/trials: a path served by GET is 405, not "no action".
        wrong_method = method_not_allowed(request.app, request.scope, skip=experiment_action)
        if wrong_method is not None:
            return wrong_method  # type: ignore[return-value]
        raise NotFound(f"no experiment action {action!r}; one of {sorted(_ACTIONS)}")
    ctx = _ctx(request)
    ctx.write(fn, exp_id)
    return _experiment_json(ctx, exp_id)


@router.patch("/experiments/{exp_id}", response_model=R.ExperimentBody)
def patch_experiment(exp_id: DbId, body: PatchExperiment, request: Request) -> dict[str, Any]:
    """Edit name, description, notes (Markdown) or labels (the whole set), or set the
    checkpoint GC policy (collects at once)."""
    ctx = _ctx(request)
    gc = body.checkpoint_storage.model_dump(exclude_none=True) if body.checkpoint_storage else None
    res = body.resources.model_dump(exclude_none=True) if body.resources else None
    experiments.patch_experiment(
        ctx,
        exp_id,
        body.name,
        body.description,
        gc or None,
        res or None,
        notes=body.notes,
        labels=body.labels,
    )
    return _experiment_json(ctx, exp_id)


@router.delete("/experiments/{exp_id}", response_model=R.Empty)
def delete_experiment(exp_id: DbId, request: Request) -> dict[str, Any]:
    """Delete a finished experiment: checkpoints from storage, then every row."""
    experiments.delete_experiment(_ctx(request), exp_id)
    return {}
