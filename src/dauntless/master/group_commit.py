"""Group commit: the write jobs of concurrent requests share one transaction.

The master serialises its writes with one lock (``Database.write``), and every commit
costs a fixed price: the session's set-up, the change hooks, and on PostgreSQL a
round trip and a flush of the write-ahead log to disk (several milliseconds). When many
trials report metrics at once (issue 19: 32 trials x 256 metrics), each waiting its
turn for a transaction of its own, that fixed price bounds the reports per second and
the queue in front of the lock makes the acknowledgement wait grow with the number of
trials. Here a caller queues its job; whoever takes the write lock runs every job
queued by then in one transaction (at most ``max_jobs``) and commits once, so the
price is shared by all that arrived while the previous transaction ran. A caller still
returns only after the transaction holding its job has committed: what it
acknowledges is durable.

A job that raises must not take the others down: when a shared transaction fails, it is
rolled back and each of its jobs is run again in a transaction of its own, so each
caller gets its own result or its own error. Jobs must therefore be safe to run again
after a rollback (they write only through the session they are given).

A caller may instead queue an item for a batch function (:meth:`GroupCommit.run_batched`):
the items of one transaction that name the same function are handed to it together, so
that work the callers share (a read of all their rows, one ``INSERT`` of all their
rows) is done once per transaction instead of once per caller: each statement is a
round trip to PostgreSQL, and under the write lock those round trips bound the
reports per second (issue 19).

A coroutine on the event loop may queue an item too (:meth:`GroupCommit.submit_batched`)
and await its outcome without a worker thread of its own: a committer thread of the
group commit leads such items (with whatever callers' jobs are queued beside them) and
settles the coroutines' futures with one ``loop.call_soon_threadsafe`` per transaction.
Why (issue 37): the metrics route's hop to the anyio worker pool and back cost the
event loop about a sixth of its busy time at 390 requests a second, and every such
hop is a hand-over of the interpreter lock that the other requests queue behind.

This is the classic group commit of databases (e.g. D. J. DeWitt et al., "Implementation
techniques for main memory database systems", SIGMOD 1984), done here in the master
because the write lock, not the database, is what serialises its transactions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from .db import Database

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item of a batch

_log = logging.getLogger(__name__)

_POLL_SECONDS = 0.02
"""How often a waiting caller checks whether the write lock is free when nobody tells
it: a leader of queued jobs wakes the next queued caller when it is done, but another
writer of the database (the scheduling loop) releases the lock without doing so."""


class _Job(Generic[T]):
    """One caller's job (a function of the session, or an item for a batch function),
    its outcome, and the event set when it has one."""

    def __init__(
        self,
        fn: Callable[[Session], T] | None = None,
        batch: Callable[[Session, list[Any]], list[T]] | None = None,
        item: Any = None,
    ) -> None:
        self.fn = fn
        self.batch = batch
        self.item = item
        self.done = threading.Event()
        self.wake = threading.Event()  # set when done, or when the lock was let go
        self.result: Any = None
        self.error: BaseException | None = None
        # Set for an item of a coroutine (GroupCommit.submit_batched): its future, of
        # the event loop that awaits it.
        self.future: asyncio.Future[T] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None


class GroupCommit:
    """Runs the write jobs of concurrent callers in shared transactions of ``db``.

    Args:
        db: the master database (its ``write()`` and ``write_lock``).
        max_jobs: the most jobs one transaction runs (>= 1); more wait for the next.

    Raises:
        ValueError: ``max_jobs`` < 1.
    """

    def __init__(self, db: Database, max_jobs: int = 64) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        self.db = db
        self.max_jobs = max_jobs
        self._lock = threading.Lock()
        self._queue: list[_Job[Any]] = []
        self._pending = threading.Event()  # set while the committer has items to lead
        self._committer: threading.Thread | None = None
        self._closed = False

    def run(self, fn: Callable[[Session], T]) -> T:
        """Run ``fn(session)`` in a write transaction, perhaps shared with other
        callers' jobs, and return its result once that transaction has committed.

        Args:
            fn: the job; it may run twice (after a rollback of a shared transaction
                that another job failed), so it writes only through its session.

        Returns:
            What ``fn`` returned.

        Raises:
            Whatever ``fn`` raised, in a transaction of its own (nothing of it is
            committed).
        """
        return self._wait(_Job(fn))

    def run_batched(self, batch: Callable[[Session, list[I]], list[T]], item: I) -> T:
        """Run ``batch(session, items)`` in a write transaction, with ``item`` among the
        ``items`` (those of the callers whose jobs share the transaction and passed the
        same ``batch``, in the order they were queued), and return ``item``'s result
        once that transaction has committed.

        Args:
            batch: takes the session and a non-empty list of items and returns one result
                per item, in their order; it may run again (after a rollback, each item
                alone, when it or another job raised), so it writes only through its
                session.
            item: this caller's item.

        Returns:
            ``batch``'s result for ``item``.

        Raises:
            Whatever ``batch`` raised given ``item`` alone (nothing of it is
            committed); ValueError when it returned a list of another length.
        """
        return self._wait(_Job(batch=batch, item=item))

    def submit_batched(
        self, batch: Callable[[Session, list[I]], list[T]], item: I
    ) -> asyncio.Future[T]:
        """Queue ``item`` for ``batch`` as :meth:`run_batched` does, from a coroutine on
        the running event loop, without blocking it: the future is settled, on that
        loop, once the transaction holding the item has committed (with ``batch``'s
        result for it) or failed (with the error ``batch`` raised given the item alone:
        the same outcome :meth:`run_batched` would return or raise).

        The items are led by a committer thread of this group commit (started at the
        first call), or by a caller of :meth:`run` or :meth:`run_batched` that leads
        first; the futures of one transaction are settled by one
        ``loop.call_soon_threadsafe``. Cancelling the future does not take the item
        back: it is still stored (as a request whose client left is, in the route).

        Args:
            batch: as for :meth:`run_batched`.
            item: this caller's item.

        Returns:
            A future of the running loop.

        Raises:
            RuntimeError: no running event loop, or :meth:`close` was called.
        """
        loop = asyncio.get_running_loop()
        job: _Job[T] = _Job(batch=batch, item=item)
        job.loop = loop
        job.future = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the group commit is closed")
            self._queue.append(job)
            self._pending.set()
            if self._committer is None or not self._committer.is_alive():
                self._committer = threading.Thread(
                    target=self._commit_queued, name="group-commit", daemon=True
                )
                self._committer.start()
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        """Lead what is queued, stop the committer thread (waiting at most ``timeout``
        seconds) and refuse further :meth:`submit_batched` calls."""
        with self._lock:
            self._closed = True
            self._pending.set()
            committer = self._committer
        if committer is not None:
            committer.join(timeout)

    def _commit_queued(self) -> None:
        """The committer thread: while jobs are queued, take the write lock when it is
        free and lead them (as a caller of :meth:`run` would); when nothing is queued,
        sleep until :meth:`submit_batched` queues an item; end after :meth:`close`."""
        while True:
            self._pending.wait()
            with self._lock:
                if not self._queue:
                    if self._closed:
                        return
                    self._pending.clear()
                    continue
            if not self.db.write_lock.acquire(timeout=_POLL_SECONDS):
                continue  # another writer (perhaps a leader of ours): look again
            try:
                self._lead()
            except Exception:  # pragma: no cover - _lead gives errors to its jobs
                _log.exception("the group commit's committer failed to lead")
            finally:
                self.db.write_lock.release()
            with self._lock:
                if self._queue:
                    self._queue[0].wake.set()

    def _wait(self, job: _Job[T]) -> T:
        """Queue ``job`` and return its result once committed (see :meth:`run`)."""
        with self._lock:
            self._queue.append(job)
        while not job.done.is_set():
            # Lead when the write lock is free: run what is queued, ours included unless
            # a leader took it already; else wait for a leader to run ours, or to wake us
            # when it is done and ours is still queued.
            if self.db.write_lock.acquire(blocking=False):
                try:
                    if not job.done.is_set():
                        self._lead()
                finally:
                    self.db.write_lock.release()
                with self._lock:
                    if self._queue:
                        self._queue[0].wake.set()
            else:
                job.wake.wait(_POLL_SECONDS)
                job.wake.clear()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def _lead(self) -> None:
        """Run up to ``max_jobs`` queued jobs in one transaction (under the write lock)."""
        with self._lock:
            jobs, self._queue = self._queue[: self.max_jobs], self._queue[self.max_jobs :]
        if not jobs:
            return
        try:
            results: dict[int, Any] = {}
            with self.db.write() as s:
                batches: dict[Any, list[_Job[Any]]] = {}
                for job in jobs:
                    if job.batch is None:
                        results[id(job)] = _call(job, s)
                    else:
                        batches.setdefault(job.batch, []).append(job)
                for batch, group in batches.items():
                    out = batch(s, [job.item for job in group])
                    if len(out) != len(group):
                        raise ValueError(
                            f"a batch function returned {len(out)} results for {len(group)} items"
                        )
                    for job, result in zip(group, out, strict=True):
                        results[id(job)] = result
        except BaseException as exc:
            if not isinstance(exc, Exception):  # an interrupt: fail every caller with it
                for job in jobs:
                    job.error = exc
                raise
            if len(jobs) == 1:
                jobs[0].error = exc
            else:  # run each alone, so each caller gets its own outcome
                for job in jobs:
                    try:
                        with self.db.write() as s:
                            job.result = _alone(job, s)
                    except Exception as one:
                        job.error = one
        else:
            for job in jobs:
                job.result = results[id(job)]
        finally:
            loops: dict[asyncio.AbstractEventLoop, list[_Job[Any]]] = {}
            for job in jobs:
                job.done.set()
                job.wake.set()
                if job.loop is not None:
                    loops.setdefault(job.loop, []).append(job)
            for loop, settled in loops.items():
                try:
                    loop.call_soon_threadsafe(_settle, settled)
                except RuntimeError:  # the loop is closed: nobody awaits these
                    pass


def _settle(jobs: list[_Job[Any]]) -> None:
    """On their event loop: give the futures of ``jobs`` their outcomes (a future
    cancelled meanwhile is left alone)."""
    for job in jobs:
        future = job.future
        if future is None or future.done():
            continue
        if job.error is not None:
            future.set_exception(job.error)
        else:
            future.set_result(job.result)


def _call(job: _Job[T], s: Session) -> T:
    """A plain job's result."""
    assert job.fn is not None
    return job.fn(s)


def _alone(job: _Job[T], s: Session) -> T:
    """A job's result when run alone in ``s``."""
    if job.batch is None:
        return _call(job, s)
    out = job.batch(s, [job.item])
    if len(out) != 1:
        raise ValueError(f"a batch function returned {len(out)} results for 1 item")
    return out[0]
