"""Historical cluster usage (issue 34 scope 5): slot time from allocation records.

Usage is allocation time, not utilisation (as in Determined): a part of an allocation
holding ``n`` slots from ``started_at`` to ``ended_at`` (now while it runs) used ``n``
times that many slot-seconds. The records are the ``allocations`` rows, which survive
restarts of the master; a part that never started (no ``started_at``) used nothing.
Entries are clipped to the window asked for, and the daily (UTC) or monthly sums split
an entry at the period's boundaries.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ..db import AllocationRow, ExperimentRow, ProjectRow, TaskRow, TrialRow, WorkspaceRow

MAX_ENTRIES = 200_000
"""The most allocation parts one report reads (a year of a busy cluster); a longer
window is refused, naming this bound."""


@dataclass(frozen=True)
class UsageEntry:
    """One allocation part's use within the window.

    Attributes:
        allocation_id: the part's id.
        kind: ``TRIAL``, or the task's type (``COMMAND``, ``NOTEBOOK``, ``SHELL``,
            ``TENSORBOARD``).
        experiment_id: the trial's experiment, None for tasks.
        username, user_id: the owner.
        workspace: the workspace's name ("" when it is gone).
        resource_pool: the pool its config named.
        labels: the experiment's labels.
        slots: slots held.
        start_time, end_time: seconds since the epoch, clipped to the window.
    """

    allocation_id: str
    kind: str
    experiment_id: int | None
    username: str
    user_id: int | None
    workspace: str
    resource_pool: str
    labels: tuple[str, ...]
    slots: int
    start_time: float
    end_time: float

    @property
    def seconds(self) -> float:
        """Wall seconds within the window."""
        return max(0.0, self.end_time - self.start_time)

    @property
    def slot_seconds(self) -> float:
        """Slot-seconds within the window."""
        return self.seconds * self.slots


class UsageWindowError(ValueError):
    """A window the report refuses (start after end, too many records)."""


def usage_entries(s: Session, after: float, before: float, now: float) -> list[UsageEntry]:
    """Every allocation part's use between ``after`` and ``before``.

    Args:
        s: a read session.
        after, before: the window, seconds since the epoch.
        now: the end of parts still running.

    Raises:
        UsageWindowError: ``after`` is past ``before``, or the window holds more than
            :data:`MAX_ENTRIES` parts.
    """
    if after > before:
        raise UsageWindowError("start time cannot be after end time")
    rows = list(
        s.scalars(
            select(AllocationRow)
            .where(
                AllocationRow.started_at.is_not(None),
                AllocationRow.started_at < before,
                or_(AllocationRow.ended_at.is_(None), AllocationRow.ended_at > after),
            )
            .order_by(AllocationRow.started_at)
            .limit(MAX_ENTRIES + 1)
        )
    )
    if len(rows) > MAX_ENTRIES:
        raise UsageWindowError(
            f"the window holds more than {MAX_ENTRIES} allocations: ask for a shorter one"
        )
    trial_ids = {r.trial_id for r in rows if r.trial_id is not None}
    task_ids = {r.task_id for r in rows if r.task_id is not None}
    exp_of = dict(
        s.execute(
            select(TrialRow.id, TrialRow.experiment_id).where(TrialRow.id.in_(trial_ids))
        ).all()
    )
    exps = {
        e.id: e
        for e in s.scalars(select(ExperimentRow).where(ExperimentRow.id.in_(set(exp_of.values()))))
    }
    tasks = {t.id: t for t in s.scalars(select(TaskRow).where(TaskRow.id.in_(task_ids)))}
    ws_of_project = dict(
        s.execute(
            select(ProjectRow.id, ProjectRow.workspace_id).where(
                ProjectRow.id.in_({e.project_id for e in exps.values()})
            )
        ).all()
    )
    ws_names = dict(s.execute(select(WorkspaceRow.id, WorkspaceRow.name)).all())
    out = []
    for r in rows:
        started = float(r.started_at or 0.0)
        ended = float(r.ended_at) if r.ended_at is not None else now
        start, end = max(started, after), min(ended, before)
        if end <= start:
            continue
        facts = _facts(r, exp_of, exps, tasks, ws_of_project, ws_names)
        if facts is None:
            continue
        out.append(
            UsageEntry(
                allocation_id=r.id,
                slots=len(r.slot_ids or []),
                start_time=start,
                end_time=end,
                **facts,
            )
        )
    return out


def _facts(
    r: AllocationRow,
    exp_of: dict[int, int],
    exps: dict[int, ExperimentRow],
    tasks: dict[str, TaskRow],
    ws_of_project: dict[int, int],
    ws_names: dict[int, str],
) -> dict[str, Any] | None:
    if r.trial_id is not None:
        exp = exps.get(exp_of.get(r.trial_id, -1))
        if exp is None:
            return None
        config = exp.config or {}
        return {
            "kind": "TRIAL",
            "experiment_id": exp.id,
            "username": exp.owner,
            "user_id": exp.owner_id,
            "workspace": ws_names.get(ws_of_project.get(exp.project_id, -1), ""),
            "resource_pool": _pool(config),
            "labels": tuple(str(x) for x in config.get("labels") or []),
        }
    task = tasks.get(r.task_id or "")
    if task is None:
        return None
    return {
        "kind": task.type.upper(),
        "experiment_id": None,
        "username": task.owner,
        "user_id": task.owner_id,
        "workspace": ws_names.get(task.workspace_id, ""),
        "resource_pool": _pool(task.config or {}),
        "labels": (),
    }


def _pool(config: dict[str, Any]) -> str:
    return str((config.get("resources") or {}).get("resource_pool") or "default")


GROUPS = ("username", "workspace", "resource_pool", "experiment_label")
"""What slot time is summed by (an entry with several labels counts under each)."""


def _keys(e: UsageEntry, group: str) -> tuple[str, ...]:
    if group == "experiment_label":
        return e.labels
    return (str(getattr(e, group)),)


def _period_start(t: float, monthly: bool) -> _dt.datetime:
    day = _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return day.replace(day=1) if monthly else day


def _next_period(start: _dt.datetime, monthly: bool) -> _dt.datetime:
    if not monthly:
        return start + _dt.timedelta(days=1)
    return (start.replace(day=28) + _dt.timedelta(days=4)).replace(day=1)


def aggregate(entries: list[UsageEntry], monthly: bool = False) -> list[dict[str, Any]]:
    """Slot-seconds per UTC day (or month), in total and by user, workspace, pool and
    experiment label (Determined's ``aggregated`` entries, plus ``by_workspace``).

    Returns:
        ``[{period_start (YYYY-MM-DD), period (DAILY|MONTHLY), seconds, by_username,
        by_workspace, by_resource_pool, by_experiment_label}]`` by period, periods with
        no use left out.
    """
    periods: dict[str, dict[str, Any]] = {}
    for e in entries:
        t = e.start_time
        while t < e.end_time:
            start = _period_start(t, monthly)
            end = min(_next_period(start, monthly).timestamp(), e.end_time)
            slot_seconds = (end - t) * e.slots
            key = start.date().isoformat()
            p = periods.setdefault(
                key,
                {
                    "period_start": key,
                    "period": "MONTHLY" if monthly else "DAILY",
                    "seconds": 0.0,
                    **{f"by_{g}": {} for g in GROUPS},
                },
            )
            p["seconds"] += slot_seconds
            for g in GROUPS:
                for k in _keys(e, g):
                    p[f"by_{g}"][k] = p[f"by_{g}"].get(k, 0.0) + slot_seconds
            t = end
    return [periods[k] for k in sorted(periods)]


def totals(entries: list[UsageEntry], group: str) -> dict[str, float]:
    """Slot-seconds of the window by ``group`` (one of :data:`GROUPS`, or ``total``)."""
    out: dict[str, float] = {}
    for e in entries:
        keys = ("total",) if group == "total" else _keys(e, group)
        for k in keys:
            out[k] = out.get(k, 0.0) + e.slot_seconds
    return out
