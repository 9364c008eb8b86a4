"""Agents' liveness in the master's memory, and the answers of heartbeats that change
nothing (issue 37: 1,000 agents heartbeating every 5 s cost the master half a core when
every beat was a write transaction on a worker thread).

Most heartbeats carry no exit (nor a resource sample the master stores: those of
trials' runs are dropped) and list the same allocation parts as the agent's last one,
and nothing changed for that agent in between: the master's answer is then the same as
last time (no part to start, the same kill orders). :class:`Heartbeats` keeps
that answer per agent with the change counts it was computed under
(:class:`~dauntless.master.db.changes.RowVersions` of the agent's row and of the
allocation parts placed on it), and gives it back on the event loop while those counts,
the listed parts and :data:`ANSWER_MAX_AGE` allow; any other beat takes the full path
(:func:`dauntless.master.models.agents.beat`, a write transaction).

**Liveness.** A beat answered from memory records its time here only; the control loop
writes the times of the beats seen since its last pass into ``agents.last_heartbeat``
in one statement (:meth:`Heartbeats.flush`) at the start of each maintenance pass,
before it reaps lost agents, and the reaper also spares an agent whose last beat in
memory is fresh (one that beat between the flush and the reap). Agent views show the
later of the row's time and the one in memory.

**A master that stood still** (issue 37: stopped, or starved of CPU on an overloaded
host) is like one that restarted: it declares no agent lost for its own absence. A task
on the event loop (:func:`watch_intake`) ticks every :data:`TICK_SECONDS`; a tick later
than :data:`STALL_SECONDS` means the master took in no request meanwhile, so every
agent gets a fresh deadline of ``agent_timeout`` from the tick
(:meth:`Heartbeats.deadline_from`), and while the ticks are overdue the reaper declares
no agent lost at all (:meth:`Heartbeats.intake_stalled`: after a SIGSTOP the control
loop may run before the event loop has read the beats that waited). A beat that takes
the full path counts from when it arrived on the event loop, not from when a worker
thread got to it (:meth:`Heartbeats.arrived`), and while it is in flight (arrived, not
yet answered) its agent is not declared lost at all; once answered it counts as a beat
at the time of its answer (:meth:`Heartbeats.answered`). Issue 37: with the worker
threads and the database busy, a beat carrying exits waited over ``agent_timeout``
between its arrival and its answer; the agent, which sends its next beat only after an
answer (or its own 30 s timeout), was declared lost meanwhile and every trial on it
ended ERROR, a whole agent's slots at once (a 10,000-trial run on 10 agents of 10 slots
at load 19-56 lost 190 trials; its logs were not kept, so this cause is the one the
test reproduces, not one read from that run). An
agent cut off from its master cannot keep a beat in flight for longer than the master
takes to answer it, and it fences ``(1 - FENCE_FRACTION) * agent_timeout`` before the
master's deadline counted from its last *answered* beat's sending, which is earlier
than any arrival or answer here: the partition guarantee is unchanged. The agents' side of the same rule:
:mod:`dauntless.agent._fence`.

**Master restarts.** Beats answered in the last second before a crash may never reach
the database. That does not make a live agent look lost after a restart: at start the
master gives every ACTIVE agent a fresh deadline of ``agent_timeout`` from then
(:func:`dauntless.master.models.agents.refresh_heartbeats`), whatever its row said, so
a live agent that keeps beating is never reaped, and a dead one is reaped
``agent_timeout`` after the restart, as before this module. Answers held in memory are
not needed after a restart either: the first beat of each agent takes the full path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session

from .db import AgentRow, AllocationRow, Database
from .db.changes import Version

log = logging.getLogger("dauntless.master")

TICK_SECONDS = 0.5
"""Seconds between two ticks of :func:`watch_intake`."""

STALL_SECONDS = 5.0
"""A tick this many seconds after the one before it (monotonic) means the master's
event loop, which takes in every request, stood still."""

ANSWER_MAX_AGE = 60.0
"""Seconds a remembered answer is given back at most before the full path runs again:
the bound for changes the ORM does not report (bulk statements, other processes)."""

MAX_AGENT_KEYS = 16_384
"""Agents whose change counts are kept before the counts are cleared (every agent's
next beat then takes the full path once)."""

MAX_HOLD_SECONDS = 30.0
"""The longest a quiet beat may be held (its ``wait_seconds``, see :meth:`Heartbeats.hold`)."""

Stamp = tuple[Version, Version]
"""(version of the agent's row, version of the allocation parts placed on it)."""


@dataclass(frozen=True)
class _Answer:
    stamp: Stamp
    running: frozenset[str]
    answer: dict[str, Any]
    at: float  # seconds since the epoch (the master's clock) of the full path's beat
    trials: frozenset[str]  # its live parts that are trials' runs


class Heartbeats:
    """Liveness and remembered heartbeat answers of one master's agents (see the module).

    Thread-safe: the event loop answers beats, worker threads run the full path and the
    control loop flushes and reaps.

    Args:
        db: the master database (whose write sessions bump the change counts).
    """

    def __init__(self, db: Database) -> None:
        self._agent_versions = db.row_versions(AgentRow, lambda row: row.id, MAX_AGENT_KEYS)
        self._part_versions = db.row_versions(
            AllocationRow, lambda row: row.agent_id, MAX_AGENT_KEYS
        )
        self._lock = threading.Lock()
        self._latest: dict[str, float] = {}  # agent id -> its last beat (epoch s)
        self._pending: dict[str, float] = {}  # beats not yet in the database
        self._in_flight: dict[str, int] = {}  # agent id -> full-path beats not answered
        self._handed: dict[str, set[str]] = {}  # agent id -> parts it never listed
        self._answers: dict[str, _Answer] = {}
        self._ticked: float | None = None  # the last tick (monotonic s); None: no ticks
        self._resumed_at = float("-inf")  # the end of the last stall (epoch s)
        # Beats held as long polls (:meth:`hold`): agent id -> (its loop, its event).
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._agent_versions.listen(self._changed)
        self._part_versions.listen(self._changed)

    def stamp(self, agent_id: str) -> Stamp:
        """The change counts of ``agent_id``'s row and parts; read it *before* the full
        path's transaction, so that a commit in between is not missed."""
        return self._agent_versions.version(agent_id), self._part_versions.version(agent_id)

    def answer(
        self, agent_id: str, running: list[str], sampled: list[str], now: float
    ) -> dict[str, Any] | None:
        """The remembered answer (``{"start": [], "kill": [...]}``) to a beat of
        ``agent_id`` at ``now`` (epoch s) listing ``running``, carrying no exit and
        resource samples of the parts ``sampled`` only, when the full path would give
        the same one and write nothing but the beat's time; the beat is then recorded
        in memory (see :meth:`flush`). None when the full path must run (nothing is
        recorded then).

        It is given back while the agent's row and the parts placed on it are unchanged
        since the full path computed it, ``running`` lists the same parts, every part
        in ``sampled`` is a trial's run placed on the agent (the full path does not
        store those samples: a trial's profiler measures it), and it is at most
        :data:`ANSWER_MAX_AGE` seconds old."""
        kept = self._answers.get(agent_id)
        if (
            kept is None
            or not 0 <= now - kept.at <= ANSWER_MAX_AGE
            or kept.stamp != self.stamp(agent_id)
            or kept.running != frozenset(running)
            or not kept.trials.issuperset(sampled)
        ):
            return None
        self.beat(agent_id, now, pending=True)
        return kept.answer

    async def hold(self, agent_id: str, stamp: Stamp, seconds: float) -> bool:
        """Hold a quiet beat of ``agent_id`` as a long poll: wait until the agent's row
        or the parts placed on it change from ``stamp`` (:meth:`stamp`, read before the
        beat's :meth:`answer`), or ``seconds`` pass. An agent with no task running asks
        for this (``wait_seconds`` on its heartbeat) in place of sleeping for its
        heartbeat interval, so that work placed on it is answered within milliseconds
        instead of at its next beat (issue 37: create -> first metric). Call it on the
        event loop; a commit in any thread wakes it (:meth:`RowVersions.listen`).

        Args:
            agent_id: the agent.
            stamp: the change counts the beat's remembered answer was given under.
            seconds: how long to hold at most (0 to :data:`MAX_HOLD_SECONDS`).

        Returns:
            True when the counts changed (the full path must answer the beat), False
            when ``seconds`` passed without a change (the remembered answer stands).
        """
        if seconds <= 0:
            return self.stamp(agent_id) != stamp
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(agent_id, []).append(entry)
        try:
            if self.stamp(agent_id) == stamp:  # registered first: no commit is missed
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(entry[1].wait(), min(seconds, MAX_HOLD_SECONDS))
            return self.stamp(agent_id) != stamp
        finally:
            with self._lock:
                held = self._waiters.get(agent_id, [])
                if entry in held:
                    held.remove(entry)
                if not held:
                    self._waiters.pop(agent_id, None)

    def _changed(self, keys: set[Any] | None) -> None:
        """Wake the beats held for the agents ``keys`` (None: every agent)."""
        with self._lock:
            if keys is None:
                woken = [w for held in self._waiters.values() for w in held]
            else:
                woken = [w for k in keys for w in self._waiters.get(k, ())]
        for event_loop, event in woken:
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                event_loop.call_soon_threadsafe(event.set)

    def keep(
        self,
        agent_id: str,
        stamp: Stamp,
        running: list[str],
        answer: dict[str, Any],
        now: float,
        trials: frozenset[str],
    ) -> None:
        """Remember ``answer``, which the full path gave at ``now`` to a beat listing
        ``running`` under ``stamp`` (:meth:`stamp`, read before its transaction), and
        which changed nothing but the beat's time (the caller's judgement; see
        :func:`dauntless.master.models.agents.beat`, which also gives ``trials``, the
        agent's live parts that are trials' runs)."""
        with self._lock:
            self._answers[agent_id] = _Answer(stamp, frozenset(running), answer, now, trials)

    def forget(self, agent_id: str) -> None:
        """Drop ``agent_id``'s remembered answer (its next beat takes the full path)."""
        with self._lock:
            self._answers.pop(agent_id, None)

    def beat(self, agent_id: str, now: float, pending: bool = False) -> None:
        """Record a beat of ``agent_id`` at ``now`` (epoch s) in memory; with
        ``pending`` it is not in the database yet (:meth:`flush` writes it)."""
        with self._lock:
            if now >= self._latest.get(agent_id, now):
                self._latest[agent_id] = now
            if pending:
                self._pending[agent_id] = max(now, self._pending.get(agent_id, now))

    def arrived(self, agent_id: str, now: float) -> None:
        """A beat of ``agent_id`` arrived at ``now`` (epoch s) and takes the full path:
        the agent is alive from now, however long the worker threads take to get to it
        (recorded as :meth:`beat` with ``pending``), and it is in flight until
        :meth:`answered` (which every call of this must be followed by)."""
        with self._lock:
            self._in_flight[agent_id] = self._in_flight.get(agent_id, 0) + 1
        self.beat(agent_id, now, pending=True)

    def answered(self, agent_id: str, now: float) -> None:
        """The full path of a beat of ``agent_id`` that :meth:`arrived` ended at
        ``now`` (epoch s), answered or failed: it is no longer in flight, and the agent
        counts as alive at ``now`` (it sends its next beat after this answer)."""
        with self._lock:
            left = self._in_flight.get(agent_id, 0) - 1
            if left > 0:
                self._in_flight[agent_id] = left
            else:
                self._in_flight.pop(agent_id, None)
        self.beat(agent_id, now, pending=True)

    def handed(self, agent_id: str, alloc_id: str) -> None:
        """The part ``alloc_id`` was handed over to ``agent_id`` in an answer that may
        yet be lost (:mod:`dauntless.master.models.handover`)."""
        with self._lock:
            self._handed.setdefault(agent_id, set()).add(alloc_id)

    def acknowledge(self, agent_id: str, listed: set[str], live: set[str]) -> None:
        """A beat of ``agent_id`` listed the parts ``listed`` while ``live`` are its
        parts not ended: the listed ones reached it, and those no longer live are
        forgotten (so at most the agent's live parts are remembered)."""
        with self._lock:
            ids = self._handed.get(agent_id)
            if ids is None:
                return
            ids.difference_update(listed)
            ids.intersection_update(live)
            if not ids:
                del self._handed[agent_id]

    def unacknowledged(self, agent_id: str, alloc_id: str) -> bool:
        """Whether ``alloc_id`` was handed to ``agent_id`` by this master and no beat
        of the agent has listed it since."""
        with self._lock:
            return alloc_id in self._handed.get(agent_id, ())

    def in_flight(self, agent_id: str) -> bool:
        """Whether a full-path beat of ``agent_id`` has arrived and is not answered yet:
        the agent is not declared lost meanwhile (see the module)."""
        with self._lock:
            return agent_id in self._in_flight

    def tick(self, mono: float, now: float) -> float:
        """A tick of :func:`watch_intake` at ``mono`` (monotonic s) and ``now`` (the
        master's clock, epoch s). When it comes more than :data:`STALL_SECONDS` after
        the previous one, the intake stood still: every agent's deadline runs from
        ``now`` (:meth:`deadline_from`).

        Returns:
            The seconds the intake stood still (0.0 when it did not).
        """
        with self._lock:
            gap = 0.0 if self._ticked is None else mono - self._ticked
            self._ticked = mono
            if gap <= STALL_SECONDS:
                return 0.0
            self._resumed_at = max(self._resumed_at, now)
        log.warning(
            "the master took in no request for %.1f s (stopped, or starved of CPU): "
            "every agent gets a fresh agent_timeout from now",
            gap,
        )
        return gap

    def intake_stalled(self, mono: float) -> bool:
        """Whether the intake stands still at ``mono`` (monotonic s): ticks come (the
        master serves) and the last one is over :data:`STALL_SECONDS` old. No agent may
        be declared lost then: its beats may be waiting to be read."""
        with self._lock:
            return self._ticked is not None and mono - self._ticked > STALL_SECONDS

    def deadline_from(self, agent_id: str, stored: float) -> float:
        """The time (epoch s) from which ``agent_id``'s ``agent_timeout`` runs: the later
        of its last beat (:meth:`last_heartbeat`) and the end of the master's last
        stall (:meth:`tick`)."""
        return max(self.last_heartbeat(agent_id, stored), self._resumed_at)

    def latest(self, agent_id: str) -> float | None:
        """The time (epoch s) of ``agent_id``'s last beat seen by this master since it
        started; None for none."""
        return self._latest.get(agent_id)

    def last_heartbeat(self, agent_id: str, stored: float) -> float:
        """The later of ``stored`` (the row's ``last_heartbeat``) and the last beat in
        memory: what views of the agent show."""
        seen = self._latest.get(agent_id)
        return stored if seen is None or seen < stored else seen

    def flush(self, s: Session) -> int:
        """Write the beats recorded since the last flush into ``agents.last_heartbeat``,
        in one statement in the caller's write session ``s`` (a row's time only moves
        forward). A bulk statement through the session's connection: it sets no change
        flag (a beat changes nothing a placement or a page reads).

        Returns:
            How many agents' beats were written.
        """
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        table = AgentRow.__table__
        stmt = (
            update(table)
            .where(table.c.id == bindparam("agent"), table.c.last_heartbeat < bindparam("beat"))
            .values(last_heartbeat=bindparam("beat"))
        )
        s.connection().execute(stmt, [{"agent": a, "beat": t} for a, t in pending.items()])
        return len(pending)


async def watch_intake(
    beats: Heartbeats, clock: Callable[[], float], period: float = TICK_SECONDS
) -> None:
    """Tick ``beats`` (:meth:`Heartbeats.tick`) every ``period`` seconds, with the
    monotonic time and ``clock()`` (the master's clock, epoch s), until cancelled. Run
    it on the event loop that serves the master's requests: its ticks stop when that
    loop stands still."""
    while True:
        beats.tick(time.monotonic(), clock())
        await asyncio.sleep(period)
