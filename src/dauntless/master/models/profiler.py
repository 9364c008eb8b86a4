"""The system-metrics profiler's rows (issue 34 scope 2): store a trial's ``profiling``
reports and read them back. Session-first functions over ``trial_profiler_metrics``.

Bound: a report replaces the row of the same trial, group and agent in the same
:data:`~dauntless.config.PROFILER_BUCKET_SECONDS` bucket of the master's clock, so a trial
has at most ``agents x groups x 3600 / PROFILER_BUCKET_SECONDS`` rows per hour
(:func:`dauntless.core.max_rows_per_hour`) however often its profiler reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dauntless.config import PROFILER_BUCKET_SECONDS, PROFILING_GROUPS

from ..db import TrialProfilerMetricRow, TrialRow
from ..errors import BadRequest, NotFound

MAX_VALUES = 64
"""Most names in one report's values, and in one nested value (a GPU's, a timing's)."""

MAX_READ_ROWS = 5_000
"""Most rows one read returns."""


def _number(value: Any, where: str) -> float | None:
    """``value`` as a float; None for a non-finite one (dropped).

    Raises:
        BadRequest: not a number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{where}: expected a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        return None
    return number if math.isfinite(number) else None


def _clean(metrics: Any, where: str) -> dict[str, Any]:
    """The report's values: numbers, or one level of name -> number (a GPU's values
    under its uuid, a timing's under its name); non-finite numbers are dropped.

    Raises:
        BadRequest: too many names, or a value of another kind.
    """
    if not isinstance(metrics, dict) or len(metrics) > MAX_VALUES:
        raise BadRequest(f"{where}.metrics: expected an object of at most {MAX_VALUES} names")
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            if len(value) > MAX_VALUES:
                raise BadRequest(f"{where}.metrics.{name}: at most {MAX_VALUES} names")
            inner = {}
            for sub, v in value.items():
                number = _number(v, f"{where}.metrics.{name}.{sub}")
                if number is not None:
                    inner[str(sub)] = number
            out[str(name)] = inner
        else:
            try:
                number = _number(value, f"{where}.metrics.{name}")
            except BadRequest:
                raise BadRequest(
                    f"{where}.metrics.{name}: expected a number or an object of numbers"
                ) from None
            if number is not None:
                out[str(name)] = number
    return out


def report_profiler_metrics(
    s: Session, now: float, trial_id: int, reports: Sequence[dict[str, Any]]
) -> int:
    """Store one profiler report of a trial: a row per ``{group, agent_id, metrics}``,
    replacing the row of the same group and agent in the current bucket.

    Args:
        s: a write session.
        now: the master's clock, seconds since the epoch.
        trial_id: the trial.
        reports: ``{group, agent_id, metrics}`` dicts (checked by the route's schema;
            ``metrics`` checked here).

    Returns:
        Rows written (inserted or replaced).

    Raises:
        NotFound: no such trial.
        BadRequest: an unknown group, or values that are not numbers.
    """
    if s.get(TrialRow, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    bucket = int(now // PROFILER_BUCKET_SECONDS)
    stored = 0
    for i, report in enumerate(reports):
        group, agent_id = report["group"], report["agent_id"]
        if group not in PROFILING_GROUPS:
            raise BadRequest(f"reports[{i}].group: expected one of {', '.join(PROFILING_GROUPS)}")
        values = _clean(report["metrics"], f"reports[{i}]")
        row = s.scalars(
            select(TrialProfilerMetricRow).where(
                TrialProfilerMetricRow.trial_id == trial_id,
                TrialProfilerMetricRow.group == group,
                TrialProfilerMetricRow.agent_id == agent_id,
                TrialProfilerMetricRow.bucket == bucket,
            )
        ).one_or_none()
        if row is None:
            s.add(
                TrialProfilerMetricRow(
                    trial_id=trial_id,
                    group=group,
                    agent_id=agent_id,
                    bucket=bucket,
                    reported_at=now,
                    values=values,
                )
            )
        else:
            row.reported_at = now
            row.values = values
        stored += 1
    return stored


def read_profiler_metrics(
    s: Session,
    trial_id: int,
    group: str | None = None,
    agent_id: str | None = None,
    after_id: int = 0,
    limit: int = 1_000,
) -> list[TrialProfilerMetricRow]:
    """A trial's profiler rows with ids above ``after_id``, oldest first.

    Args:
        s: a read session.
        trial_id: the trial.
        group, agent_id: only these (None: all).
        after_id: the last id already read (0: from the start).
        limit: most rows, 1..:data:`MAX_READ_ROWS`.

    Raises:
        NotFound: no such trial.
    """
    if s.get(TrialRow, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    q = select(TrialProfilerMetricRow).where(
        TrialProfilerMetricRow.trial_id == trial_id, TrialProfilerMetricRow.id > after_id
    )
    if group is not None:
        q = q.where(TrialProfilerMetricRow.group == group)
    if agent_id is not None:
        q = q.where(TrialProfilerMetricRow.agent_id == agent_id)
    q = q.order_by(TrialProfilerMetricRow.id).limit(max(1, min(limit, MAX_READ_ROWS)))
    return list(s.scalars(q))


def available_series(s: Session, trial_id: int) -> list[dict[str, Any]]:
    """The series a trial's profiler reported, by group and agent: ``{group, agent_id,
    names, time, latest}`` (the latest row's time and values, and its value names,
    nested ones as ``outer/inner``).

    Raises:
        NotFound: no such trial.
    """
    if s.get(TrialRow, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    newest = (
        select(func.max(TrialProfilerMetricRow.id))
        .where(TrialProfilerMetricRow.trial_id == trial_id)
        .group_by(TrialProfilerMetricRow.group, TrialProfilerMetricRow.agent_id)
    )
    latest = sorted(
        s.scalars(select(TrialProfilerMetricRow).where(TrialProfilerMetricRow.id.in_(newest))),
        key=lambda r: (r.group, r.agent_id),
    )
    out = []
    for row in latest:
        names = sorted(
            f"{k}/{sub}" if isinstance(v, dict) else k
            for k, v in row.values.items()
            for sub in (v if isinstance(v, dict) else [None])
        )
        out.append(
            {
                "group": row.group,
                "agent_id": row.agent_id,
                "names": names,
                "time": row.reported_at,
                "latest": row.values,
            }
        )
    return out
