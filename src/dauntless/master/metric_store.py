"""Storing training reports of many trials at once (issue 19, metric ingest).

A trial's training reports are turned into ``metrics`` rows by the request that brought
them (:func:`training_rows`, no lock held), and the rows of every request whose job
shares a group-commit transaction are stored together by :func:`store_training_rows`
(:meth:`~dauntless.master.group_commit.GroupCommit.run_batched`): one read of the
trials, one read of the reports already stored, one ``INSERT`` of the new rows (with
their queueing for the lazy fold) and one ``UPDATE`` of the trials' batch counts per
transaction, instead of that many statements per request. Under the write lock each
statement is a round trip to PostgreSQL, and with 32 trials reporting at once those
round trips, not the commit, were most of the acknowledgement time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from .db import MetricRow, TrialRow
from .db.engine import dumps_json
from .errors import NotFound
from .metric_fold import store_metric_rows

_KEYS_PER_SELECT = 500
"""Most ``(trial, batch count)`` pairs in one read of stored keys (SQLite allows a few
thousand bound parameters per statement at least, and PostgreSQL 65,535)."""


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (recursively), tuples
    as lists; ``value`` itself when it holds neither (the usual case: a report's
    values as JSON parsed them), so the caller must not change what it is given.

    JSON has no NaN or infinity: PostgreSQL refuses them in JSON columns and the API could
    not answer them, so a diverged loss is stored as null.

    Why the first look (issue 37): the copy made a dict per report and a call per value
    on the master's event loop, 13% of its samples at 390 metrics requests a second; one
    walk that finds nothing to replace costs about a third of that.
    """
    if _plain_finite(value):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _plain_finite(value: Any) -> bool:
    """Whether ``value`` holds no NaN, no infinity and no tuple (dicts and lists walked,
    without recursion): :func:`finite_json` would return an equal copy of it."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            node = node.values()
        elif type(node) is not list:
            if type(node) is tuple or (isinstance(node, float) and not math.isfinite(node)):
                return False
            continue
        for item in node:
            kind = type(item)
            if kind is float:
                if item - item != 0.0:  # NaN or an infinity (inf - inf is NaN)
                    return False
            elif kind is dict or kind is list:
                stack.append(item)
            elif kind is tuple or (isinstance(item, float) and not math.isfinite(item)):
                return False
    return True


class Report(Protocol):
    """A metrics report as the harness sends it (``models.metrics.MetricsIn``)."""

    @property
    def group(self) -> str: ...
    @property
    def steps_completed(self) -> int: ...
    @property
    def trial_run_id(self) -> int: ...
    @property
    def metrics(self) -> dict[str, Any]: ...
    @property
    def batch_metrics(self) -> list[Any] | None: ...


def training_rows(trial_id: int, reports: Iterable[Report], now: float) -> list[dict[str, Any]]:
    """The ``metrics`` rows of ``reports`` (column name to value), one per report in
    their order, duplicates included (:func:`store_training_rows` skips those).

    Args:
        trial_id: the reporting trial.
        reports: its reports (``group``, ``steps_completed``, ``trial_run_id``,
            ``metrics``, ``batch_metrics``).
        now: the reports' ``reported_at``, seconds since the epoch.

    Returns:
        Rows whose ``values`` and ``batch_metrics`` have NaN and infinities as None
        (:func:`finite_json`) and whose ``epoch`` is the float of an int or float
        ``epochs`` metric, else None.
    """
    rows = []
    for r in reports:
        metrics = finite_json(r.metrics)
        epoch = metrics.get("epochs")
        rows.append(
            {
                "trial_id": trial_id,
                "kind": r.group,
                "total_batches": r.steps_completed,
                "epoch": float(epoch) if isinstance(epoch, (int, float)) else None,
                "trial_run_id": r.trial_run_id,
                "values": metrics,
                "batch_metrics": finite_json(r.batch_metrics),
                "reported_at": now,
            }
        )
    return rows


def store_training_rows(
    s: Session, batches: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]
) -> list[list[bool]]:
    """Store the rows of several requests' training reports in ``s``'s transaction, as
    each request would have stored them alone, in the order given: a row whose
    ``(kind, total_batches)`` its trial has stored already, or that comes earlier in
    ``batches``, is skipped; each trial's ``total_batches`` becomes the largest of it and
    its stored rows' batch counts; the stored rows are queued for the lazy fold
    (:func:`~dauntless.master.metric_fold.store_metric_rows`).

    Args:
        s: a session of ``Database.write()``.
        batches: ``(trial_id, rows)`` per request, rows from :func:`training_rows`.

    Returns:
        Per request, one flag per row: True if stored, False if it was a duplicate.

    Raises:
        NotFound: a trial does not exist (nothing was written: the caller's transaction
            is to be rolled back; the group commit then stores each request alone).
    """
    if s.get_bind().dialect.name == "postgresql":
        return _store_training_rows_pg(s, batches)
    ids = sorted({tid for tid, _ in batches})
    trials = {t.id: t for t in s.scalars(select(TrialRow).where(TrialRow.id.in_(ids)))}
    for tid in ids:
        if tid not in trials:
            raise NotFound(f"trial {tid} not found")
    pairs = sorted({(tid, row["total_batches"]) for tid, rows in batches for row in rows})
    m = MetricRow.__table__.c
    stored: set[tuple[int, str, int]] = set()
    for i in range(0, len(pairs), _KEYS_PER_SELECT):
        chunk = pairs[i : i + _KEYS_PER_SELECT]
        wanted = set(chunk)
        # trial_id IN (...) AND total_batches IN (...): a superset, on the unique
        # index's prefix; the pairs asked for are kept
        stored.update(
            (tid, kind, b)
            for tid, kind, b in s.execute(
                select(m.trial_id, m.kind, m.total_batches).where(
                    m.trial_id.in_(sorted({p[0] for p in chunk})),
                    m.total_batches.in_(sorted({p[1] for p in chunk})),
                )
            )
            if (tid, b) in wanted
        )
    flags: list[list[bool]] = []
    new: list[Mapping[str, Any]] = []
    for tid, rows in batches:
        mine = []
        trial = trials[tid]
        for row in rows:
            key = (tid, row["kind"], row["total_batches"])
            if key in stored:
                mine.append(False)
                continue
            stored.add(key)
            mine.append(True)
            new.append(row)
            trial.total_batches = max(trial.total_batches, row["total_batches"])
        flags.append(mine)
    if new:
        store_metric_rows(s, new)
    return flags


_PG_TRIALS = text("SELECT id FROM trials WHERE id = ANY(CAST(:ids AS integer[]))")

_PG_STORE = text(
    """
WITH ins AS (
    INSERT INTO metrics (trial_id, kind, total_batches, epoch, trial_run_id, "values",
                         batch_metrics, reported_at)
    SELECT * FROM json_to_recordset(CAST(:rows AS json)) AS r(
        trial_id integer, kind varchar, total_batches integer, epoch double precision,
        trial_run_id integer, "values" json, batch_metrics json, reported_at double precision)
    ON CONFLICT (trial_id, kind, total_batches) DO NOTHING
    RETURNING id, trial_id, kind, total_batches
), pending AS (
    INSERT INTO metric_folds_pending (metric_id, trial_id, kind)
    SELECT id, trial_id, kind FROM ins
), raised AS (
    UPDATE trials SET total_batches = top.batches
    FROM (SELECT trial_id, max(total_batches) AS batches FROM ins GROUP BY trial_id) AS top
    WHERE trials.id = top.trial_id AND trials.total_batches < top.batches
)
SELECT trial_id, kind, total_batches FROM ins
"""
)
"""One statement, whatever the number of rows (given as one JSON array of row objects),
that stores training rows on PostgreSQL: inserts them (skipping those already stored),
queues the stored ones for the lazy fold and raises their trials' ``total_batches``; it
answers the keys it stored."""


def _store_training_rows_pg(
    s: Session, batches: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]
) -> list[list[bool]]:
    """:func:`store_training_rows` on PostgreSQL, in two statements of a fixed text.

    Each statement is a round trip, and one whose text changes with its number of rows
    (a multi-row ``VALUES``) is compiled by SQLAlchemy and prepared by psycopg anew each
    time; arrays bound per column cost psycopg a quoting pass over every JSON document
    in Python. So the rows go as one JSON document (encoded by
    :func:`~dauntless.master.db.engine.dumps_json`, orjson) that PostgreSQL unpacks with
    ``json_to_recordset`` (issue 19). ``ON CONFLICT DO NOTHING`` on the ``metrics``
    unique key skips what a trial stored before; rows repeated within ``batches`` are
    dropped here, the first kept. Raises as :func:`store_training_rows` does.
    """
    ids = sorted({tid for tid, _ in batches})
    found = set(s.scalars(_PG_TRIALS, {"ids": ids}))
    for tid in ids:
        if tid not in found:
            raise NotFound(f"trial {tid} not found")
    first: set[tuple[int, str, int]] = set()
    new: list[Mapping[str, Any]] = []
    for tid, rows in batches:
        for row in rows:
            key = (tid, row["kind"], row["total_batches"])
            if key not in first:
                first.add(key)
                new.append(row)
    # the rows' other keys, if any, are not columns json_to_recordset asks for
    params = {"rows": dumps_json(new)}
    stored = {(tid, kind, b) for tid, kind, b in s.execute(_PG_STORE, params)}
    flags: list[list[bool]] = []
    for tid, rows in batches:
        mine = []
        for row in rows:
            key = (tid, row["kind"], row["total_batches"])
            mine.append(key in stored)
            stored.discard(key)  # a repeat of it later in ``batches`` is a duplicate
        flags.append(mine)
    return flags
