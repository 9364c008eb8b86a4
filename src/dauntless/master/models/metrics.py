"""Metrics: a trial's training and validation reports (stored once each, whatever the
retries), the validations the searcher hears of, and a running trial's progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import searcher_length

from ..context import MasterContext
from ..db import ExperimentRow, MetricRow, TrialRow
from ..errors import NotFound
from ..metric_series import store_metric_rows
from ..metric_store import store_training_rows, training_rows
from ..progress import experiment_progress
from ..states import is_terminal
from . import experiment_index, lifecycle, search, trials


class MetricsIn(NamedTuple):
    """One metrics report of a trial, as the harness sends it (``POST
    /trials/{id}/metrics``): ``group`` is ``training`` or ``validation``,
    ``steps_completed`` the batches trained when it was taken, ``batch_metrics`` the
    per-batch values of a training report (or None)."""

    group: str
    steps_completed: int
    trial_run_id: int
    metrics: dict[str, Any]
    batch_metrics: list[Any] | None


def report_metrics(
    ctx: MasterContext,
    trial_id: int,
    group: str,
    steps_completed: int,
    trial_run_id: int,
    metrics: dict[str, Any],
    batch_metrics: list[Any] | None,
) -> bool:
    """Store one metrics report; a second report at the same batch count is ignored.

    Returns:
        True if stored, False if it was a duplicate.

    Raises:
        NotFound: no such trial.
    """
    report = MetricsIn(group, steps_completed, trial_run_id, metrics, batch_metrics)
    return report_metrics_batch(ctx, trial_id, [report])[0]


def report_metrics_batch(
    ctx: MasterContext, trial_id: int, reports: Sequence[MetricsIn]
) -> list[bool]:
    """Store several metrics reports of one trial in one transaction.

    Each report is stored as :func:`report_metrics` would store it alone: a report
    whose ``(group, steps_completed)`` is already stored, or comes earlier in
    ``reports``, is ignored. A trial's harness sends its training reports this way,
    gathered over about a second, so that a trial reporting every few milliseconds
    costs the master one request and one transaction per second, not one per report.
    Training-only reports of concurrent requests (other trials') may share that
    transaction (:class:`~dauntless.master.group_commit.GroupCommit`); either way
    this returns once it has committed, so what it acknowledges is durable.

    Args:
        trial_id: the reporting trial.
        reports: the reports, in the order they were made.

    Returns:
        One flag per report: True if stored, False if it was a duplicate.

    Raises:
        NotFound: no such trial.
    """
    if not reports:
        return []
    if all(r.group == "training" for r in reports):
        # Training reports of concurrent requests share a transaction (and its
        # commit); a validation report feeds the searcher, whose in-memory state a
        # shared transaction's rollback and rerun could not undo: alone. The rows are
        # made here, without the lock; the transaction's jobs store theirs together.
        rows = training_rows(trial_id, reports, ctx.clock())
        flags = ctx.metric_commits.run_batched(store_training_rows, (trial_id, rows))
        if any(flags):  # on PostgreSQL stored by statements the ORM does not see
            ctx.experiment_changes.set()
        return flags
    with ctx.db.write() as s:
        return store_metrics(s, ctx, trial_id, reports)


def store_metrics(
    s: Session, ctx: MasterContext, trial_id: int, reports: Sequence[MetricsIn]
) -> list[bool]:
    """:func:`report_metrics_batch` in the write session ``s``.

    Raises:
        NotFound: no such trial.
    """
    if all(r.group == "training" for r in reports):  # no searcher: the trial only
        trial = s.get(TrialRow, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        exp = None
    else:
        trial, exp = trials.get_trial(s, trial_id)
    keys = {(r.group, r.steps_completed) for r in reports}
    stored_keys = {
        (kind, batches)
        for kind, batches in s.execute(
            select(MetricRow.kind, MetricRow.total_batches).where(
                MetricRow.trial_id == trial_id,
                MetricRow.total_batches.in_({k[1] for k in keys}),
            )
        )
    }
    now = ctx.clock()
    flags: list[bool] = []
    rows: list[dict[str, Any]] = []
    for r in reports:
        key = (r.group, r.steps_completed)
        if key in stored_keys:
            flags.append(False)
            continue
        stored_keys.add(key)
        flags.append(True)
        (row,) = training_rows(trial_id, [r], now)  # the same row shape for both groups
        rows.append(row)
        metrics = row["values"]
        trial.total_batches = max(trial.total_batches, r.steps_completed)
        if r.group == "validation":
            assert exp is not None  # read above whenever a report is a validation
            note_validation(ctx, trial, exp, metrics, s)
            searcher_sees_validation(s, ctx, trial, exp, metrics)
    if not rows:
        return flags
    # Plain rows (no ORM objects) and the reports queued for the lazy fold, in the
    # same transaction: committed means durable and eventually charted
    # (metric_series.MetricFolder; readers fold first).
    store_metric_rows(s, rows)
    return flags


def note_validation(
    ctx: MasterContext, trial: Any, exp: Any, metrics: dict[str, Any], s: Session | None = None
) -> None:
    """Keep ``trial.best_validation`` the best searcher-metric value validated, and (with
    a session ``s``) the experiment's best and search index with it
    (:func:`~dauntless.master.models.experiment_index.note_best_validation`)."""
    cfg = ctx.experiment_config(exp)
    value = metrics.get(cfg.searcher.metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        best = trial.best_validation
        if best is None or (value < best if cfg.searcher.smaller_is_better else value > best):
            trial.best_validation = float(value)
            if s is not None:
                experiment_index.note_best_validation(s, exp, trial, float(value))


def searcher_sees_validation(
    s: Session,
    ctx: MasterContext,
    trial: TrialRow,
    exp: ExperimentRow,
    metrics: dict[str, Any],
) -> None:
    """Hand a trial's validation metrics to the searcher (0.38: ASHA decides)."""
    if trial.searcher_closed or is_terminal(trial.state) or is_terminal(exp.state):
        return
    cfg = ctx.experiment_config(exp)
    if searcher_length(cfg) is not None:
        return  # ≤0.37 mode: the searcher hears of completed operations instead
    searcher = search.searcher_for(ctx, exp)
    try:
        ops = searcher.on_validation_metrics(trial.request_id, metrics)
    except ValueError as exc:
        lifecycle.searcher_failed(s, ctx, exp, str(exc), trial)
        return
    search.apply(s, ctx, exp, searcher, ops)


def report_progress(s: Session, ctx: MasterContext, trial_id: int, progress: float) -> None:
    """Record the fraction (0..1) of its training a running trial has done, and count
    it into its experiment's progress (:func:`experiment_progress`).

    Raises:
        NotFound: no such trial.
    """
    trial, exp = trials.get_trial(s, trial_id)
    trial.progress = min(max(float(progress), 0.0), 1.0)
    if not is_terminal(exp.state):
        config = ctx.experiment_config(exp)
        exp.progress = experiment_progress(
            s, exp, search.searcher_for(ctx, exp, read_only=True), config
        )
