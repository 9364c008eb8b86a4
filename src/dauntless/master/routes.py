"""REST routes under ``/api/v1`` (docs/protocol.md).

Routes are thin: they parse the request, call the :class:`ExperimentManager` (which owns
the transaction) or run a read query, and return JSON views. Domain errors map to HTTP
statuses once, in :func:`install_error_handlers`.

Who may call each route is declared next to it with ``@access(...)``
(:mod:`dauntless.master.auth`; a route without one is for any signed-in user) and checked
by the application-wide dependency before the route runs.
"""

from __future__ import annotations

import asyncio
import os
import tarfile
import tempfile
import time
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

import dauntless

from .auth import access, principal, require_own_trial
from .db import (
    AgentRow,
    AllocationRow,
    CheckpointRow,
    ClusterRow,
    ExperimentRow,
    MetricRow,
    ModelDefinitionRow,
    TaskLogRow,
    TrialRow,
)
from .lifecycle import Conflict
from .manager import MAX_CONTEXT_BYTES, BadRequest, ExperimentManager, MetricsIn, NotFound
from .schemas import (
    AgentSwitch,
    AllocationExited,
    CheckpointReport,
    CompletedOperation,
    EarlyExit,
    Heartbeat,
    LogBatch,
    MetricsReport,
    MetricsReportBatch,
    PatchExperiment,
    ProgressReport,
    RegisterAgent,
    RendezvousIn,
    agent_view,
    checkpoint_view,
    experiment_view,
    log_view,
    metric_view,
    trial_view,
)
from .states import IllegalTransition

router = APIRouter(prefix="/api/v1")

PREEMPTION_CHECK_SECONDS = 0.25
"""How often a waiting preemption long poll checks, in memory, whether its allocation's
rows changed (and whether its caller left): the signal's latency."""
PREEMPTION_REREAD_SECONDS = 5.0
"""How often a waiting preemption long poll reads its allocation from the database even
though no change was seen (changes the ORM does not report, such as a cascade delete)."""


def _mgr(request: Request) -> ExperimentManager:
    return request.app.state.manager


def _error(status: int, detail: str, errors: list[tuple[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"detail": detail}
    if errors:
        body["errors"] = [{"field": f, "message": m} for f, m in errors]
    return JSONResponse(status_code=status, content=body)


def install_error_handlers(app: FastAPI) -> None:
    """Map domain errors to statuses: NotFound 404, BadRequest 400, IllegalTransition 409,
    request validation 400 (with the field path of each problem)."""

    @app.exception_handler(NotFound)
    async def _not_found(_req: Request, exc: NotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(BadRequest)
    async def _bad(_req: Request, exc: BadRequest) -> JSONResponse:
        return _error(400, str(exc), exc.errors)

    @app.exception_handler(Conflict)
    async def _conflict_state(_req: Request, exc: Conflict) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(IllegalTransition)
    async def _conflict(_req: Request, exc: IllegalTransition) -> JSONResponse:
        resp = _error(409, str(exc))
        return resp

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
            msg = err.get("msg", "invalid")
            if err.get("type") == "extra_forbidden":
                msg = "unknown field"
            errors.append((".".join(loc), msg))
        return _error(400, "invalid request: " + "; ".join(f"{f}: {m}" for f, m in errors), errors)


# ---------------------------------------------------------------------- helpers


def _storage_dir(config: dict[str, Any], uuid: str) -> str | None:
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "shared_fs":
        return os.path.join(storage["host_path"], storage.get("storage_path") or "", uuid)
    if storage.get("type") == "directory":
        return os.path.join(storage["container_path"], uuid)
    return None


def _latest_validations(s: Session, trial_ids: list[int]) -> dict[int, dict[str, Any]]:
    if not trial_ids:
        return {}
    latest = (
        select(MetricRow.trial_id, func.max(MetricRow.total_batches).label("tb"))
        .where(MetricRow.trial_id.in_(trial_ids), MetricRow.kind == "validation")
        .group_by(MetricRow.trial_id)
        .subquery()
    )
    rows = s.execute(
        select(MetricRow).join(
            latest,
            (MetricRow.trial_id == latest.c.trial_id) & (MetricRow.total_batches == latest.c.tb),
        ).where(MetricRow.kind == "validation")
    ).scalars()
    return {m.trial_id: m.values for m in rows}


def _experiment_views(s: Session, exps: list[ExperimentRow]) -> list[dict[str, Any]]:
    ids = [e.id for e in exps]
    counts: dict[int, int] = {}
    bests: dict[int, list[float]] = {}
    if ids:
        for exp_id, best in s.execute(
            select(TrialRow.experiment_id, TrialRow.best_validation).where(
                TrialRow.experiment_id.in_(ids)
            )
        ):
            counts[exp_id] = counts.get(exp_id, 0) + 1
            if best is not None:
                bests.setdefault(exp_id, []).append(best)
    out = []
    for e in exps:
        values = bests.get(e.id)
        smaller = e.config.get("searcher", {}).get("smaller_is_better", True)
        best = (min(values) if smaller else max(values)) if values else None
        out.append(experiment_view(e, counts.get(e.id, 0), best))
    return out


def _get_experiment(s: Session, exp_id: int) -> ExperimentRow:
    exp = s.get(ExperimentRow, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


def _get_trial(s: Session, trial_id: int) -> TrialRow:
    trial = s.get(TrialRow, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def _checkpoint_views(
    s: Session, exp: ExperimentRow, rows: list[CheckpointRow]
) -> list[dict[str, Any]]:
    """Checkpoint JSON with ``searcher_metric``: the validation value at the same batches."""
    metric = exp.config.get("searcher", {}).get("metric")
    values: dict[tuple[int, int], Any] = {}
    trial_ids = sorted({c.trial_id for c in rows})
    if trial_ids and metric:
        for m in s.scalars(select(MetricRow).where(
            MetricRow.trial_id.in_(trial_ids), MetricRow.kind == "validation")
        ):
            values[(m.trial_id, m.total_batches)] = m.values.get(metric)
    out = []
    for c in rows:
        view = checkpoint_view(c, _storage_dir(exp.config, c.uuid))
        view["searcher_metric"] = values.get((c.trial_id, c.total_batches))
        out.append(view)
    return out


def _trial_views(s: Session, trials: list[TrialRow]) -> list[dict[str, Any]]:
    latest = _latest_validations(s, [t.id for t in trials])
    return [trial_view(t, latest.get(t.id)) for t in trials]


# ---------------------------------------------------------------------- cluster


@router.get("/master")
@access(open=True)
def get_master(request: Request) -> dict[str, Any]:
    """Version and identity of this master."""
    mgr = _mgr(request)
    with mgr.db.read() as s:
        cluster = s.scalar(select(ClusterRow))
    return {
        "version": dauntless.__version__,
        "cluster_name": mgr.config.cluster_name,
        "cluster_id": cluster.cluster_id if cluster else None,
    }


@router.get("/agents")
@access(agent=True)
def list_agents(request: Request) -> dict[str, Any]:
    """Every agent with its slots and which allocation holds each."""
    with _mgr(request).db.read() as s:
        used: dict[str, dict[str, str]] = {}
        for alloc in s.scalars(select(AllocationRow).where(AllocationRow.state != "TERMINATED")):
            for sid in alloc.slot_ids:
                used.setdefault(alloc.agent_id, {})[str(sid)] = alloc.id
        agents = s.scalars(select(AgentRow).order_by(AgentRow.id)).all()
        return {"agents": [agent_view(a, used.get(a.id, {})) for a in agents]}


@router.post("/agents")
@access(users="admin", agent=True, what="register agents")
def register_agent(body: RegisterAgent, request: Request) -> dict[str, Any]:
    """An agent announces itself and its slots."""
    agent = _mgr(request).register_agent(
        body.id, body.resource_pool, body.hostname, [sl.model_dump() for sl in body.slots]
    )
    return {"agent": agent_view(agent, {})}


@router.post("/agents/{agent_id}/enable")
@access(users="admin", what="enable agents")
def enable_agent(agent_id: str, request: Request) -> dict[str, Any]:
    """Let the scheduler use this agent again."""
    return _agent_json(request, _mgr(request).set_agent_enabled(agent_id, True).id)


@router.post("/agents/{agent_id}/disable")
@access(users="admin", what="disable agents")
def disable_agent(agent_id: str, request: Request, body: AgentSwitch | None = None) -> dict:
    """No new work on this agent; without ``drain`` its trials are preempted now."""
    drain = body.drain if body else False
    return _agent_json(request, _mgr(request).set_agent_enabled(agent_id, False, drain).id)


@router.post("/agents/{agent_id}/slots/{slot_id}/{action}")
@access(users="admin", what="{action} slots")
def switch_slot(agent_id: str, slot_id: str, action: str, request: Request) -> dict[str, Any]:
    """``enable`` or ``disable`` one slot of an agent."""
    if action not in ("enable", "disable"):
        raise NotFound(f"no slot action {action!r}; use enable or disable")
    _mgr(request).set_slot_enabled(agent_id, slot_id, action == "enable")
    return _agent_json(request, agent_id)


@router.get("/resource-pools")
@access(agent=True)
def list_resource_pools(request: Request) -> dict[str, Any]:
    """Declared pools with their schedulers and slots used and free."""
    return {"resource_pools": _mgr(request).resource_pools()}


def _agent_json(request: Request, agent_id: str) -> dict[str, Any]:
    with _mgr(request).db.read() as s:
        agent = s.get(AgentRow, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        used: dict[str, str] = {}
        for alloc in s.scalars(select(AllocationRow).where(
            AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED")):
            for sid in alloc.slot_ids:
                used[str(sid)] = alloc.id
        return {"agent": agent_view(agent, used)}


@router.post("/agents/{agent_id}/heartbeat")
@access(users="none", agent=True, what="heartbeat for agents")
def agent_heartbeat(agent_id: str, body: Heartbeat, request: Request) -> dict[str, Any]:
    """Liveness plus work: returns tasks to start and allocations to kill."""
    return _mgr(request).heartbeat(agent_id, body.running)


@router.post("/allocations/{allocation_id}/exited")
@access(users="none", agent=True, what="report task exits")
def allocation_exited(allocation_id: str, body: AllocationExited, request: Request) -> dict:
    """The agent reports that a task's process ended."""
    _mgr(request).allocation_exited(allocation_id, body.exit_code, body.message)
    return {}


@router.get("/allocations/{allocation_id}/signals/preemption")
@access(trial="own")
async def preemption_signal(
    allocation_id: str, request: Request, timeout_seconds: float = Query(0, ge=0, le=60)
) -> dict[str, bool]:
    """Whether the allocation should checkpoint and exit now.

    A long poll: answers as soon as the signal is set, or ``false`` after
    ``timeout_seconds`` (0: at once).
    """
    mgr = _mgr(request)
    versions = mgr.allocation_versions
    deadline = time.monotonic() + timeout_seconds
    while True:
        seen = versions.version(allocation_id)
        preempt = await run_in_threadpool(mgr.preemption_signal, allocation_id)
        read_at = time.monotonic()
        # Until the allocation's rows change (an in-memory check), the deadline, or
        # PREEMPTION_REREAD_SECONDS for changes the ORM does not see (a cascade delete).
        while True:
            now = time.monotonic()
            if preempt or now >= deadline or await request.is_disconnected():
                return {"preempt": preempt}
            if versions.version(allocation_id) != seen or now - read_at >= PREEMPTION_REREAD_SECONDS:
                break
            await asyncio.sleep(min(PREEMPTION_CHECK_SECONDS, deadline - now))


@router.post("/allocations/{allocation_id}/rendezvous")
@access(users="none", trial="own", what="publish a rendezvous")
def post_rendezvous(allocation_id: str, body: RendezvousIn, request: Request) -> dict:
    """The chief launcher of a distributed allocation says where its ranks meet."""
    _mgr(request).set_rendezvous(allocation_id, body.addr, body.port)
    return {}


@router.get("/allocations/{allocation_id}/rendezvous")
@access(trial="own")
async def get_rendezvous(
    allocation_id: str, request: Request, timeout_seconds: float = Query(0, ge=0, le=60)
) -> dict[str, Any]:
    """The chief's address (long poll until it is known, up to ``timeout_seconds``);
    ``{"rendezvous": null}`` if it is not known yet."""
    mgr = _mgr(request)
    deadline = time.monotonic() + timeout_seconds
    while True:
        info = await run_in_threadpool(mgr.rendezvous, allocation_id)
        if info is not None or time.monotonic() >= deadline or await request.is_disconnected():
            return {"rendezvous": info}
        await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


@router.post("/task/logs")
@access(users="none", agent=True, what="ship task logs")
def post_logs(body: LogBatch, request: Request) -> dict[str, int]:
    """Agents ship task output here in batches."""
    n = _mgr(request).ingest_logs([line.model_dump() for line in body.logs])
    return {"stored": n}


# ---------------------------------------------------------------------- experiments


_CREATE_FORM = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object",
            "required": ["config"],
            "properties": {
                "config": {"type": "string", "description": "the experiment config, YAML text"},
                "context": {"type": "string", "format": "binary",
                            "description": "the context directory, tar.gz"},
                "activate": {"type": "boolean", "default": True},
                "validate_only": {"type": "boolean", "default": False},
            },
        }}},
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
    raise BadRequest(f"invalid request: {name}: expected true or false",
                     [(name, "expected true or false")])


@router.post("/experiments", status_code=201, openapi_extra=_CREATE_FORM)
async def create_experiment(request: Request) -> dict[str, Any]:
    """Submit an experiment: its config and context directory (multipart form: ``config``,
    ``context``, ``activate``, ``validate_only``).

    The form is read here, after authentication: declared as form parameters it would be
    parsed (a context of up to 95 MiB spooled to disk) before the caller is known.
    """
    async with request.form(max_files=1, max_fields=16) as form:
        config = form.get("config")
        if not isinstance(config, str):
            raise BadRequest("invalid request: config: Field required",
                             [("config", "Field required")])
        activate = _form_bool(form, "activate", True)
        validate_only = _form_bool(form, "validate_only", False)
        context = form.get("context")
        if isinstance(context, str):
            raise BadRequest("invalid request: context: expected a file",
                             [("context", "expected a file")])
        data: bytes | None = None
        if context is not None:
            chunks, total = [], 0
            while chunk := await context.read(1 << 20):
                total += len(chunk)
                if total > MAX_CONTEXT_BYTES:
                    raise BadRequest(
                        f"the context directory is over the {MAX_CONTEXT_BYTES}-byte (95 MiB) "
                        "limit; keep data sets out of it (.detignore)"
                    )
                chunks.append(chunk)
            data = b"".join(chunks)
    mgr = _mgr(request)
    if validate_only:
        from dauntless.config import ConfigError, parse_experiment_config

        try:
            parse_experiment_config(config)
        except ConfigError as exc:
            raise BadRequest("invalid experiment config", exc.errors) from None
        return {"experiment": None}
    owner = principal(request)
    exp_id = await run_in_threadpool(
        mgr.create_experiment, config, data, activate, owner.username or "determined"
    )
    with mgr.db.read() as s:
        exp = _get_experiment(s, exp_id)
        return {"experiment": _experiment_views(s, [exp])[0]}


@router.get("/experiments")
def list_experiments(
    request: Request,
    archived: str = Query(
        "false", pattern="^(true|false|all)$",
        description="false (default): hide archived; true: only archived; all: both",
    ),
    limit: int = Query(100, ge=1, le=10_000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Experiments, newest first, as ``{"experiments": [...], "total": N}``."""
    which = {"true": True, "false": False, "all": None}[archived]
    return experiments_page(request, which, limit, offset)


def experiments_page(
    request: Request, archived: bool | None, limit: int, offset: int
) -> dict[str, Any]:
    """The body of ``GET /experiments``.

    Args:
        archived: True: archived only; False: unarchived only; None: both.
        limit: at most this many experiments (newest first).
        offset: skip this many first.
    """
    with _mgr(request).db.read() as s:
        q = select(ExperimentRow)
        if archived is not None:
            q = q.where(ExperimentRow.archived == archived)
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        exps = s.scalars(q.order_by(ExperimentRow.id.desc()).limit(limit).offset(offset)).all()
        return {"experiments": _experiment_views(s, list(exps)), "total": total}


@router.get("/experiments/{exp_id}")
@access(trial="own")
def get_experiment(exp_id: int, request: Request) -> dict[str, Any]:
    """One experiment with its trials."""
    with _mgr(request).db.read() as s:
        exp = _get_experiment(s, exp_id)
        trials = s.scalars(
            select(TrialRow).where(TrialRow.experiment_id == exp_id).order_by(TrialRow.id)
        ).all()
        return {"experiment": _experiment_views(s, [exp])[0], "trials": _trial_views(s, list(trials))}


@router.get("/experiments/{exp_id}/trials")
@access(trial="own")
def get_experiment_trials(exp_id: int, request: Request) -> dict[str, Any]:
    """The trials of an experiment."""
    with _mgr(request).db.read() as s:
        _get_experiment(s, exp_id)
        trials = s.scalars(
            select(TrialRow).where(TrialRow.experiment_id == exp_id).order_by(TrialRow.id)
        ).all()
        return {"trials": _trial_views(s, list(trials))}


@router.get("/experiments/{exp_id}/checkpoints")
@access(trial="own")
def get_experiment_checkpoints(exp_id: int, request: Request) -> dict[str, Any]:
    """The checkpoints of an experiment, oldest first."""
    with _mgr(request).db.read() as s:
        exp = _get_experiment(s, exp_id)
        rows = s.scalars(
            select(CheckpointRow)
            .where(CheckpointRow.experiment_id == exp_id)
            .order_by(CheckpointRow.report_time)
        ).all()
        return {"checkpoints": _checkpoint_views(s, exp, list(rows))}


@router.get("/experiments/{exp_id}/model_def")
@access(agent=True, trial="own")
def get_model_def(exp_id: int, request: Request) -> Response:
    """The experiment's context directory as a gzipped tar."""
    with _mgr(request).db.read() as s:
        _get_experiment(s, exp_id)
        md = s.get(ModelDefinitionRow, exp_id)
        if md is None:
            raise NotFound(f"experiment {exp_id} was created without a context directory")
        return Response(content=md.content, media_type="application/gzip")


_ACTIONS = {
    "pause": lambda m, i: m.pause_experiment(i),
    "activate": lambda m, i: m.activate_experiment(i),
    "cancel": lambda m, i: m.cancel_experiment(i),
    "kill": lambda m, i: m.cancel_experiment(i, kill=True),
    "archive": lambda m, i: m.archive_experiment(i, True),
    "unarchive": lambda m, i: m.archive_experiment(i, False),
}


def _experiment_json(mgr: ExperimentManager, exp_id: int) -> dict[str, Any]:
    with mgr.db.read() as s:
        return {"experiment": _experiment_views(s, [_get_experiment(s, exp_id)])[0]}


@router.post("/experiments/{exp_id}/{action}")
@access(users="owner", what="{action} it")
def experiment_action(exp_id: int, action: str, request: Request) -> dict[str, Any]:
    """pause | activate | cancel | kill | archive | unarchive an experiment.

    Illegal for the experiment's state: 409 naming the state and what is allowed.
    """
    fn = _ACTIONS.get(action)
    if fn is None:
        raise NotFound(f"no experiment action {action!r}; one of {sorted(_ACTIONS)}")
    mgr = _mgr(request)
    fn(mgr, exp_id)
    return _experiment_json(mgr, exp_id)


@router.patch("/experiments/{exp_id}")
@access(users="owner", what="edit it")
def patch_experiment(exp_id: int, body: PatchExperiment, request: Request) -> dict[str, Any]:
    """Edit name or description, or set the checkpoint GC policy (collects at once)."""
    mgr = _mgr(request)
    gc = body.checkpoint_storage.model_dump(exclude_none=True) if body.checkpoint_storage else None
    res = body.resources.model_dump(exclude_none=True) if body.resources else None
    mgr.patch_experiment(exp_id, body.name, body.description, gc or None, res or None)
    return _experiment_json(mgr, exp_id)


@router.delete("/experiments/{exp_id}")
@access(users="owner", what="delete it")
def delete_experiment(exp_id: int, request: Request) -> dict[str, Any]:
    """Delete a finished experiment: checkpoints from storage, then every row."""
    _mgr(request).delete_experiment(exp_id)
    return {}


# ---------------------------------------------------------------------- trials


@router.post("/trials/{trial_id}/kill")
@access(users="owner", what="kill its trial {trial_id}")
def kill_trial(trial_id: int, request: Request) -> dict[str, Any]:
    """Kill one trial; it ends CANCELED."""
    mgr = _mgr(request)
    mgr.kill_trial(trial_id)
    with mgr.db.read() as s:
        return {"trial": _trial_views(s, [_get_trial(s, trial_id)])[0]}


@router.get("/trials/{trial_id}")
@access(trial="own")
def get_trial(trial_id: int, request: Request) -> dict[str, Any]:
    """One trial."""
    with _mgr(request).db.read() as s:
        return {"trial": _trial_views(s, [_get_trial(s, trial_id)])[0]}


@router.get("/trials/{trial_id}/metrics")
@access(trial="own")
def get_trial_metrics(
    trial_id: int,
    request: Request,
    group: str | None = Query(None, pattern="^(training|validation)$"),
) -> dict[str, Any]:
    """A trial's metric reports, by batch count."""
    with _mgr(request).db.read() as s:
        _get_trial(s, trial_id)
        q = select(MetricRow).where(MetricRow.trial_id == trial_id)
        if group:
            q = q.where(MetricRow.kind == group)
        rows = s.scalars(q.order_by(MetricRow.total_batches, MetricRow.kind)).all()
        return {"metrics": [metric_view(m) for m in rows]}


@router.get("/trials/{trial_id}/logs")
def get_trial_logs(
    trial_id: int,
    request: Request,
    after_id: int = Query(0, ge=0),
    limit: int = Query(1000, ge=1, le=10_000),
) -> dict[str, Any]:
    """Log lines of a trial with ids above ``after_id``; poll with the last id to follow."""
    with _mgr(request).db.read() as s:
        trial = _get_trial(s, trial_id)
        rows = s.scalars(
            select(TaskLogRow)
            .where(TaskLogRow.trial_id == trial_id, TaskLogRow.id > after_id)
            .order_by(TaskLogRow.id)
            .limit(limit)
        ).all()
        return {"logs": [log_view(r) for r in rows], "trial_state": trial.state}


@router.get("/trials/{trial_id}/checkpoints")
@access(trial="own")
def get_trial_checkpoints(trial_id: int, request: Request) -> dict[str, Any]:
    """A trial's checkpoints, oldest first."""
    with _mgr(request).db.read() as s:
        trial = _get_trial(s, trial_id)
        exp = _get_experiment(s, trial.experiment_id)
        rows = s.scalars(
            select(CheckpointRow)
            .where(CheckpointRow.trial_id == trial_id)
            .order_by(CheckpointRow.total_batches)
        ).all()
        return {"checkpoints": _checkpoint_views(s, exp, list(rows))}


@router.get("/checkpoints/{uuid}")
@access(trial="own")
def get_checkpoint(uuid: str, request: Request) -> dict[str, Any]:
    """One checkpoint."""
    with _mgr(request).db.read() as s:
        c = s.get(CheckpointRow, uuid)
        if c is None:
            raise NotFound(f"checkpoint {uuid} not found")
        exp = _get_experiment(s, c.experiment_id)
        return {"checkpoint": _checkpoint_views(s, exp, [c])[0]}


@router.get("/checkpoints/{uuid}/download")
@access(trial="own")
def download_checkpoint(uuid: str, request: Request) -> FileResponse:
    """The checkpoint directory as a gzipped tar (streamed from a temporary file)."""
    with _mgr(request).db.read() as s:
        c = s.get(CheckpointRow, uuid)
        if c is None:
            raise NotFound(f"checkpoint {uuid} not found")
        exp = _get_experiment(s, c.experiment_id)
    if c.state == "DELETED":
        raise Conflict(f"checkpoint {uuid} was deleted by checkpoint GC")
    path = _storage_dir(exp.config, uuid)
    if path is None or not os.path.isdir(path):
        raise NotFound(f"checkpoint {uuid} is not in storage the master can read ({path})")
    fd, tmp = tempfile.mkstemp(suffix=".tar.gz")
    with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
        tar.add(path, arcname=".")
    return FileResponse(tmp, media_type="application/gzip", filename=f"{uuid}.tar.gz",
                        background=BackgroundTask(os.remove, tmp))


# ---------------------------------------------------------------------- harness


@router.get("/trials/{trial_id}/searcher/operation")
@access(trial="own")
def get_searcher_operation(trial_id: int, request: Request) -> dict[str, Any]:
    """The trial's next searcher operation."""
    return _mgr(request).searcher_operation(trial_id)


@router.post("/trials/{trial_id}/searcher/completed_operation")
@access(users="none", trial="own", what="report for trials")
def complete_searcher_operation(
    trial_id: int, body: CompletedOperation, request: Request
) -> dict:
    """The trial finished an operation and reports the searcher metric."""
    _mgr(request).complete_operation(trial_id, body.op.length, body.searcher_metric)
    return {}


@router.post("/trials/{trial_id}/metrics")
@access(users="none", trial="own", what="report metrics for trials")
def post_trial_metrics(trial_id: int, body: MetricsReport, request: Request) -> dict:
    """Training or validation metrics at a batch count (idempotent)."""
    stored = _mgr(request).report_metrics(
        trial_id, body.group, body.steps_completed, body.trial_run_id, body.metrics,
        body.batch_metrics,
    )
    return {"stored": stored}


@router.post("/trials/{trial_id}/metrics/batch")
@access(users="none", trial="own", what="report metrics for trials")
def post_trial_metrics_batch(trial_id: int, body: MetricsReportBatch, request: Request) -> dict:
    """Several metrics reports of one trial, stored in one transaction, each as
    ``POST /trials/{id}/metrics`` would store it (idempotent per report)."""
    stored = _mgr(request).report_metrics_batch(
        trial_id,
        [
            MetricsIn(r.group, r.steps_completed, r.trial_run_id, r.metrics, r.batch_metrics)
            for r in body.reports
        ],
    )
    return {"stored": stored}


@router.post("/trials/{trial_id}/progress")
@access(users="none", trial="own", what="report progress for trials")
def post_trial_progress(trial_id: int, body: ProgressReport, request: Request) -> dict:
    """The trial's own progress estimate (0..1)."""
    _mgr(request).report_progress(trial_id, body.progress)
    return {}


@router.post("/trials/{trial_id}/early_exit")
@access(users="none", trial="own", what="report early exits for trials")
def post_early_exit(trial_id: int, body: EarlyExit, request: Request) -> dict:
    """The trial will exit early (invalid hyperparameters)."""
    _mgr(request).report_early_exit(trial_id, body.reason)
    return {}


@router.post("/checkpoints")
@access(users="none", trial="route", what="report checkpoints for trials")
def post_checkpoint(body: CheckpointReport, request: Request) -> dict:
    """A completed checkpoint written by a trial (a trial's token: its own trial only)."""
    require_own_trial(request, body.trial_id)
    _mgr(request).report_checkpoint(
        body.uuid, body.trial_id, body.allocation_id, body.steps_completed, body.resources,
        body.metadata,
    )
    return {}
