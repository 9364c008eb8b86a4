"""The master's FastAPI application and its lifetime (migrations, background loop)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, FastAPI
from sqlalchemy import select
from starlette.routing import BaseRoute

import dauntless
from dauntless.config import MasterConfig

from . import loop
from .api_spec import declare_errors
from .audit import AuditTrail, RetentionHook
from .audit_http import AuditMiddleware
from .auth import AuthService, authenticate
from .authz import Authorizer
from .body_limits import JSONBodyLimits
from .context import MasterContext
from .db import ClusterRow, Database
from .det_dialect import CreatedAsOK
from .fold_worker import FoldWorker
from .heartbeat_asgi import QuietHeartbeats
from .heartbeats import watch_intake
from .master_ops import MasterLogBuffer
from .metric_series import MetricFolder
from .metrics_asgi import FastMetricReports
from .models.operations import ClusterMessageCache, LogCleanup
from .prom import MasterMetrics, RequestMetrics
from .provisioner import build_provisioners
from .proxy import make_master_proxy_app, make_proxy_origin_app
from .proxy_auth import ProxyAuth
from .rbac import ROLES
from .routes import install_error_handlers
from .routes_allocations import router as allocations_router
from .routes_audit import router as audit_router
from .routes_auth import router as auth_router
from .routes_charts import router as charts_router
from .routes_checkpoints import router as checkpoints_router
from .routes_cluster import heartbeat_router as cluster_heartbeat_router
from .routes_cluster import info_router
from .routes_cluster import router as cluster_router
from .routes_compat import router as compat_router
from .routes_det_trials import router as det_trials_router
from .routes_experiment_list import router as experiment_list_router
from .routes_experiments import router as experiments_router
from .routes_files import router as files_router
from .routes_habits import router as habits_router
from .routes_harness import router as harness_router
from .routes_jobs import router as jobs_router
from .routes_master import router as master_router
from .routes_metadata import router as metadata_router
from .routes_models import router as models_router
from .routes_operations import ClusterMessageHeader
from .routes_operations import router as operations_router
from .routes_profiler import router as profiler_router
from .routes_projects import router as projects_router
from .routes_prom import router as prom_router
from .routes_rbac import router as rbac_router
from .routes_search import router as search_router
from .routes_searcher import router as searcher_router
from .routes_sso import router as sso_router
from .routes_stream import router as stream_router
from .routes_tasks import install_task_error_handlers
from .routes_tasks import router as tasks_router
from .routes_templates import router as templates_router
from .routes_tokens import router as tokens_router
from .routes_trials import router as trials_router
from .routes_usage import router as usage_router
from .routes_webhooks import router as webhooks_router
from .routes_workspaces import router as workspaces_router
from .sso import OIDCClient
from .webhook_shipper import Shipper
from .webui import router as webui_router

log = logging.getLogger("dauntless.master")


def default_db_url(config: MasterConfig) -> str:
    """``config.db_url``, or a SQLite file in the data directory."""
    if config.db_url:
        return config.db_url
    return "sqlite:///" + os.path.join(os.path.abspath(config.data_dir), "dauntless.db")


SHARED_DIR_MODE = 0o1733
"""Directories tasks of every Unix identity create their entries in (the default
checkpoint storage): anyone may create and enter, only the owner lists, and the sticky
bit keeps each entry its creator's. Checkpoints themselves are 0700 (``tempfile``)."""


def protect_data_dir(config: MasterConfig, created: bool) -> None:
    """Keep the master's files from tasks of other identities (issue 29), and let those
    tasks write checkpoints to the default storage.

    A data directory this call's master created is 0711 (entered, not listed); the
    SQLite database file is 0600 (its journal files take its mode); the default
    checkpoint storage ``<data_dir>/checkpoints`` and its ``tensorboard/experiment`` are
    :data:`SHARED_DIR_MODE`. When tasks of unlinked users run as another uid than the
    master's and cannot reach that storage (a directory above it is closed to others),
    a warning names ``checkpoint_storage``.
    """
    data_dir = os.path.abspath(config.data_dir)
    if created:
        os.chmod(data_dir, 0o711)
    db_url = default_db_url(config)
    if db_url.startswith("sqlite:///") and os.path.exists(db_url[len("sqlite:///") :]):
        os.chmod(db_url[len("sqlite:///") :], 0o600)
    if config.checkpoint_storage is not None:
        return
    base = os.path.join(data_dir, "checkpoints")
    for path in (
        base,
        os.path.join(base, "tensorboard"),
        os.path.join(base, "tensorboard", "experiment"),
    ):
        os.makedirs(path, exist_ok=True)
        if os.stat(path).st_uid == os.geteuid():
            os.chmod(path, SHARED_DIR_MODE)
    if config.security.default_task.uid != os.geteuid():
        closed = [p for p in _ancestors(base) if not os.stat(p).st_mode & 0o001]
        if closed:
            log.warning(
                "tasks of users without a link run as uid %d, which cannot reach the default "
                "checkpoint storage %s (%s is closed to other users): set checkpoint_storage "
                "to a directory they can reach, or link users to identities that can",
                config.security.default_task.uid,
                base,
                closed[0],
            )


def _ancestors(path: str) -> list[str]:
    out = []
    while True:
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            return out
        path = parent


def freeze_startup_heap() -> None:
    """Move every object alive now into the garbage collector's permanent generation
    (``gc.collect()``, then ``gc.freeze()``; Python's ``gc`` module documentation), so
    that later full collections no longer traverse them.

    A full (generation 2) collection stops every thread of the master while it walks
    all tracked objects; after start-up that is some 150,000 objects (FastAPI, pydantic,
    SQLAlchemy, Alembic ...), about 100-130 ms on the benchmark machine, and the metric
    fold's allocations set one off every few seconds under ingest load: it was the
    largest part of the p99 acknowledgement time of ``benchmarks/metric_ingest.py``
    (issue 19; 11 ms after freezing). The objects frozen live as long as the master
    anyway; garbage made after this call is still collected.

    For the master process only (``python -m dauntless.master``): a process that
    builds many applications (the tests) would keep their garbage alive.
    """
    gc.collect()
    gc.freeze()


@functools.cache
def shared_routes() -> tuple[BaseRoute, ...]:
    """The routes of every router of the master, in matching order, each with
    :func:`dauntless.master.auth.authenticate` as its first dependency: built once per
    process and shared by every application :func:`create_app` builds.

    FastAPI (0.165) builds an included router's routes for each application at that
    application's first requests: every route's dependencies, parameters and response
    model validators, about 1 ms of CPU a route, although the routers built them once
    already when their module was imported. A master process builds one application,
    but the tests build hundreds in one process, where this was 28% of the CPU of
    starting a master. Included here into one router whose dependencies are the
    application's, FastAPI builds each route once and keeps it on that router's
    inclusion, which the applications then share. The routes are the same to a
    request: the same paths, dependencies and order; the one difference is that
    ``app.dependency_overrides`` does not reach them (they are looked up on this
    router, which has none), and nothing in Dauntless sets any.
    """
    api = APIRouter(dependencies=[Depends(authenticate)])
    # Issue 34: /prom/det-state-metrics, /debug/prom/metrics first: a scrape then matches
    # its route at once rather than after the ~100 others (their paths share no prefix).
    api.include_router(prom_router)
    # Issue 37: agents' heartbeats (200 a second from 1,000 agents) likewise; no route
    # before it matched POST /api/v1/agents/{id}/heartbeat, so none is shadowed.
    api.include_router(cluster_heartbeat_router)
    # And the trials' own calls (metrics, progress, searcher operations, checkpoints):
    # matching POST /trials/{id}/metrics/batch against the 143 routes (20 routers)
    # before it took 212 us of CPU a request, 14 us here, and was 10% of the master's
    # busy samples (py-spy) at 100,000 metric values a second. No route before it
    # matched one of these paths (tests/unit/master/test_route_order.py).
    api.include_router(harness_router)
    # Issue 30 first: /users/assignments and /experiments/{id}/move before the
    # /users/{user_id} and /experiments/{exp_id}/{action} routes that would match them.
    api.include_router(rbac_router)
    api.include_router(workspaces_router)
    api.include_router(projects_router)
    api.include_router(models_router)  # issue 31: the model registry
    api.include_router(metadata_router)  # issue 31: metadata and status after the fact
    api.include_router(templates_router)
    api.include_router(webhooks_router)
    api.include_router(tasks_router)
    api.include_router(auth_router)
    api.include_router(compat_router)
    # The routes of the old routes.py, split per aggregate; this order keeps their
    # matching order and the OpenAPI document's operation order.
    api.include_router(cluster_router)
    api.include_router(info_router)  # Determined's GET /info (issue 33)
    # Before the experiments' POST /experiments/{id}/{action} route that would take
    # POST /experiments/{id}/searcher_operations for an unknown action.
    api.include_router(searcher_router)
    api.include_router(experiment_list_router)  # issue 31: search across experiments
    api.include_router(experiments_router)
    api.include_router(det_trials_router)  # before /trials/{trial_id} (issue 33)
    api.include_router(trials_router)
    api.include_router(checkpoints_router)
    api.include_router(profiler_router)  # issue 34: system metrics of trials
    api.include_router(search_router)
    api.include_router(habits_router)
    api.include_router(jobs_router)  # issue 22: the job queue
    api.include_router(files_router)  # issue 22: model definition files one by one
    api.include_router(charts_router)  # issue 22: batch-level training metrics
    api.include_router(stream_router)
    api.include_router(allocations_router)
    api.include_router(tokens_router)  # issue 30: access tokens, single sign-on, audit
    api.include_router(sso_router)
    api.include_router(audit_router)
    api.include_router(master_router)  # issue 34: master logs and config
    api.include_router(operations_router)  # issue 34: cluster message, log retention
    api.include_router(usage_router)  # issue 34: historical usage
    api.include_router(webui_router)  # last: its catch-all serves the UI's pages
    return tuple(api.routes)


def create_app(
    config: MasterConfig,
    run_loop: bool = True,
    freeze_heap: bool = False,
    fold_worker: bool = False,
) -> FastAPI:
    """Build the master application.

    At start-up the database is migrated to the newest schema, the cluster identity is
    made if new, the built-in users get their first password if they have none, the
    background fold of metric reports starts
    (:class:`~dauntless.master.metric_series.MetricFolder`, or with ``fold_worker`` a
    :class:`~dauntless.master.fold_worker.FoldWorker` process), and (with
    ``run_loop``) the background scheduling loop starts; both stop with the application.

    Every route depends on :func:`dauntless.master.auth.authenticate` (the routers'
    routes through :func:`shared_routes`, anything else included later through the
    application's own dependency, so no route can miss it): the caller must present a
    valid credential and pass the route's access rule, except on the open routes and the
    UI's files.

    The task services' own origin is a second ASGI app, ``app.state.proxy_origin_app``
    (:func:`dauntless.master.proxy.make_proxy_origin_app`), which
    :mod:`dauntless.master.serving` serves on the ``task_proxy`` port beside this one.

    Args:
        config: the master config.
        run_loop: start the background loop (tests of single routes may turn it off).
        freeze_heap: at the end of start-up, :func:`freeze_startup_heap` (the master
            process does; a process building many applications must not).
        fold_worker: fold metric reports in a child process rather than a thread (the
            master process does; in-process test servers need not start an interpreter
            each).
    """
    created = not os.path.isdir(config.data_dir)
    os.makedirs(config.data_dir, exist_ok=True)
    db = Database(default_db_url(config))
    ctx = MasterContext(db, config)
    ctx.port = config.port
    if config.observability.enable_prometheus:
        ctx.prom = MasterMetrics(db.engine, db)
    assign = config.security.authz.workspace_creator_assign_role
    if assign.enabled and assign.role_id not in ROLES:
        raise ValueError(
            "security.authz.workspace_creator_assign_role.role_id: no role "
            f"{assign.role_id}; roles: {sorted(ROLES)}"
        )
    authz = Authorizer(db, config)
    auth = AuthService(db, config, allocation_versions=ctx.allocation_versions, authz=authz)
    trail = AuditTrail(db, config.data_dir)  # issue 30: who changed what
    if config.audit.retention_days != -1:
        ctx.loop_hooks.append(RetentionHook(trail, config.audit.retention_days))
    retention = config.retention_policy
    if retention.schedule is not None:  # issue 34: expired task logs, in batches
        ctx.loop_hooks.append(LogCleanup(db, retention.log_retention_days, retention.schedule))
    sso = OIDCClient(config.oidc) if config.oidc.enabled else None
    for warning in config.oidc.warnings():
        log.warning("%s", warning)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        logging.getLogger().addHandler(app.state.master_logs)  # det master logs
        db.migrate()
        db.analyze()  # the planner's statistics, for searches across experiments
        protect_data_dir(config, created)
        with db.write() as s:
            if s.scalar(select(ClusterRow)) is None:
                s.add(ClusterRow(id=1, cluster_id=str(uuid.uuid4()), created_at=time.time()))
        auth.bootstrap()
        with db.read() as s:
            app.state.cluster_message.load(s, time.time())
        loop.on_start(ctx)
        provisioners = app.state.provisioners = build_provisioners(ctx)
        if provisioners is not None:
            ctx.loop_hooks.append(provisioners.step)
        if config.resource_manager.type == "slurm":
            from .slurm import SlurmResourceManager

            slurm = SlurmResourceManager(ctx, config.resource_manager)
            slurm.start()  # SlurmError: the master does not start without its Slurm
            ctx.loop_hooks.append(slurm.step)
        stop = threading.Event()
        thread = None
        # Metric reports are acknowledged unfolded; this folds them in bulk (and, first,
        # what a stopped master left pending). Readers fold their trials' share first.
        folder: MetricFolder | FoldWorker
        if fold_worker:
            folder = FoldWorker(db.url)  # a process of its own (see fold_worker)
        else:
            folder = MetricFolder(db)
        folder.start()
        shipper = Shipper(db, config.webhooks, ctx.webhooks.key, ctx.webhooks.wake, ctx.clock)
        shipper.start()  # webhook events, delivered in the background
        intake = None
        if run_loop:
            thread = threading.Thread(
                target=loop.run_loop, args=(ctx, stop), name="control-loop", daemon=True
            )
            thread.start()
            # The reaper's view of whether this loop, which takes in the agents'
            # beats, stood still (dauntless.master.heartbeats).
            intake = asyncio.create_task(watch_intake(ctx.heartbeats, ctx.clock))
        if freeze_heap:
            freeze_startup_heap()
        log.info(
            "master %s ready on %s:%s (db %s)",
            dauntless.__version__,
            config.host,
            config.port,
            db.engine.url.render_as_string(hide_password=True),
        )
        try:
            yield
        finally:
            if intake is not None:
                intake.cancel()
            stop.set()
            ctx.wake.set()
            ctx.metric_commits.close()  # what the metrics fast path queued is committed
            folder.close()
            shipper.stop()
            if thread is not None:
                thread.join(timeout=10)
            if app.state.proxy_client is not None:  # made by the first proxied request
                await app.state.proxy_client.aclose()
            db.dispose()
            logging.getLogger().removeHandler(app.state.master_logs)

    app = FastAPI(
        title="Dauntless master",
        version=dauntless.__version__,
        description="REST API of the Dauntless master (docs/protocol.md).",
        lifespan=lifespan,
        dependencies=[Depends(authenticate)],
    )
    app.state.ctx = ctx
    app.state.auth = auth
    app.state.authz = authz
    app.state.config = config
    app.state.audit = trail
    app.state.sso = sso
    app.state.master_logs = MasterLogBuffer()
    app.state.cluster_message = ClusterMessageCache()
    # Innermost: trials' training reports stored and quiet agent heartbeats answered
    # before FastAPI's routing (issue 37), inside every middleware below, which see
    # those requests as before.
    app.add_middleware(FastMetricReports, state=app.state)  # trials' training reports
    app.add_middleware(QuietHeartbeats, state=app.state)
    app.add_middleware(AuditMiddleware, trail=trail)
    install_error_handlers(app)
    install_task_error_handlers(app)
    app.state.proxy_client = None  # proxy_forward.app_proxy_client makes it when needed
    app.state.proxy_auth = ProxyAuth()
    # The proxy origin's port as browsers reach it; serving.py sets the bound one.
    proxy_port = config.task_proxy.port
    app.state.proxy_port = config.port + 1 if proxy_port is None else proxy_port
    # Task services: on the master's origin only bearer clients and the one-time
    # redirect to the proxy origin; served on the proxy origin (dauntless.master.proxy).
    app.mount("/proxy", make_master_proxy_app(app.state))
    app.state.proxy_origin_app = make_proxy_origin_app(app.state)
    app.add_middleware(CreatedAsOK)  # Determined's client takes only 200 (issue 33)
    app.add_middleware(JSONBodyLimits)  # bounded JSON bodies (dauntless.master.body_limits)
    app.add_middleware(ClusterMessageHeader, cache=app.state.cluster_message)
    if ctx.prom is not None:  # outermost: times what every other layer adds (issue 34)
        app.add_middleware(RequestMetrics, metrics=ctx.prom)
    # Every route of the routers, with authenticate, as one process-wide list.
    app.router.routes.extend(shared_routes())
    declare_errors(app)
    return app
