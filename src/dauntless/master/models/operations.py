"""The master's operation (issue 34 scope 4): the cluster message and log retention.

Session-first functions, except :func:`delete_expired_logs`, which opens one short
write transaction per batch so that a large deletion never holds the write lock long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from ..db import (
    AllocationRow,
    ClusterMessageRow,
    Database,
    ExperimentRow,
    TaskLogRow,
    TaskResourceSampleRow,
    TaskRow,
    TrialRow,
)
from ..errors import BadRequest, NotFound

log = logging.getLogger("dauntless.master")

DAY_SECONDS = 86_400.0
MAX_MESSAGE_CHARS = 250
"""The longest cluster message (Determined's limit)."""

LOG_DELETE_BATCH = 5_000
"""Log lines deleted per transaction by :func:`delete_expired_logs`."""

_ENDED_TRIAL = ("COMPLETED", "CANCELED", "ERROR")
_ENDED_TASK = ("COMPLETED", "ERROR", "CANCELED")


# ----------------------------------------------------------------- cluster message


def set_cluster_message(
    s: Session,
    now: float,
    user_id: int | None,
    message: str,
    start_time: float | None = None,
    end_time: float | None = None,
) -> ClusterMessageRow:
    """Show ``message`` to every user from ``start_time`` (default now) until
    ``end_time`` (None: until cleared); messages still showing end at its start.

    Args:
        s: a write session.
        now: seconds since the epoch.
        user_id: who set it.
        message: 1..250 characters.
        start_time, end_time: seconds since the epoch.

    Raises:
        BadRequest: an empty or too long message, an end before the start or in the past.
    """
    message = message.strip()
    if not message or len(message) > MAX_MESSAGE_CHARS:
        raise BadRequest(
            f"message: must be 1 to {MAX_MESSAGE_CHARS} characters, got {len(message)}"
        )
    start = now if start_time is None else start_time
    if end_time is not None:
        if end_time < start:
            raise BadRequest("end_time: must not be before start_time")
        if end_time <= now:
            raise BadRequest("end_time: must be in the future")
    s.execute(
        update(ClusterMessageRow)
        .where(or_(ClusterMessageRow.end_time.is_(None), ClusterMessageRow.end_time > start))
        .values(end_time=start)
    )
    row = ClusterMessageRow(
        message=message, created_by=user_id, created_at=now, start_time=start, end_time=end_time
    )
    s.add(row)
    s.flush()
    return row


def clear_cluster_message(s: Session, now: float) -> None:
    """End every message showing or scheduled (``end_time`` becomes now)."""
    s.execute(
        update(ClusterMessageRow)
        .where(or_(ClusterMessageRow.end_time.is_(None), ClusterMessageRow.end_time > now))
        .values(end_time=now)
    )
    s.execute(delete(ClusterMessageRow).where(ClusterMessageRow.start_time > now))


def cluster_message(s: Session, now: float) -> ClusterMessageRow | None:
    """The message showing at ``now``, or None."""
    return s.scalar(
        select(ClusterMessageRow)
        .where(
            ClusterMessageRow.start_time <= now,
            or_(ClusterMessageRow.end_time.is_(None), ClusterMessageRow.end_time > now),
        )
        .order_by(ClusterMessageRow.start_time.desc())
        .limit(1)
    )


# ----------------------------------------------------------------- log retention


def set_log_retention(s: Session, exp_id: int, days: int) -> None:
    """Keep the logs of the experiment's trials ``days`` days after each ends (-1:
    forever; 0: until the next cleanup).

    Raises:
        NotFound: no such experiment.
        BadRequest: ``days`` outside -1..32767.
    """
    if not -1 <= days <= 32767:
        raise BadRequest(f"num_days: must be -1 (forever) or 0..32767, got {days}")
    exp = s.get(ExperimentRow, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    exp.log_retention_days = days


@dataclass(frozen=True)
class Expired:
    """Whose logs have expired: trial ids and generic tasks' allocation ids."""

    trials: list[int]
    allocations: list[str]


def expired_logs(s: Session, now: float, default_days: int) -> Expired:
    """The ended trials and tasks whose logs are past their retention at ``now``.

    A trial's days are its experiment's ``log_retention_days``, else ``default_days``
    (the master's ``retention_policy.log_retention_days``); a task's are
    ``default_days``. -1 keeps logs forever; running trials and tasks never expire.
    """
    days = func.coalesce(ExperimentRow.log_retention_days, default_days)
    trials = list(
        s.scalars(
            select(TrialRow.id)
            .join(ExperimentRow, ExperimentRow.id == TrialRow.experiment_id)
            .where(
                TrialRow.state.in_(_ENDED_TRIAL),
                TrialRow.end_time.is_not(None),
                days >= 0,
                TrialRow.end_time <= now - days * DAY_SECONDS,
            )
        )
    )
    allocations: list[str] = []
    if default_days >= 0:
        allocations = list(
            s.scalars(
                select(AllocationRow.id)
                .join(TaskRow, TaskRow.id == AllocationRow.task_id)
                .where(
                    TaskRow.state.in_(_ENDED_TASK),
                    TaskRow.end_time.is_not(None),
                    TaskRow.end_time <= now - default_days * DAY_SECONDS,
                )
            )
        )
    return Expired(trials, allocations)


def delete_expired_logs(
    db: Database, now: float, default_days: int, batch: int = LOG_DELETE_BATCH
) -> int:
    """Delete the log lines of every trial and task whose retention has passed, in
    transactions of at most ``batch`` lines each, and the ended tasks' resource samples
    (at most 360 an hour each: ``models/task_resources.py``) with them.

    Args:
        db: the master's database.
        now: seconds since the epoch.
        default_days: the master's ``retention_policy.log_retention_days``.
        batch: lines per transaction (>= 1).

    Returns:
        The number of lines deleted.
    """
    with db.read() as s:
        expired = expired_logs(s, now, default_days)
    removed = 0
    groups: list[tuple[str, list]] = [
        ("trial", expired.trials[i : i + 500]) for i in range(0, len(expired.trials), 500)
    ]
    groups += [
        ("alloc", expired.allocations[i : i + 500]) for i in range(0, len(expired.allocations), 500)
    ]
    for kind, keys in groups:
        column = TaskLogRow.trial_id if kind == "trial" else TaskLogRow.allocation_id
        while True:
            with db.write() as s:
                ids = list(s.scalars(select(TaskLogRow.id).where(column.in_(keys)).limit(batch)))
                if ids:
                    s.execute(delete(TaskLogRow).where(TaskLogRow.id.in_(ids)))
            removed += len(ids)
            if len(ids) < batch:
                break
        if kind == "alloc":  # an ended task's resource samples go with its logs
            with db.write() as s:
                s.execute(
                    delete(TaskResourceSampleRow).where(
                        TaskResourceSampleRow.allocation_id.in_(keys)
                    )
                )
    return removed


class LogCleanup:
    """A control-loop hook that deletes expired logs every ``interval`` seconds
    (``retention_policy.schedule``), in a thread of its own so that the loop never
    waits on it; a cleanup still running when the next is due is not doubled.

    Args:
        db: the master's database.
        default_days: the master's ``retention_policy.log_retention_days``.
        interval: seconds between cleanups (the first runs at the first call).
        clock: seconds since the epoch.
    """

    def __init__(
        self,
        db: Database,
        default_days: int,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.default_days = default_days
        self.interval = interval
        self.clock = clock
        self._last = -float("inf")
        self._thread: threading.Thread | None = None
        self.removed = 0

    def __call__(self) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._last = now
        self._thread = threading.Thread(
            target=self._run, args=(now,), name="log-retention", daemon=True
        )
        self._thread.start()

    def _run(self, now: float) -> None:
        try:
            removed = delete_expired_logs(self.db, now, self.default_days)
        except Exception:  # the next cleanup retries
            log.exception("deleting expired task logs failed")
            return
        self.removed += removed
        if removed:
            log.info("log retention deleted %d expired log line(s)", removed)


class ClusterMessageCache:
    """The cluster message as this master last stored it, for the header every API
    answer carries (``X-Det-Cluster-Message``) without a query per request.

    One master process owns the table, so the cache is loaded at start and replaced by
    the routes that set or clear the message.
    """

    def __init__(self) -> None:
        self._rows: list[tuple[str, float, float | None]] = []

    def load(self, s: Session, now: float) -> None:
        """Read the messages showing now or later."""
        rows = s.scalars(
            select(ClusterMessageRow).where(
                or_(ClusterMessageRow.end_time.is_(None), ClusterMessageRow.end_time > now)
            )
        )
        self._rows = [(r.message, r.start_time, r.end_time) for r in rows]

    def current(self, now: float) -> str | None:
        """The message showing at ``now``, or None."""
        showing = [
            (start, msg)
            for msg, start, end in self._rows
            if start <= now and (end is None or end > now)
        ]
        return max(showing)[1] if showing else None
