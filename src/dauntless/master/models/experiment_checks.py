"""Every check of a new experiment, shared by create and ``validate_only``
(``POST /experiments``): the config (parsed within the limits of
:mod:`dauntless.config._limits`), the fields this master cannot honour, the resource
pool and what its agents can run, the warm-start source, the checkpoint storage's
client, the searcher, the size of the search (``max_search_trials`` of the master
config, default 100,000 trials) and the context directory's archive
(:mod:`dauntless.master.context_archive`). Nothing is written.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import (
    ConfigError,
    ExperimentConfig,
    Unit,
    config_refusals,
    parse_experiment_config,
    searcher_length,
)
from dauntless.searcher import SearcherConfigError, make_searcher, planned_trials
from dauntless.storage import build_storage

from ..compat038 import prepare_raw_config
from ..context import MasterContext
from ..context_archive import check_context_archive
from ..custom_searchers import runs_in_master
from ..db import (
    UNCATEGORIZED_ID,
    AgentRow,
    CheckpointRow,
    ExperimentRow,
    ModelDefinitionRow,
    TrialRow,
)
from ..environments import check_pool_can_run
from ..errors import BadRequest, NotFound
from ..search_setup import custom_method_class, pbt_checkpoints
from . import pool_bindings, projects, users, workspaces

INT32_MAX = 2**31 - 1
"""The largest training length in batches a trial's rows can hold."""


@dataclass(frozen=True)
class CheckedExperiment:
    """What :func:`check_experiment` resolved.

    Attributes:
        config: the resolved config (seed, storage and warm-start source filled in).
        searcher: the experiment's searcher, before its first operations.
        seed: the experiment seed.
        context: the context directory to store (the parent's for a fork without one),
            or None.
    """

    config: ExperimentConfig
    searcher: Any
    seed: int
    context: bytes | None


def check_experiment(
    ctx: MasterContext,
    config_text: str,
    context: bytes | None,
    parent_id: int | None = None,
    owner: str | None = None,
    project_id: int = UNCATEGORIZED_ID,
) -> CheckedExperiment:
    """Check a new experiment as create does, writing nothing.

    Args:
        config_text: the experiment config as YAML text.
        context: the context directory as a gzipped tar, or None.
        parent_id: fork: the experiment whose context is used when ``context`` is None.
        owner: the username of the experiment's owner: a custom search method runs in
            the master only as ``custom_searchers.in_master`` allows for this user.
        project_id: its project. Its workspace's checkpoint storage is merged under the
            config's and its default compute or auxiliary pool is used when the config
            names none (reference §1.2); a pool bound to other workspaces is refused,
            naming it.

    Returns:
        The resolved config, searcher, seed and context.

    Raises:
        BadRequest: an invalid config or one over the parsing limits (``errors``
            names each field), a field this master cannot honour, an unknown
            resource pool or warm-start source, an unsupported checkpoint storage, a
            search larger than ``max_search_trials``, a training length beyond
            2**31-1 batches, or a context archive with unsafe entries.
        TooLarge: a context over 95 MiB compressed (or over its unpacked limits).
        NotFound: ``parent_id`` names no experiment; no such project.
        Conflict: the project or its workspace is archived.
    """
    if parent_id is not None:
        with ctx.db.read() as s:
            if s.get(ExperimentRow, parent_id) is None:
                raise NotFound(f"experiment {parent_id} not found")
            row = s.get(ModelDefinitionRow, parent_id)
        if context is None and row is not None:
            context = bytes(row.content)
    with ctx.db.read() as s:
        _project, ws = projects.accepting_project(s, project_id)
    try:
        raw = prepare_raw_config(
            config_text, workspaces.workspace_storage(ws, ctx.default_storage())
        )
        cfg = parse_experiment_config(raw)
    except ConfigError as exc:
        raise BadRequest("invalid experiment config", exc.errors) from None
    if context is not None:
        check_context_archive(context)
    if cfg.entrypoint is None:
        raise BadRequest(
            "invalid experiment config",
            [("entrypoint", "required: 'module:TrialClass' or a command to run")],
        )
    pools = [p.pool_name for p in ctx.config.resource_pools]
    pool = cfg.resources.resource_pool or workspaces.workspace_pool(
        ws, cfg.resources.slots_per_trial
    )
    if pool not in pools:
        raise BadRequest(
            "invalid experiment config",
            [("resources.resource_pool", f"unknown pool {pool!r}; pools: {pools}")],
        )
    with ctx.db.read() as s:
        pool_bindings.check_pool_usable(s, pool, ws.id, "resources.resource_pool")
    if not cfg.resources.resource_pool and pool != "default":
        raw.setdefault("resources", {})["resource_pool"] = pool
        cfg = parse_experiment_config(raw)
    refuse_unsupported(raw, cfg)
    with ctx.db.read() as s:  # issue 23: some agent of the pool can run it
        known = [(a.id, a.resource_pool, a.runtime) for a in s.scalars(select(AgentRow))]
        # issue 29: and as its Unix identity
        owner_id = users.user_id(s, owner or "determined")
        default_task = ctx.config.security.default_task
        identity_errors = users.identity_refusals(s, owner_id, default_task, ws.id, pool)
    env_errors = check_pool_can_run(cfg, pool, known) + identity_errors
    if env_errors:
        raise BadRequest("invalid experiment config", env_errors)
    seed = cfg.reproducibility.experiment_seed
    if seed is None:
        seed = secrets.randbelow(2**31)
    raw = cfg.to_json()
    admin = False
    if owner is not None and runs_in_master(cfg):
        with ctx.db.read() as s:
            user = users.read_user_by_name(s, owner)
        admin = user is not None and bool(user.admin)
    method = custom_method_class(ctx.config.custom_searchers.in_master, admin, cfg, context)
    pbt_checkpoints(cfg, raw)
    with ctx.db.read() as s:
        resolve_warm_start(s, raw)
    raw["reproducibility"]["experiment_seed"] = seed
    if raw.get("checkpoint_storage") is None:
        raw["checkpoint_storage"] = workspaces.workspace_storage(ws, ctx.default_storage())
    resolved = parse_experiment_config(raw)
    try:
        # The master deletes checkpoints (GC) and serves downloads: it needs the
        # store's client library too. This does not contact the store.
        build_storage(resolved.checkpoint_storage)
    except (ImportError, ValueError) as exc:
        raise BadRequest(
            "invalid experiment config", [("checkpoint_storage.type", str(exc))]
        ) from None
    try:
        searcher = make_searcher(resolved, seed, method=method)
    except SearcherConfigError as exc:
        raise BadRequest("invalid experiment config", [("searcher", str(exc))]) from None
    check_search_size(ctx, resolved, searcher)
    return CheckedExperiment(resolved, searcher, seed, context)


def check_search_size(ctx: MasterContext, cfg: ExperimentConfig, searcher: Any) -> None:
    """Refuse a search of more trials than the master's ``max_search_trials``, or a
    training length in batches beyond what a trial's rows hold (2**31-1).

    The trial count is :func:`dauntless.searcher.planned_trials` (a grid's size, ASHA's
    brackets, ``max_trials``), as ``POST /preview-hp-search`` counts it.

    Raises:
        BadRequest: naming ``hyperparameters`` (a grid) or ``searcher.max_trials``, or
            ``searcher.max_length``.
    """
    limit = ctx.config.max_search_trials
    count = planned_trials(cfg, searcher)
    if count > limit:
        field = "hyperparameters" if cfg.searcher.name == "grid" else "searcher.max_trials"
        raise BadRequest(
            "invalid experiment config",
            [
                (
                    field,
                    f"the search would create {count} trials; this master creates at most "
                    f"{limit} per experiment (max_search_trials of the master config)",
                )
            ],
        )
    length = searcher_length(cfg)
    if length is not None and length.unit is Unit.BATCHES and length.value > INT32_MAX:
        raise BadRequest(
            "invalid experiment config",
            [("searcher.max_length", f"{length.value} batches; at most {INT32_MAX}")],
        )


def refuse_unsupported(raw: dict[str, Any], cfg: ExperimentConfig) -> None:
    """Refuse fields this master cannot honour, naming each (Determined 0.38 configs).

    Raises:
        BadRequest: a refused field, or a trial-class entrypoint without a length.
    """
    errors = config_refusals(raw)
    time_metric = getattr(cfg.searcher, "time_metric", None)
    if cfg.is_trial_class() and searcher_length(cfg) is None:
        if getattr(cfg.searcher, "max_length", None) is None and time_metric not in (
            "batches",
            "epochs",
        ):
            errors.append(
                (
                    "searcher.max_length",
                    f"the entrypoint {cfg.entrypoint!r} names a trial class, whose "
                    "legacy harness takes its training length from searcher.max_length "
                    "(or an ASHA max_time in batches or epochs); set "
                    "searcher.max_length, or write a script that calls "
                    "Trainer.fit(max_length=Batch(n) or Epoch(n))",
                )
            )
    if errors:
        raise BadRequest("invalid experiment config", errors)


def resolve_warm_start(s: Session, raw: dict[str, Any]) -> None:
    """Check the warm-start source and record its checkpoint uuid in ``raw``.

    Raises:
        BadRequest: an unknown trial, a trial without a checkpoint, or an unknown or
            unfinished checkpoint.
    """
    searcher = raw["searcher"]
    trial_id = searcher.get("source_trial_id")
    uuid_ = searcher.get("source_checkpoint_uuid")
    if trial_id is None and uuid_ is None:
        return
    if uuid_ is not None:
        ckpt = s.get(CheckpointRow, uuid_)
        if ckpt is None or ckpt.state != "COMPLETED":
            raise BadRequest(
                "invalid experiment config",
                [
                    (
                        "searcher.source_checkpoint_uuid",
                        f"no completed checkpoint {uuid_!r} on this master",
                    )
                ],
            )
        return
    trial = s.get(TrialRow, trial_id)
    if trial is None:
        raise BadRequest(
            "invalid experiment config",
            [("searcher.source_trial_id", f"no trial {trial_id} on this master")],
        )
    if not trial.latest_checkpoint:
        raise BadRequest(
            "invalid experiment config",
            [
                (
                    "searcher.source_trial_id",
                    f"trial {trial_id} has no checkpoint to start from",
                )
            ],
        )
    searcher["source_checkpoint_uuid"] = trial.latest_checkpoint


__all__ = [
    "CheckedExperiment",
    "check_experiment",
    "check_search_size",
    "refuse_unsupported",
    "resolve_warm_start",
]
