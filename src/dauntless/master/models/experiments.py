"""Experiments: create (with every check of the config), edit, archive, continue and
delete (seed 001, reference §7.3), and an experiment's stored context.

``archive_experiment`` and ``continue_experiment`` run in the caller's write session.
``create_experiment``, ``patch_experiment`` and ``delete_experiment`` open their own
transactions: they check the config against other rows first, or touch checkpoint
storage only after the deciding transaction commits.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from dauntless.config import (
    ConfigError,
    parse_experiment_config,
)

from ..compat038 import merge_config_overrides
from ..context import MasterContext
from ..db import (
    UNCATEGORIZED_ID,
    AllocationRow,
    CheckpointRow,
    ExperimentRow,
    MetricRow,
    ModelDefinitionRow,
    SearcherEventRow,
    TaskLogRow,
    TrialProfilerMetricRow,
    TrialRow,
    TrialSearcherRecordRow,
)
from ..errors import BadRequest, Conflict, NotFound
from ..gc import GCPolicy
from ..states import State, is_terminal
from . import checkpoints, experiment_index, registered, search, searcher_log, users
from .experiment_checks import check_experiment

log = logging.getLogger("dauntless.master")


def create_experiment(
    ctx: MasterContext,
    config_text: str,
    context: bytes | None,
    activate: bool = True,
    owner: str = "determined",
    parent_id: int | None = None,
    project_id: int = UNCATEGORIZED_ID,
) -> int:
    """Validate a config, store the experiment and run its searcher's first operations.

    Args:
        config_text: the experiment config as YAML text.
        context: the context directory as a gzipped tar (bytes), or None (with
            ``parent_id``: the parent's context is used).
        activate: start ACTIVE (else PAUSED).
        owner: the username of the user who owns it (may pause, kill, edit and
            delete it); the built-in ``determined`` by default.
        parent_id: fork: the experiment this one is forked from (its model
            definition is copied when ``context`` is None).
        project_id: its project (:func:`.projects.project_for_create` chose it). Its
            workspace's checkpoint storage is merged under the config's and its default
            compute or auxiliary pool is used when the config names none (reference
            §1.2); a pool bound to other workspaces is refused, naming it.

    Opens its own transactions (reads for the checks, one write for the rows) and wakes
    the control loop once the experiment is stored.

    Returns:
        The new experiment's id.

    Raises:
        BadRequest, TooLarge, NotFound, Conflict: what
            :func:`.experiment_checks.check_experiment` raises (every check is there,
            shared with ``validate_only``).
    """
    checked = check_experiment(ctx, config_text, context, parent_id, owner, project_id)
    resolved, searcher, seed, context = (
        checked.config,
        checked.searcher,
        checked.seed,
        checked.context,
    )
    now = ctx.clock()
    with ctx.db.write() as s:
        exp = ExperimentRow(
            name=resolved.name or "",
            description=resolved.description,
            state=(State.ACTIVE if activate else State.PAUSED).value,
            archived=False,
            owner=owner,
            owner_id=users.user_id(s, owner),
            project_id=project_id,
            config=resolved.to_json(),
            original_config=config_text,
            seed=seed,
            searcher_state=None,
            searcher_shutdown=False,
            progress=0.0,
            start_time=now,
            log_retention_days=(
                resolved.retention_policy.log_retention_days
                if resolved.retention_policy is not None
                else None
            ),
        )
        s.add(exp)
        s.flush()
        if not exp.name:
            exp.name = f"Experiment {exp.id}"
        experiment_index.index_new_experiment(s, exp)
        ctx.configs[exp.id] = resolved
        if context is not None:
            s.add(ModelDefinitionRow(experiment_id=exp.id, content=context, size=len(context)))
        search.apply(s, ctx, exp, searcher, searcher.initial_operations())
        exp_id = exp.id
    ctx.wake.set()
    log.info("created experiment %s (%s)", exp_id, resolved.searcher.name)
    return exp_id


def model_definition(s: Session, exp_id: int) -> bytes | None:
    """The experiment's context directory (a gzipped tar), None when it has none.

    Raises:
        NotFound: no such experiment.
    """
    if s.get(ExperimentRow, exp_id) is None:
        raise NotFound(f"experiment {exp_id} not found")
    row = s.get(ModelDefinitionRow, exp_id)
    return None if row is None else bytes(row.content)


def archive_experiment(s: Session, ctx: MasterContext, exp_id: int, archived: bool) -> None:
    """Hide (or show again) a finished experiment; every record is kept.

    Raises:
        Conflict: the experiment is not COMPLETED, CANCELED or ERROR.
    """
    exp = search.read_experiment(s, exp_id)
    if State(exp.state) not in (State.COMPLETED, State.CANCELED, State.ERROR):
        verb = "archived" if archived else "unarchived"
        raise Conflict(
            f"experiment {exp_id} is {exp.state}; only COMPLETED, CANCELED or ERROR "
            f"experiments can be {verb}"
        )
    exp.archived = archived


def patch_experiment(
    ctx: MasterContext,
    exp_id: int,
    name: str | None = None,
    description: str | None = None,
    gc_policy: dict[str, int] | None = None,
    resources: dict[str, Any] | None = None,
    *,
    notes: str | None = None,
    labels: list[str] | None = None,
) -> None:
    """Edit name / description / notes (Markdown) / labels (the whole list, kept in
    the config's ``labels``) / scheduling resources (priority, weight, max_slots), or
    change the GC policy and collect at once.

    Raises:
        BadRequest: an empty name, a blank or too long label, or a negative GC count.
    """
    if name is not None and not name.strip():
        raise BadRequest("name must not be empty", [("name", "a non-empty string")])
    if labels is not None and any(not x.strip() or len(x) > MAX_LABEL_LENGTH for x in labels):
        raise BadRequest(
            "invalid label", [("labels", f"non-empty strings of at most {MAX_LABEL_LENGTH} chars")]
        )
    policy = None
    if gc_policy is not None:
        try:
            policy = GCPolicy(**gc_policy)
        except (TypeError, ValueError) as exc:
            raise BadRequest(str(exc), [("checkpoint_storage", str(exc))]) from None
    with ctx.db.write() as s:
        exp = search.read_experiment(s, exp_id)
        if name is not None:
            exp.name = name
        if description is not None:
            exp.description = description
        if notes is not None:
            exp.notes = notes
        if labels is not None:
            config = dict(exp.config)
            config["labels"] = list(dict.fromkeys(labels))
            ctx.configs[exp.id] = parse_experiment_config(config)
            exp.config = config
        if resources:
            config = dict(exp.config)
            config["resources"] = {**config["resources"], **resources}
            try:
                ctx.configs[exp.id] = parse_experiment_config(config)
            except ValueError as exc:
                raise BadRequest(str(exc), [("resources", str(exc))]) from None
            exp.config = config
            ctx.wake.set()
        if policy is not None:
            config = dict(exp.config)
            storage = dict(config["checkpoint_storage"])
            storage.update(gc_policy or {})
            config["checkpoint_storage"] = storage
            exp.config = config
            ctx.configs[exp.id] = parse_experiment_config(config)
            doomed = checkpoints.collect(s, ctx, exp)
    if policy is not None:
        # Try to delete these DELETING checkpoints now; failures are retried by the
        # master's loop (checkpoint_gc).
        if doomed:
            ctx.deletions.process(experiment_id=exp_id)


def delete_experiment(ctx: MasterContext, exp_id: int) -> None:
    """Delete a finished experiment: its checkpoints from storage, then its rows.

    A checkpoint that cannot be removed from storage is logged and does not stop the
    deletion (seed 001: GC never blocks deleting an experiment).

    Opens its own transactions: storage is touched between them.

    Raises:
        NotFound: no such experiment.
        IllegalTransition: the experiment is not in a terminal state.
    """
    with ctx.db.write() as s:
        exp = search.read_experiment(s, exp_id)
        search.set_experiment_state(ctx, exp, State.DELETING)
        config = dict(exp.config)
        uuids = [
            c.uuid
            for c in s.scalars(
                select(CheckpointRow).where(
                    CheckpointRow.experiment_id == exp_id, CheckpointRow.state != "DELETED"
                )
            )
        ]
        # Registered checkpoints stay: their versions keep what reads and downloads need.
        kept = registered.registered_uuids(s, uuids)
        uuids = [u for u in uuids if u not in kept]
    checkpoints.remove_checkpoints(config, uuids)
    try:
        with ctx.db.write() as s:
            trial_ids = list(s.scalars(select(TrialRow.id).where(TrialRow.experiment_id == exp_id)))
            if trial_ids:
                s.execute(delete(TaskLogRow).where(TaskLogRow.trial_id.in_(trial_ids)))
                s.execute(delete(MetricRow).where(MetricRow.trial_id.in_(trial_ids)))
                s.execute(
                    delete(TrialProfilerMetricRow).where(
                        TrialProfilerMetricRow.trial_id.in_(trial_ids)
                    )
                )
                s.execute(delete(AllocationRow).where(AllocationRow.trial_id.in_(trial_ids)))
            s.execute(delete(CheckpointRow).where(CheckpointRow.experiment_id == exp_id))
            s.execute(delete(SearcherEventRow).where(SearcherEventRow.experiment_id == exp_id))
            s.execute(
                delete(TrialSearcherRecordRow).where(TrialSearcherRecordRow.experiment_id == exp_id)
            )
            s.execute(delete(TrialRow).where(TrialRow.experiment_id == exp_id))
            experiment_index.forget_experiment(s, exp_id)
            gone = s.get(ExperimentRow, exp_id)
            if gone is not None:
                s.delete(gone)
        ctx.configs.pop(exp_id, None)
        log.info("deleted experiment %s", exp_id)
    except Exception:
        log.exception("deleting the rows of experiment %s failed", exp_id)
        with ctx.db.write() as s:
            failed = s.get(ExperimentRow, exp_id)
            if failed is not None:
                search.set_experiment_state(ctx, failed, State.DELETE_FAILED)
        raise


#: The longest label accepted, in characters.
MAX_LABEL_LENGTH = 255


def edit_labels(s: Session, ctx: MasterContext, exp_id: int, label: str, add: bool) -> list[str]:
    """Add (``add``) or remove one of the experiment's labels (kept in its config's
    ``labels``); adding a present label or removing an absent one changes nothing.

    Returns:
        The experiment's labels after the edit.

    Raises:
        BadRequest: an empty label or one over :data:`MAX_LABEL_LENGTH` characters.
        NotFound: no such experiment.
    """
    if not label.strip() or len(label) > MAX_LABEL_LENGTH:
        raise BadRequest(
            "invalid label", [("label", f"a non-empty string of at most {MAX_LABEL_LENGTH} chars")]
        )
    exp = s.get(ExperimentRow, exp_id)
    if exp is None or exp.state == "DELETED":
        raise NotFound(f"experiment {exp_id} not found")
    config = dict(exp.config)
    labels = [str(x) for x in config.get("labels") or []]
    if add and label not in labels:
        labels.append(label)
    elif not add:
        labels = [x for x in labels if x != label]
    config["labels"] = labels
    ctx.configs[exp.id] = parse_experiment_config(config)
    exp.config = config
    experiment_index.set_labels(s, exp.id, labels)
    return labels


def continue_experiment(s: Session, ctx: MasterContext, exp_id: int, overrides: Any = None) -> None:
    """Continue a finished experiment (``det experiment continue``, reference §7.3).

    Its unfinished trials (CANCELED or ERROR), and the trial of a one-trial
    experiment even when COMPLETED, become ACTIVE again with their restarts reset and
    resume from their latest checkpoint; the experiment becomes ACTIVE. Overrides are
    deep-merged into the stored config first (e.g. a longer
    ``searcher.max_length``).

    Raises:
        NotFound: no such experiment.
        Conflict: the experiment is not in a terminal state, or nothing is left to
            continue.
        BadRequest: the merged config is invalid or changes the searcher name.
    """
    exp = search.read_experiment(s, exp_id)
    if not is_terminal(exp.state):
        raise Conflict(f"experiment {exp_id} is {exp.state}; only a finished one continues")
    try:
        merged = merge_config_overrides(dict(exp.config), overrides)
        cfg = parse_experiment_config(merged)
    except ConfigError as exc:
        raise BadRequest("invalid config overrides", exc.errors) from None
    old = ctx.experiment_config(exp)
    if cfg.searcher.name != old.searcher.name:
        raise BadRequest(
            "invalid config overrides",
            [("searcher.name", "continue cannot change the searcher")],
        )
    rows = list(s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id)))
    single = len(rows) == 1
    chosen = [
        t
        for t in rows
        if t.state in (State.CANCELED.value, State.ERROR.value)
        or (single and t.state == State.COMPLETED.value)
    ]
    if not chosen:
        raise Conflict(
            f"experiment {exp_id}: every trial completed its search; nothing to continue"
        )
    current = search.searcher_for(ctx, exp, read_only=True)
    if not current.can_reopen:
        raise Conflict(
            f"experiment {exp_id}: a {cfg.searcher.name} search cannot continue its trials "
            "(its decisions already used their results); fork it instead"
        )
    # Its events were made under the old config: never replay them under the new one.
    searcher_log.compact(s, exp, current)
    ctx.configs[exp_id] = cfg
    exp.config = cfg.to_json()
    experiment_index.index_new_experiment(s, exp)  # the overrides may change labels
    searcher = search.searcher_for(ctx, exp)
    ops = []
    for t in chosen:
        t.state = State.ACTIVE.value
        t.end_time = None
        t.restarts = 0
        t.searcher_closed = False
        t.early_exit_reason = None
        ops += searcher.reopen_trial(t.request_id)
    exp.state = State.ACTIVE.value
    exp.end_time = None
    exp.searcher_shutdown = False
    search.apply(s, ctx, exp, searcher, ops)
    ctx.wake_after_commit(s)
