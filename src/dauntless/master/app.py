"""The master's FastAPI application and its lifetime (migrations, background loop)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI
from sqlalchemy import select

import dauntless
from dauntless.config import MasterConfig

from . import loop
from .api_spec import declare_errors
from .auth import AuthService, authenticate
from .authz import Authorizer
from .context import MasterContext
from .db import ClusterRow, Database
from .fold_worker import FoldWorker
from .metric_series import MetricFolder
from .provisioner import build_provisioners
from .proxy import make_proxy_app, proxy_client
from .rbac import ROLES
from .routes import install_error_handlers
from .routes_allocations import router as allocations_router
from .routes_auth import router as auth_router
from .routes_charts import router as charts_router
from .routes_checkpoints import router as checkpoints_router
from .routes_cluster import router as cluster_router
from .routes_compat import router as compat_router
from .routes_experiments import router as experiments_router
from .routes_files import router as files_router
from .routes_habits import router as habits_router
from .routes_harness import router as harness_router
from .routes_jobs import router as jobs_router
from .routes_projects import router as projects_router
from .routes_rbac import router as rbac_router
from .routes_search import router as search_router
from .routes_stream import router as stream_router
from .routes_tasks import install_task_error_handlers
from .routes_tasks import router as tasks_router
from .routes_trials import router as trials_router
from .routes_workspaces import router as workspaces_router
from .webui import router as webui_router

log = logging.getLogger("dauntless.master")


def default_db_url(config: MasterConfig) -> str:
    """``config.db_url``, or a SQLite file in the data directory."""
    if config.db_url:
        return config.db_url
    return "sqlite:///" + os.path.join(os.path.abspath(config.data_dir), "dauntless.db")


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

    Every route depends on :func:`dauntless.master.auth.authenticate` (an application
    dependency, so no route can miss it): the caller must present a valid credential and
    pass the route's access rule, except on the open routes and the UI's files.

    Args:
        config: the master config.
        run_loop: start the background loop (tests of single routes may turn it off).
        freeze_heap: at the end of start-up, :func:`freeze_startup_heap` (the master
            process does; a process building many applications must not).
        fold_worker: fold metric reports in a child process rather than a thread (the
            master process does; in-process test servers need not start an interpreter
            each).
    """
    os.makedirs(config.data_dir, exist_ok=True)
    db = Database(default_db_url(config))
    ctx = MasterContext(db, config)
    ctx.port = config.port
    assign = config.security.authz.workspace_creator_assign_role
    if assign.enabled and assign.role_id not in ROLES:
        raise ValueError(
            "security.authz.workspace_creator_assign_role.role_id: no role "
            f"{assign.role_id}; roles: {sorted(ROLES)}"
        )
    authz = Authorizer(db, config)
    auth = AuthService(db, config, allocation_versions=ctx.allocation_versions, authz=authz)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        with db.write() as s:
            if s.scalar(select(ClusterRow)) is None:
                s.add(ClusterRow(id=1, cluster_id=str(uuid.uuid4()), created_at=time.time()))
        auth.bootstrap()
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
        if run_loop:
            thread = threading.Thread(
                target=loop.run_loop, args=(ctx, stop), name="control-loop", daemon=True
            )
            thread.start()
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
            stop.set()
            ctx.wake.set()
            folder.close()
            if thread is not None:
                thread.join(timeout=10)
            await app.state.proxy_client.aclose()
            db.dispose()

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
    install_error_handlers(app)
    install_task_error_handlers(app)
    app.state.proxy_client = proxy_client()
    app.mount("/proxy", make_proxy_app(app.state))  # task services (dauntless.master.proxy)
    # Issue 30 first: /users/assignments and /experiments/{id}/move before the
    # /users/{user_id} and /experiments/{exp_id}/{action} routes that would match them.
    app.include_router(rbac_router)
    app.include_router(workspaces_router)
    app.include_router(projects_router)
    app.include_router(tasks_router)
    app.include_router(auth_router)
    app.include_router(compat_router)
    # The routes of the old routes.py, split per aggregate; this order keeps their
    # matching order and the OpenAPI document's operation order.
    app.include_router(cluster_router)
    app.include_router(experiments_router)
    app.include_router(trials_router)
    app.include_router(checkpoints_router)
    app.include_router(harness_router)
    app.include_router(search_router)
    app.include_router(habits_router)
    app.include_router(jobs_router)  # issue 22: the job queue
    app.include_router(files_router)  # issue 22: model definition files one by one
    app.include_router(charts_router)  # issue 22: batch-level training metrics
    app.include_router(stream_router)
    app.include_router(allocations_router)
    app.include_router(webui_router)  # last: its catch-all serves the UI's pages
    declare_errors(app)
    return app
