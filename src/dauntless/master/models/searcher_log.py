"""An experiment's searcher state in the database as a snapshot plus the events after it
(issue 37 scope 1).

Storing the whole snapshot after every searcher event costs O(trials) per event (the
snapshot holds a record per trial), so a search got slower with every trial it had run.
A replayable searcher (:attr:`dauntless.searcher.Searcher.replayable`: every one but the
custom methods, whose events run the user's code) instead appends its events as rows of
``searcher_events``, and its snapshot is written again only when the events after it
outnumber :func:`compaction_due`'s bound, which grows with the trials: amortized, an event
costs the same at trial 10,000 as at trial 10. Restoring is ``restore_searcher`` of the
snapshot followed by :meth:`~dauntless.searcher.Searcher.replay_events` of the events
after it, which gives the state an uninterrupted master would hold (the searchers are
pure functions of their events, ARCHITECTURE.md "Searchers").

Issue 37 scope 2: the master's searchers archive their ended trials' records
(:meth:`~dauntless.searcher.Searcher.archive_ended`): :func:`store` writes each record to
``trial_searcher_records`` once the trial ended, :func:`ended_record` reads it back
when an event names an ended trial the searcher no longer holds, and a snapshot holds
the live trials only, so neither the master's memory nor the snapshot grows with the
trials that ended.

``experiments.searcher_seq`` counts the events applied; ``searcher_snapshot_seq`` the
ones the snapshot holds. The master's cache of searchers (:mod:`.search`) compares the
sequence number, not the snapshot, to know that the searcher it kept is the stored one.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from ..db import ExperimentRow, SearcherEventRow, TrialSearcherRecordRow

MIN_EVENTS_BEFORE_COMPACTION = 512
"""Events after a snapshot that never trigger a new one, however few trials exist."""
EVENTS_PER_TRIAL_BEFORE_COMPACTION = 4
"""The bound grows by this many events per trial the searcher created (a trial makes 3
events when nothing fails: created, validated, closed), so a snapshot, whose cost is
proportional to the trials, is written about once per that many trials' events."""


ENDED_RECORDS_PER_WRITE = 32
"""Ended trials' records the searcher holds before :func:`store` writes them to their rows
in one statement (a write per trial end cost about one more SQL statement per trial).
Until written, a record is in the searcher, and the events after the snapshot give it
again after a restart (every compaction writes them first)."""


def compaction_due(exp: ExperimentRow, trial_count: int) -> bool:
    """Whether the events after the experiment's snapshot are many enough that it is
    written again (and those events deleted).

    Args:
        exp: the experiment, with ``searcher_seq`` already advanced past the new events.
        trial_count: the trial records its searcher's snapshot holds
            (``Searcher.snapshot_trials``: the live ones for a searcher that archives).
    """
    pending = exp.searcher_seq - exp.searcher_snapshot_seq
    bound = max(MIN_EVENTS_BEFORE_COMPACTION, EVENTS_PER_TRIAL_BEFORE_COMPACTION * trial_count)
    return pending > bound


def events_after(s: Session, exp: ExperimentRow) -> list[list[Any]]:
    """The stored events after the experiment's snapshot, oldest first, as
    ``[method name, [args], {kwargs}]``."""
    rows = s.scalars(
        select(SearcherEventRow.event)
        .where(
            SearcherEventRow.experiment_id == exp.id,
            SearcherEventRow.seq > exp.searcher_snapshot_seq,
            SearcherEventRow.seq <= exp.searcher_seq,
        )
        .order_by(SearcherEventRow.seq)
    )
    # Our own rows, written by store() below from the searcher's JSON events.
    return [json.loads(raw) for raw in rows]


def ended_record(s: Session, exp_id: int, request_id: str) -> dict[str, Any] | None:
    """The searcher's record of an ended trial of the experiment, as :func:`store_ended`
    wrote it; None when no such trial ended (a lookup for
    :meth:`~dauntless.searcher.Searcher.archive_ended`)."""
    return s.scalar(
        select(TrialSearcherRecordRow.record).where(
            TrialSearcherRecordRow.experiment_id == exp_id,
            TrialSearcherRecordRow.request_id == request_id,
        )
    )


def store_ended(s: Session, exp: ExperimentRow, searcher: Any, *, force: bool = True) -> None:
    """Write the records of the trials the searcher archived since the last call to
    ``trial_searcher_records`` (a reopened trial's record replaces the one written at
    its earlier end): one DELETE of those request ids and one executemany INSERT.

    ``force``: write them however few; else only once :data:`ENDED_RECORDS_PER_WRITE`
    are waiting. Only when the events after the snapshot are kept (they end those
    trials again in a restored searcher) may a write wait.
    """
    if not force and searcher.ended_not_taken < ENDED_RECORDS_PER_WRITE:
        return
    ended = searcher.take_ended()
    if not ended:
        return
    by_id = {r["request_id"]: r for r in ended}  # the latest of a trial ended twice
    table = TrialSearcherRecordRow.__table__
    s.execute(
        delete(table).where(table.c.experiment_id == exp.id, table.c.request_id.in_(list(by_id)))
    )
    s.execute(
        insert(table),
        [{"experiment_id": exp.id, "request_id": rid, "record": r} for rid, r in by_id.items()],
    )


def compact(s: Session, exp: ExperimentRow, searcher: Any) -> None:
    """Write the searcher's whole snapshot as the experiment's stored state and delete
    the events it now holds (``searcher_seq`` must count them already).

    ``det experiment continue`` calls it before it changes the config, so that events
    made under the old config are never replayed under the new one.
    """
    store_ended(s, exp, searcher)  # the snapshot no longer holds them
    exp.searcher_state = searcher.snapshot()
    exp.searcher_snapshot_seq = exp.searcher_seq
    s.execute(delete(SearcherEventRow).where(SearcherEventRow.experiment_id == exp.id))


def store(s: Session, exp: ExperimentRow, searcher: Any) -> None:
    """Store what changed in the experiment's searcher since it was restored or last
    stored: its new events as rows, or (for a searcher that is not replayable, a search
    without a snapshot yet, or when :func:`compaction_due`) its whole snapshot.

    Args:
        s: the caller's write session.
        exp: the experiment.
        searcher: its searcher (from :func:`.search.searcher_for`), whose journal holds
            the events since then.
    """
    # A searcher that journaled nothing (made outside searcher_for: a new search) is
    # stored whole, like one that is not replayable.
    replayable = bool(searcher.replayable) and searcher.journaling
    # Written in batches; at the search's end at once, so that its rows are complete.
    store_ended(s, exp, searcher, force=searcher.is_shut_down)
    reopened = searcher.snapshot_due()  # an archived trial reopened: never replay that
    events = searcher.take_events()
    if searcher.replayable:
        searcher.start_journal()  # its next events (it is kept for the next caller)
    if replayable and not events and exp.searcher_snapshot_seq > 0:
        return  # nothing happened to it
    first = exp.searcher_seq + 1
    # A searcher that is not replayable may change without journaled events (a custom
    # method's remote operations): count one change at least, so the cache sees it.
    exp.searcher_seq += max(len(events), 1)
    if (
        not replayable
        or exp.searcher_snapshot_seq == 0  # no snapshot of this scheme yet
        or reopened
        or compaction_due(exp, searcher.snapshot_trials)
    ):
        compact(s, exp, searcher)
        return
    s.execute(
        insert(SearcherEventRow.__table__),
        [
            {"experiment_id": exp.id, "seq": first + i, "event": json.dumps(event)}
            for i, event in enumerate(events)
        ],
    )
