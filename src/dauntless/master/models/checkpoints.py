"""Checkpoints: their reports by trials, and checkpoint GC's decision (which
checkpoints the experiment's GC policy drops, seed 001 §7.4). The files are deleted after
the deciding transaction commits, by :class:`~dauntless.master.checkpoint_gc.CheckpointDeletions`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from dauntless.config import CheckpointStorageConfig
from dauntless.storage import build_storage

from ..context import MasterContext
from ..db import CheckpointRow, ExperimentRow, MetricRow, TrialRow
from ..errors import Conflict, NotFound
from ..gc import CheckpointFacts, GCPolicy, checkpoints_to_delete
from ..states import is_terminal
from . import registered, trials

log = logging.getLogger("dauntless.master")


def report_checkpoint(
    s: Session,
    ctx: MasterContext,
    uuid_: str,
    trial_id: int,
    allocation_id: str | None,
    steps_completed: int,
    resources: dict[str, int],
    metadata: dict[str, Any],
    state: str = "COMPLETED",
) -> None:
    """Record a checkpoint; a COMPLETED one becomes the trial's latest.

    ``state`` ``UPLOADING`` records a checkpoint whose files are going up to an
    object store (GC deletes it if its trial ends before it is COMPLETED); a later
    ``COMPLETED`` report of the same uuid completes it. Reports are idempotent.

    Raises:
        NotFound: no such trial.
    """
    trial, exp = trials.get_trial(s, trial_id)
    row = s.get(CheckpointRow, uuid_)
    if row is not None:
        if row.state != "UPLOADING" or state != "COMPLETED":
            return
        row.state = "COMPLETED"
        row.resources = resources
        row.meta = metadata
        row.report_time = ctx.clock()
    else:
        s.add(
            CheckpointRow(
                uuid=uuid_,
                trial_id=trial_id,
                experiment_id=exp.id,
                allocation_id=allocation_id,
                total_batches=steps_completed,
                state=state,
                resources=resources,
                meta=metadata,
                report_time=ctx.clock(),
            )
        )
    if state != "COMPLETED":
        return
    latest = s.get(CheckpointRow, trial.latest_checkpoint) if trial.latest_checkpoint else None
    if latest is None or steps_completed >= latest.total_batches:
        trial.latest_checkpoint = uuid_
    trial.total_batches = max(trial.total_batches, steps_completed)


#: The checkpoint states :func:`collect` may mark DELETING.
_COLLECTABLE = ("COMPLETED", "UPLOADING")


def collectable(s: Session, exp_id: int) -> bool:
    """Whether experiment ``exp_id`` has a checkpoint :func:`collect` could mark
    DELETING (one COMPLETED or UPLOADING); when not, :func:`collect` would change
    nothing. One indexed probe in any session: the control loop asks in a read session
    before it takes the write lock and loads the experiment (issue 37: most trivial
    trials end without a checkpoint, and each end asked for a collection).

    Args:
        s: an open session (a read session suffices).
        exp_id: the experiment's id.
    """
    probe = select(CheckpointRow.uuid).where(
        CheckpointRow.experiment_id == exp_id, CheckpointRow.state.in_(_COLLECTABLE)
    )
    return s.scalar(probe.limit(1)) is not None


def collect(s: Session, ctx: MasterContext, exp: ExperimentRow) -> list[str]:
    """Mark the checkpoints the GC policy drops, and uploads that died with their
    trial, as DELETING; returns their uuids.

    Only checkpoints of finished trials are considered, so a running trial never loses
    the checkpoint it would resume from.
    """
    cfg = ctx.experiment_config(exp)
    storage = cfg.checkpoint_storage
    if storage is None:
        return []
    live_ckpts = s.scalars(
        select(CheckpointRow).where(
            CheckpointRow.experiment_id == exp.id,
            CheckpointRow.state.in_(_COLLECTABLE),
        )
    ).all()
    if not live_ckpts:  # nothing to collect: the trials need not be read
        return []
    # States only: every trial ended calls this, so whole rows (JSON columns) of a
    # long search would be decoded again and again (issue 19).
    finished = {
        trial_id
        for trial_id, state in s.execute(
            select(TrialRow.id, TrialRow.state).where(TrialRow.experiment_id == exp.id)
        )
        if is_terminal(state)
    }
    if not finished:
        return []
    ckpts: list[CheckpointRow] = []
    orphans: list[CheckpointRow] = []
    for c in live_ckpts:
        if c.trial_id not in finished:
            continue
        # An upload its trial never finished (the process died): its objects go.
        (orphans if c.state == "UPLOADING" else ckpts).append(c)
    for c in orphans:
        c.state = "DELETING"
    ctx.deletions.note_orphaned_uploads([c.uuid for c in orphans])
    if not ckpts:
        return sorted(c.uuid for c in orphans)
    metric = cfg.searcher.metric
    vals: dict[tuple[int, int], float] = {}
    for m in s.scalars(
        select(MetricRow).where(MetricRow.trial_id.in_(finished), MetricRow.kind == "validation")
    ):
        v = m.values.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            vals[(m.trial_id, m.total_batches)] = float(v)
    facts = [
        CheckpointFacts(
            c.uuid, c.trial_id, c.total_batches, vals.get((c.trial_id, c.total_batches))
        )
        for c in ckpts
    ]
    policy = GCPolicy(
        storage.save_experiment_best, storage.save_trial_best, storage.save_trial_latest
    )
    doomed = checkpoints_to_delete(facts, policy, cfg.searcher.smaller_is_better)
    doomed -= warm_start_sources(s)
    doomed -= registered.registered_uuids(s, doomed)  # model versions keep theirs
    for c in ckpts:
        if c.uuid in doomed:
            # DELETED once the files are gone (checkpoint_gc.process_deletions).
            c.state = "DELETING"
    return sorted(set(doomed) | {c.uuid for c in orphans})


def warm_start_sources(s: Session) -> set[str]:
    """Checkpoint uuids other experiments start their trials from, and those that live
    clones (PBT) start from (never collected)."""
    out = set()
    for config in s.scalars(select(ExperimentRow.config)):
        uuid_ = (config or {}).get("searcher", {}).get("source_checkpoint_uuid")
        if uuid_:
            out.add(uuid_)
    for uuid_, state in s.execute(
        select(TrialRow.warm_start_checkpoint, TrialRow.state).where(
            TrialRow.warm_start_checkpoint.is_not(None)
        )
    ):
        if not is_terminal(state):
            out.add(uuid_)
    return out


def remove_checkpoints(config: dict[str, Any], uuids: list[str]) -> None:
    """Delete checkpoints' files from the storage of an experiment config (JSON form)
    now; a failure is logged, never raised (an experiment's deletion goes on)."""
    if not uuids:
        return
    try:
        storage = build_storage(storage_config(config))
    except Exception:
        log.exception("cannot open checkpoint storage to delete %d checkpoints", len(uuids))
        return
    for uuid in uuids:
        try:
            storage.delete(uuid)
        except Exception:
            log.exception("could not delete checkpoint %s from storage", uuid)


_STORAGE = TypeAdapter(CheckpointStorageConfig)


def storage_config(config: dict[str, Any]) -> Any:
    """The ``checkpoint_storage`` section of an experiment config (JSON form: the
    experiment's, or the copy a model version keeps) as a validated config object.

    Raises:
        ValueError: the section is missing or invalid (pydantic's ValidationError).
    """
    section = config.get("checkpoint_storage")
    if not section:
        raise ValueError("the config has no checkpoint_storage")
    return _STORAGE.validate_python(section)


def schedule_gc_after_start(s: Session, ctx: MasterContext) -> None:
    """Queue checkpoint GC for every experiment that has live checkpoints, so GC that was
    due when the master stopped runs now (the decision is idempotent)."""
    ids = set(
        s.scalars(
            select(CheckpointRow.experiment_id)
            .where(CheckpointRow.state.in_(("COMPLETED", "UPLOADING")))
            .distinct()
        )
    )
    ctx.gc_due.update(ids)


def mark_deleting(s: Session, uuid: str) -> int | None:
    """Mark one checkpoint of a finished experiment DELETING (``det checkpoint delete``):
    its files are deleted by :class:`~dauntless.master.checkpoint_gc.CheckpointDeletions`,
    which marks it DELETED once they are gone and retries with backoff while the storage
    fails, so a checkpoint is never marked DELETED with its files still stored.

    Returns:
        Its experiment's id, or None when it is DELETED already (nothing to do).

    Raises:
        NotFound: no such checkpoint.
        Conflict: its experiment is not finished (a running trial may resume from any
            of its checkpoints), or a model version names it (the message names them).
    """
    ckpt = s.get(CheckpointRow, uuid)
    if ckpt is None:
        raise NotFound(f"checkpoint {uuid} not found")
    registered.refuse_registered(s, uuid, "be deleted")
    exp = s.get(ExperimentRow, ckpt.experiment_id)
    if exp is None:
        raise NotFound(f"checkpoint {uuid} not found")
    if not is_terminal(exp.state):
        raise Conflict(
            f"checkpoint {uuid} belongs to experiment {exp.id}, which is {exp.state}; "
            "checkpoints can be deleted once the experiment has finished"
        )
    if ckpt.state == "DELETED":
        return None
    ckpt.state = "DELETING"
    return exp.id


def read_checkpoint(s: Session, uuid: str) -> CheckpointRow:
    """A checkpoint.

    Raises:
        NotFound: no such checkpoint.
    """
    c = s.get(CheckpointRow, uuid)
    if c is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return c


def validation_values(
    s: Session, pairs: list[tuple[int, int]], metric: str
) -> dict[tuple[int, int], Any]:
    """The value of ``metric`` in the validation reports at ``(trial id, total batches)``
    pairs (a checkpoint's searcher metric), by pair; None where a report lacks it, pairs
    without a report left out.

    Only the reports at those batch counts are read (issue 22: reading every validation
    row of 1,000 trials x 1,000 reports took seconds), 500 pairs a query.
    """
    values: dict[tuple[int, int], Any] = {}
    pairs = sorted(set(pairs))
    for i in range(0, len(pairs), 500):
        for tid, batches, vals in s.execute(
            select(MetricRow.trial_id, MetricRow.total_batches, MetricRow.values).where(
                tuple_(MetricRow.trial_id, MetricRow.total_batches).in_(pairs[i : i + 500]),
                MetricRow.kind == "validation",
            )
        ):
            values[(tid, batches)] = vals.get(metric) if isinstance(vals, dict) else None
    return values
