"""Trials: reads and small edits of ``TrialRow`` with a caller's session (what moves a
trial through its states is :mod:`.search`, :mod:`.runs` and :mod:`.lifecycle`), and the
reads of the trial routes: a trial's metrics reports, log lines and checkpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from ..db import CheckpointRow, ExperimentRow, MetricRow, TaskLogRow, TrialRow
from ..errors import BadRequest, NotFound
from ..states import State, is_terminal


def searcher_operation(session: Session, trial_id: int) -> dict[str, Any]:
    """The trial's next searcher operation (docs/protocol.md, harness routes):
    ``{"op": {"length": batches} | None, "completed": bool}``; ``completed`` once the
    searcher closed the trial or it is no longer ACTIVE and no operation is open.

    Raises:
        NotFound: no such trial.
    """
    trial = session.get(TrialRow, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    op_len, done = trial.searcher_op_length, trial.searcher_completed_length
    if op_len is not None and (done is None or op_len > done):
        return {"op": {"length": op_len}, "completed": False}
    if trial.searcher_closed or trial.state != State.ACTIVE.value:
        return {"op": None, "completed": True}
    return {"op": None, "completed": False}


def get_trial(session: Session, trial_id: int) -> tuple[TrialRow, ExperimentRow]:
    """A trial and its experiment.

    Raises:
        NotFound: no such trial.
    """
    trial = session.identity_map.get(identity_key(TrialRow, trial_id))
    if trial is None:  # both rows in one statement (issue 37: statements per trial)
        row = session.execute(
            select(TrialRow, ExperimentRow)
            .join(ExperimentRow, ExperimentRow.id == TrialRow.experiment_id)
            .where(TrialRow.id == trial_id)
        ).first()
        if row is None:  # the FK guarantees the experiment of a trial that exists
            raise NotFound(f"trial {trial_id} not found")
        return row[0], row[1]
    exp = session.get(ExperimentRow, trial.experiment_id)
    assert exp is not None  # FK guarantees it
    return trial, exp


def live_trials(session: Session, exp_id: int) -> list[TrialRow]:
    """The experiment's trials that have not ended."""
    return [
        t
        for t in session.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id))
        if not is_terminal(t.state)
    ]


def trial_by_request(session: Session, exp_id: int, request_id: str) -> TrialRow:
    """The experiment's trial the searcher knows as ``request_id``.

    Raises:
        RuntimeError: no such trial (the searcher's state and the rows disagree).
    """
    trial = session.scalar(
        select(TrialRow).where(TrialRow.experiment_id == exp_id, TrialRow.request_id == request_id)
    )
    if trial is None:
        raise RuntimeError(f"searcher named unknown trial request {request_id}")
    return trial


def report_early_exit(session: Session, trial_id: int, reason: str) -> None:
    """Mark that the trial will exit early (``INVALID_HP``); applied at its exit.

    Raises:
        BadRequest: an unknown reason.
        NotFound: no such trial.
    """
    if reason not in ("INVALID_HP", "EXITED_REASON_INVALID_HP"):
        raise BadRequest(f"unknown early-exit reason {reason!r}", [("reason", "INVALID_HP")])
    trial, _ = get_trial(session, trial_id)
    trial.early_exit_reason = "INVALID_HP"


def read_trial(session: Session, trial_id: int) -> TrialRow:
    """A trial.

    Raises:
        NotFound: no such trial.
    """
    trial = session.get(TrialRow, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def experiment_trials(
    session: Session,
    exp_id: int,
    after: int = 0,
    limit: int | None = None,
    *,
    skip: int = 0,
) -> list[TrialRow]:
    """The trials of the experiment by id (none for an unknown experiment): every one,
    or with ``limit`` at most that many whose id is above ``after`` (one page of a
    list read page by page, :func:`dauntless.master.routes.trial_list_response`), the
    first ``skip`` of those left out."""
    query = select(TrialRow).where(TrialRow.experiment_id == exp_id, TrialRow.id > after)
    query = query.order_by(TrialRow.id).limit(limit)
    return list(session.scalars(query.offset(skip) if skip else query))


def trial_counts_and_bests(
    session: Session, exp_ids: list[int]
) -> dict[int, tuple[int, float | None, float | None]]:
    """``{experiment id: (trials, smallest best validation, largest)}`` of the
    experiments ``exp_ids`` that have trials, aggregated by the database (issue 37: an
    experiment's view read one row per trial, 10,000 for a large search); the extremes
    are None when no trial has validated."""
    if not exp_ids:
        return {}
    rows = session.execute(
        select(
            TrialRow.experiment_id,
            func.count(),
            func.min(TrialRow.best_validation),
            func.max(TrialRow.best_validation),
        )
        .where(TrialRow.experiment_id.in_(exp_ids))
        .group_by(TrialRow.experiment_id)
    )
    return {e: (int(n), lo, hi) for e, n, lo, hi in rows}


def trial_bests(session: Session, exp_ids: list[int]) -> list[tuple[int, int, float | None]]:
    """``(experiment id, trial id, best validation or None)`` of every trial of the
    experiments ``exp_ids``."""
    if not exp_ids:
        return []
    rows = session.execute(
        select(TrialRow.experiment_id, TrialRow.id, TrialRow.best_validation).where(
            TrialRow.experiment_id.in_(exp_ids)
        )
    )
    return [(e, t, b) for e, t, b in rows]


def latest_validations(session: Session, trial_ids: list[int]) -> dict[int, MetricRow]:
    """Each trial's validation report at its largest batch count, by trial id (trials
    without a validation are left out)."""
    if not trial_ids:
        return {}
    latest = (
        select(MetricRow.trial_id, func.max(MetricRow.total_batches).label("tb"))
        .where(MetricRow.trial_id.in_(trial_ids), MetricRow.kind == "validation")
        .group_by(MetricRow.trial_id)
        .subquery()
    )
    rows = session.execute(
        select(MetricRow)
        .join(
            latest,
            (MetricRow.trial_id == latest.c.trial_id) & (MetricRow.total_batches == latest.c.tb),
        )
        .where(MetricRow.kind == "validation")
    ).scalars()
    return {m.trial_id: m for m in rows}


def validation_metrics_at(session: Session, trial_id: int, total_batches: int) -> dict[str, Any]:
    """The trial's validation metrics reported at ``total_batches`` (``{}`` if none)."""
    row = session.scalar(
        select(MetricRow.values).where(
            MetricRow.trial_id == trial_id,
            MetricRow.kind == "validation",
            MetricRow.total_batches == total_batches,
        )
    )
    return dict(row or {})


#: The columns of a metrics report that its API view shows (``schemas.metric_view``).
METRIC_REPORT_COLUMNS = (
    MetricRow.id,
    MetricRow.trial_id,
    MetricRow.kind,
    MetricRow.total_batches,
    MetricRow.epoch,
    MetricRow.trial_run_id,
    MetricRow.values,
    MetricRow.reported_at,
)


def metrics_page(
    session: Session,
    trial_id: int,
    group: str | None,
    after_batches: int | None,
    limit: int | None,
) -> tuple[list[Row[Any]], int | None]:
    """One page of a trial's metrics reports, by batch count then group.

    The reports are plain rows of :data:`METRIC_REPORT_COLUMNS` (attributes named as
    :class:`MetricRow`'s), not ORM objects: building 1,000 tracked objects was a third
    of a page's read (issue 19, benchmarks/metric_read.py), and a page is never changed.
    Per-batch metrics are not read (they have their own route).

    Args:
        trial_id: the trial (no check that it exists: an unknown one has no reports).
        group: ``training`` or ``validation`` only (None: both).
        after_batches: only reports above this batch count (None: from the start).
        limit: at most about this many reports (None: all); a page never splits one
            batch count's reports, so it may hold a few more.

    Returns:
        ``(reports, cursor)``: ``cursor`` is the last batch count of a full page (pass
        it as ``after_batches`` for the next), None when this page is the last.
    """
    q = select(*METRIC_REPORT_COLUMNS).where(MetricRow.trial_id == trial_id)
    if group:
        q = q.where(MetricRow.kind == group)
    if after_batches is not None:
        q = q.where(MetricRow.total_batches > after_batches)
    q = q.order_by(MetricRow.total_batches, MetricRow.kind)
    rows = list(session.execute(q if limit is None else q.limit(limit)))
    cursor = None
    if limit is not None and len(rows) == limit:
        # The rest of the last batch count's reports (the other group), so that the
        # cursor never splits one count across pages.
        cursor = rows[-1].total_batches
        seen = {r.id for r in rows}
        rows += [
            r
            for r in session.execute(q.where(MetricRow.total_batches == cursor))
            if r.id not in seen
        ]
    return rows, cursor


def batch_metrics(session: Session, trial_id: int) -> list[tuple[int, Any]]:
    """``(total batches, per-batch metrics)`` of the trial's training reports that carry
    per-batch metrics, by batch count.

    Raises:
        NotFound: no such trial.
    """
    read_trial(session, trial_id)
    rows = session.execute(
        select(MetricRow.total_batches, MetricRow.batch_metrics)
        .where(
            MetricRow.trial_id == trial_id,
            MetricRow.kind == "training",
            MetricRow.batch_metrics.is_not(None),
        )
        .order_by(MetricRow.total_batches)
    )
    return [(total, per_batch) for total, per_batch in rows]


def trial_logs(
    session: Session, trial_id: int, after_id: int, limit: int
) -> tuple[TrialRow, list[TaskLogRow]]:
    """The trial and at most ``limit`` of its log lines with ids above ``after_id``, by id.

    Raises:
        NotFound: no such trial.
    """
    trial = read_trial(session, trial_id)
    rows = session.scalars(
        select(TaskLogRow)
        .where(TaskLogRow.trial_id == trial_id, TaskLogRow.id > after_id)
        .order_by(TaskLogRow.id)
        .limit(limit)
    ).all()
    return trial, list(rows)


def trial_checkpoints(session: Session, trial_id: int) -> list[CheckpointRow]:
    """The trial's checkpoints, by batch count (none for an unknown trial)."""
    return list(
        session.scalars(
            select(CheckpointRow)
            .where(CheckpointRow.trial_id == trial_id)
            .order_by(CheckpointRow.total_batches)
        )
    )
