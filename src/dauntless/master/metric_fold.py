"""The fold of metric reports into their stored summaries (issue 19): queueing reports as
they are stored, folding what is pending in bulk (:func:`fold_pending`, run every
:data:`FOLD_INTERVAL` seconds by :class:`MetricFolder` and by every reader), and the
summaries built once from ``metrics`` rows of an upgraded database
(:func:`build_missing_summaries`). :mod:`dauntless.master.metric_series` describes the
scheme and its invariant.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Text, cast, delete, insert, select
from sqlalchemy.orm import Session

from .db import Database, TrialRow
from .m4_series import M4Series
from .metric_summary_rows import (
    _C,
    _FOLDED,
    _IN_CHUNK,
    _INSERT,
    _METRICS,
    _PENDING,
    _SELECT_NAMED,
    _SUMMARIES,
    _UPDATE_NAMED,
    TIME_SERIES,
    _folded_times,
    _load_values,
    _pack,
    _report_points,
    _rows,
    _summaries_from_metrics,
    _unpack,
)

log = logging.getLogger("dauntless.master.metric_series")

FOLD_INTERVAL = 5.0
"""Seconds between the background folds of pending reports (:class:`MetricFolder`)."""

FOLD_PAUSE = 0.01
"""Seconds the background fold sleeps at least between trials (see :func:`fold_pending`):
it sleeps as long as its last (trial, group) took, and no less than this."""

FOLD_CHUNK = 1000
"""The most pending reports of one (trial, group) folded in one write transaction."""

FOLD_RETRIES = 3
"""Folds of a (trial, group) that another folder overtook, in a row, before
:func:`fold_pending` leaves it to a later fold."""

_BUILD_CHUNK = 16  # trials summarised from metrics rows per write transaction


def fold_metric_reports(
    s: Session,
    trial_id: int,
    group: str,
    reports: Sequence[tuple[int, Mapping[str, Any]] | tuple[int, Mapping[str, Any], float]],
) -> None:
    """Fold newly stored metric reports of one trial into its persisted summaries.

    Call it in a write transaction, either with reports whose ``metrics`` rows that
    transaction adds (seeding does) or with reports taken off ``metric_folds_pending``
    (:func:`fold_pending`, which then deletes their pending rows): every later chart
    reads the summaries only. Only finite int and float values (not bools) of names that
    :func:`check_metric_name` accepts are kept. When the trial has no summaries of
    ``group`` yet but has older folded ``metrics`` rows (an upgraded database), those are
    summarised first, once. Costs one read of the summaries of the reported names and
    one write per name changed (a summary holds at most ``4 * CAP_BUCKETS`` points), so
    folding k reports at once costs about what folding one does: the master folds
    lazily, in bulk, for that reason.

    Folding several reports at once gives the same summary, byte for byte, as folding
    them one at a time in any order: the buckets nest (see the module docstring), the
    width that ends up chosen is the smallest power of two, no narrower than the
    stored one, at which all points fit, and ties keep the earliest point either way.

    Args:
        s: a session of ``Database.write()`` (under the write lock).
        trial_id: an existing trial.
        group: the reports' group (``"training"`` or ``"validation"``; at most 16
            characters, the metrics row's ``kind``).
        reports: ``(total_batches, metrics)`` pairs, or ``(total_batches, metrics,
            reported_at)`` triples, in any order: batch counts (>= 0) distinct and not
            folded before; metrics a mapping of name to value (NaN and infinities
            already turned into None, or they are skipped here); ``reported_at``, the
            report's time (seconds since the epoch), goes to the
            :data:`~dauntless.master.metric_summary_rows.TIME_SERIES` summary.

    Raises:
        ValueError: ``group`` is empty or too long, a batch count is negative, not an
            int, or repeated.
        TypeError: a report's metrics are not a mapping.
    """
    plan = _plan_fold(s, trial_id, group, reports)
    if plan is not None:
        _write_fold(s, plan)


class _FoldWrite(NamedTuple):
    """What a fold writes for one (trial, group): with ``replace`` every summary row of
    it is deleted first; then ``updates`` (parameters of ``_UPDATE_NAMED``) and
    ``inserts`` (rows of ``metric_summaries``)."""

    trial_id: int
    group: str
    replace: bool
    updates: list[dict[str, Any]]
    inserts: list[dict[str, Any]]


def _plan_fold(
    s: Session,
    trial_id: int,
    group: str,
    reports: Sequence[Sequence[Any]],
) -> _FoldWrite | None:
    """The reads and the computation of :func:`fold_metric_reports` (any session:
    nothing is written); None when there is nothing to write. Raises as it does."""
    if not isinstance(group, str) or not 0 < len(group) <= 16:
        raise ValueError(f"group must be a name of 1..16 characters, got {group!r}")
    seen, points = _report_points(reports)
    if not seen:
        return None
    stored = {
        row[0]: row[1:]
        for row in s.execute(_SELECT_NAMED, {"tid": trial_id, "grp": group, "names": ["", *points]})
    }
    if "" not in stored:  # the group's first reports, or reports from before the table
        earlier = [
            b
            for b in s.scalars(
                select(_METRICS.c.total_batches).where(
                    _METRICS.c.trial_id == trial_id, _METRICS.c.kind == group, _FOLDED
                )
            )
            if b not in seen
        ]
        series = (
            _summaries_from_metrics(s, [trial_id], group, frozenset(seen)).get(trial_id, {})
            if earlier
            else {}
        )
        for name, (xs, ys) in points.items():
            series.setdefault(name, M4Series()).extend(xs, ys)
        # replace: there are none, or some left without a marker
        return _FoldWrite(trial_id, group, True, [], _rows(trial_id, group, series))
    updates, inserts = [], {}
    for name, (xs, ys) in points.items():
        summary = _unpack(*stored[name]) if name in stored else M4Series()
        if name == TIME_SERIES and name not in stored:  # folded before the report times
            summary = _folded_times(s, trial_id, group, frozenset(seen))
        summary.extend(xs, ys)
        if name in stored:
            state = _pack(summary)
            updates.append(
                {
                    "tid": trial_id,
                    "grp": group,
                    "nm": name,
                    "w": state["width"],
                    "r": state["raw_points"],
                    "bx": state["batches"],
                    "by": state["values"],
                }
            )
        else:
            inserts[name] = summary
    return _FoldWrite(trial_id, group, False, updates, _rows(trial_id, group, inserts)[1:])


def _write_fold(s: Session, plan: _FoldWrite) -> None:
    """Write what :func:`_plan_fold` computed (in a ``Database.write()`` session)."""
    if plan.replace:
        s.execute(delete(_SUMMARIES).where(_C.trial_id == plan.trial_id, _C.kind == plan.group))
    if plan.updates:
        s.execute(_UPDATE_NAMED, plan.updates)
    if plan.inserts:
        s.execute(_INSERT, plan.inserts)


def queue_metric_folds(s: Session, trial_id: int, group: str, batches: Sequence[int]) -> None:
    """Record that the just-inserted reports of ``trial_id`` at ``batches`` (in
    ``group``) still have to be folded into the summaries: one ``INSERT ... SELECT``
    into ``metric_folds_pending``, in the transaction that stores the reports, so what
    is acknowledged is durable and a restarted master folds what was left.

    Args:
        s: the session of ``Database.write()`` that inserted the ``metrics`` rows.
        trial_id: the reporting trial.
        group: ``"training"`` or ``"validation"``.
        batches: the reports' ``total_batches`` (distinct), at most a few thousand.
    """
    if not batches:
        return
    m = _METRICS.c
    s.execute(
        insert(_PENDING).from_select(
            ["metric_id", "trial_id", "kind"],
            select(m.id, m.trial_id, m.kind).where(
                m.trial_id == trial_id, m.kind == group, m.total_batches.in_(list(batches))
            ),
        )
    )


def store_metric_rows(s: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert reports into ``metrics`` and queue them for the lazy fold, in ``s``'s
    transaction (what the master does for each acknowledged report).

    On PostgreSQL this is one statement (``WITH ins AS (INSERT INTO metrics ...
    RETURNING ...) INSERT INTO metric_folds_pending SELECT ... FROM ins``): every
    statement is a round trip to the server, and under the write lock those round trips
    bound the reports per second. Elsewhere (SQLite, in-process) an executemany and one
    :func:`queue_metric_folds` per group.

    Args:
        s: a session of ``Database.write()``.
        rows: ``metrics`` rows (column name to value) of one trial, with distinct
            ``(kind, total_batches)`` not stored before, at most a few thousand.
    """
    if not rows:
        return
    if s.get_bind().dialect.name == "postgresql":
        m = _METRICS.c
        ins = insert(_METRICS).values(list(rows)).returning(m.id, m.trial_id, m.kind).cte("ins")
        s.execute(
            insert(_PENDING).from_select(
                ["metric_id", "trial_id", "kind"], select(ins.c.id, ins.c.trial_id, ins.c.kind)
            )
        )
        return
    s.execute(insert(_METRICS), list(rows))
    for trial_id, group in sorted({(r["trial_id"], r["kind"]) for r in rows}):
        batches = [
            r["total_batches"] for r in rows if r["trial_id"] == trial_id and r["kind"] == group
        ]
        queue_metric_folds(s, trial_id, group, batches)


def fold_pending(db: Database, trial_ids: Iterable[int] | None = None, pause: float = 0.0) -> int:
    """Fold the pending reports (``metric_folds_pending``) into the summaries, in bulk.

    Per (trial, group) and per :data:`FOLD_CHUNK` of its reports, the pending reports
    and the summaries are read and the new summaries computed in a read session, then
    written, with the reports' pending rows deleted, in one short write transaction:
    reports are acknowledged meanwhile (the write lock is held for the writes only).
    The folders of one process are serialised by a lock of their own (see
    :func:`_fold_lock`); a fold whose reports another process folded first is rolled
    back and read again (:func:`write_fold`), up to :data:`FOLD_RETRIES` times in a row
    before the (trial, group) is left to a later fold; a trial deleted meanwhile is
    skipped. A reader calls this first for the trials it reads, so the summaries it
    reads hold every report acknowledged before; the background :class:`MetricFolder`
    calls it for all trials.

    Args:
        db: the master database.
        trial_ids: only these trials (None: every trial with pending reports).
        pause: when > 0, after each (trial, group) sleep, without the fold lock, as
            long as folding it took and at least ``pause`` seconds: the background fold
            spreads its CPU so that requests, which share the interpreter lock with it,
            find the lock free at least half the time and are not held up by one long
            burst (issue 19: the fold was most of the p99 acknowledgement time);
            readers, waiting for their answer, pass 0.

    Returns:
        The number of reports folded.
    """
    p = _PENDING.c
    q = select(p.trial_id, p.kind).distinct()
    ids = None if trial_ids is None else sorted(set(trial_ids))
    with db.read() as s:
        if ids is None:
            todo = sorted((t, g) for t, g in s.execute(q))
        else:
            todo = sorted(
                (t, g)
                for i in range(0, len(ids), _IN_CHUNK)
                for t, g in s.execute(q.where(p.trial_id.in_(ids[i : i + _IN_CHUNK])))
            )
    folded = 0
    took = 0.0
    for trial_id, group in todo:
        if pause > 0 and folded:
            time.sleep(max(pause, took))
        started = time.monotonic()
        with _fold_lock(db):
            stale = 0
            while True:
                report_ids, plan = read_fold(db, trial_id, group)
                if not report_ids:
                    break
                if not write_fold(db, report_ids, plan):
                    stale += 1  # another folder was first: read what is left
                    if stale > FOLD_RETRIES:
                        break
                    continue
                stale = 0
                folded += len(report_ids)
                if len(report_ids) < FOLD_CHUNK:
                    break
        took = time.monotonic() - started
    return folded


def read_fold(db: Database, trial_id: int, group: str) -> tuple[list[int], _FoldWrite | None]:
    """Read up to :data:`FOLD_CHUNK` pending reports of a (trial, group), oldest first,
    and the summaries they change, and compute the fold, in a read session (no write
    lock): the reports' ``metrics`` ids and what :func:`write_fold` is to write (None:
    nothing), or ``([], None)`` when nothing is pending.

    Raises:
        ValueError, TypeError: as :func:`fold_metric_reports`, for malformed stored rows.
    """
    m, p = _METRICS.c, _PENDING.c
    with db.read() as s:
        rows = list(
            s.execute(
                select(m.id, m.total_batches, cast(m["values"], Text), m.reported_at)
                .join(_PENDING, p.metric_id == m.id)
                .where(p.trial_id == trial_id, p.kind == group)
                .order_by(m.id)
                .limit(FOLD_CHUNK)
            )
        )
        if not rows:
            return [], None
        reports = []
        for _, batches, doc, reported_at in rows:
            values = _load_values(doc)
            reports.append((batches, values if isinstance(values, dict) else {}, reported_at))
        return [r[0] for r in rows], _plan_fold(s, trial_id, group, reports)


def write_fold(db: Database, ids: Sequence[int], plan: _FoldWrite | None) -> bool:
    """Write a fold that :func:`read_fold` computed, deleting its reports' pending rows,
    in one write transaction; False, with nothing written, when those rows are no longer
    all pending.

    Folders read and compute without the write lock, and more than one may fold a trial
    (readers in the master, and the background folder, a process of its own,
    :mod:`dauntless.master.fold_worker`). Each reads the oldest pending reports
    of the (trial, group), so two folds that read before either wrote share their oldest
    report: the second to write finds a pending row gone and rolls back, rather than
    write summaries computed from those the first replaced, and is to read again. A
    trial deleted meanwhile took its pending rows with it: the same answer.

    Args:
        db: the master database.
        ids: the ``metrics`` ids of the folded reports (what :func:`read_fold` returned).
        plan: what to write, or None.
    """
    p = _PENDING.c
    with db.write() as s:
        result = s.execute(delete(_PENDING).where(p.metric_id.in_(list(ids))))
        if int(getattr(result, "rowcount", -1)) != len(ids):  # a CursorResult's
            s.rollback()  # keeps nothing; the commit that follows is an empty one
            return False
        if plan is not None:
            _write_fold(s, plan)
    return True


_FOLD_LOCKS: weakref.WeakKeyDictionary[Database, threading.RLock] = weakref.WeakKeyDictionary()
_FOLD_LOCKS_GUARD = threading.Lock()


def _fold_lock(db: Database) -> threading.RLock:
    """The lock that serialises the writers of ``db``'s summaries other than the eager
    :func:`fold_metric_reports` (:func:`fold_pending`, :func:`build_missing_summaries`):
    they read and compute outside the write lock, so reports are acknowledged meanwhile,
    and write what they computed only while no other of them can have changed it. The
    master is one process (as for ``Database.write_lock``)."""
    with _FOLD_LOCKS_GUARD:
        lock = _FOLD_LOCKS.get(db)
        if lock is None:
            lock = _FOLD_LOCKS[db] = threading.RLock()
        return lock


class MetricFolder:
    """The master's background fold of pending metric reports: :func:`fold_pending`
    at start (what a stopped master left) and then every ``interval`` seconds.

    Folding a trial's reports every few seconds rather than one by one as they
    are acknowledged costs one read and one write of each summary per fold instead of
    per report (issue 19: a report of 256 metrics took ~27 ms of master CPU to fold
    alone, most of the ingest cost). Readers never wait for it: they fold what is
    pending for them first.

    Args:
        db: the master database.
        interval: seconds between folds (> 0).

    Raises:
        ValueError: ``interval`` <= 0.
    """

    def __init__(self, db: Database, interval: float = FOLD_INTERVAL) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.db = db
        self.interval = interval
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        """Fold until :attr:`stop` is set (a failed fold is logged and retried later)."""
        while True:
            try:
                fold_pending(self.db, pause=FOLD_PAUSE)
            except Exception:  # keep folding; the reports stay pending until it works
                log.exception("folding pending metric reports failed")
            if self.stop.wait(self.interval):
                return

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread."""
        self.thread = threading.Thread(target=self.run, name="metric-folder", daemon=True)
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for its fold to end."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)


def build_missing_summaries(db: Database, trial_ids: Iterable[int], group: str) -> list[int]:
    """Summarise, from their ``metrics`` rows, the trials that have no summaries of
    ``group`` yet (reports stored before the ``metric_summaries`` table existed), and
    persist the summaries; later reports are folded in by :func:`fold_metric_reports`.

    Works through 16 trials per write transaction so that reports of other trials wait
    at most that long; a trial summarised meanwhile, or deleted, is skipped. A trial
    without reports gets its marker too, so it is not looked at again.

    Args:
        db: the master database.
        trial_ids: trials to check.
        group: ``"training"`` or ``"validation"``.

    Returns:
        The trial ids summarised here, ascending.

    Raises:
        ValueError: ``group`` is empty or longer than 16 characters.
    """
    if not isinstance(group, str) or not 0 < len(group) <= 16:
        raise ValueError(f"group must be a name of 1..16 characters, got {group!r}")
    ids = sorted(set(trial_ids))
    done: list[int] = []
    with _fold_lock(db):  # no lazy fold writes these trials' summaries meanwhile
        for i in range(0, len(ids), _BUILD_CHUNK):
            chunk = ids[i : i + _BUILD_CHUNK]
            with db.write() as s:
                have = set(
                    s.scalars(
                        select(_SUMMARIES.c.trial_id).where(
                            _SUMMARIES.c.trial_id.in_(chunk),
                            _SUMMARIES.c.kind == group,
                            _SUMMARIES.c.name == "",
                        )
                    )
                )
                alive = set(s.scalars(select(TrialRow.id).where(TrialRow.id.in_(chunk))))
                todo = [t for t in chunk if t in alive and t not in have]
                if not todo:
                    continue
                built = _summaries_from_metrics(s, todo, group)
                s.execute(
                    delete(_SUMMARIES).where(
                        _SUMMARIES.c.trial_id.in_(todo), _SUMMARIES.c.kind == group
                    )
                )
                s.execute(_INSERT, [row for t in todo for row in _rows(t, group, built.get(t, {}))])
                done.extend(todo)
    return done
