"""Durable checkpoint deletion, driven from the database.

Checkpoint GC (and the orphan sweep of uploads that died) marks a checkpoint's row
``DELETING`` in the same transaction that decides it; the master's background loop then
deletes the files of every ``DELETING`` row from its experiment's checkpoint storage and
marks the row ``DELETED`` only when that succeeded. A store that fails is retried with
exponential backoff; rows still ``DELETING`` when the master stops are picked up when it
starts again, and GC that was due then (trials that ended while it was away, or just
before it died) runs at start.

The backoff is a few lines here rather than a retry library: attempts span loop passes
of the master (minutes), not one blocking call, and their state is per checkpoint.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from dauntless.config import parse_experiment_config
from dauntless.storage import StorageManager, build_storage

from .db import CheckpointRow, Database, ExperimentRow

log = logging.getLogger("dauntless.master")

#: Seconds before the first retry of a failed delete; doubled per failure up to the cap.
RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 300.0
#: An upload whose process died can still land in the store after the first delete (its
#: last request was on the wire or queued in the server): such checkpoints are deleted a
#: second time this many seconds after the first success before they become DELETED.
ORPHAN_SETTLE_SECONDS = 5.0
#: Rows handled per pass of the master's loop (the rest wait for the next pass).
DELETIONS_PER_PASS = 200


@dataclass
class _Retry:
    failures: int
    next_at: float
    last_error: str


class CheckpointDeletions:
    """The deletion of ``DELETING`` checkpoints' files, with its retry state (one per
    master, :attr:`~dauntless.master.context.MasterContext.deletions`).

    Args:
        db: the master database.
        clock: returns seconds since the epoch.
    """

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self.db = db
        self.clock = clock
        #: uuid -> the backoff of a checkpoint whose delete failed (or is settling).
        self.retries: dict[str, _Retry] = {}
        #: uuid -> when its first delete succeeded (None: not yet), for uploads whose
        #: trial died mid-upload.
        self.orphans: dict[str, float | None] = {}
        self._thread: threading.Thread | None = None
        #: One deletion pass at a time (the loop's thread and a GC-policy request).
        self._lock = threading.Lock()

    def note_orphaned_uploads(self, uuids: list[str]) -> None:
        """Mark these DELETING checkpoints as uploads whose trial died mid-upload (see
        :data:`ORPHAN_SETTLE_SECONDS`). Kept in memory: after a master restart they are
        deleted once."""
        for uuid in uuids:
            self.orphans.setdefault(uuid, None)

    def start(self, wait: float = 0.0) -> None:
        """Run :meth:`process` on a background thread unless one is running (the
        master's loop calls it every pass, so a store that hangs never holds up
        scheduling for more than ``wait`` seconds).

        Args:
            wait: seconds to wait for the pass to finish (a fast store's deletions then
                land within the loop pass that decided them, as before).
        """
        thread = self._thread
        if thread is not None and thread.is_alive():
            return

        def run() -> None:
            try:
                self.process()
            except Exception:  # the next pass retries
                log.exception("checkpoint deletion pass failed")

        self._thread = threading.Thread(target=run, name="checkpoint-gc", daemon=True)
        self._thread.start()
        if wait > 0:
            self._thread.join(wait)

    def process(self, experiment_id: int | None = None) -> int:
        """See :meth:`_process` (this holds the one-pass-at-a-time lock)."""
        with self._lock:
            return self._process(experiment_id)

    def _process(self, experiment_id: int | None = None) -> int:
        """Delete the files of ``DELETING`` checkpoints whose retry time has come.

        Args:
            experiment_id: only this experiment's, tried now whatever their backoff
                (a GC policy change collects at once).

        Returns:
            How many checkpoints were deleted (rows now ``DELETED``).
        """
        now = self.clock()
        retries = self.retries
        with self.db.read() as s:
            query = select(CheckpointRow.uuid, CheckpointRow.experiment_id).where(
                CheckpointRow.state == "DELETING"
            )
            now_mode = experiment_id is not None
            if now_mode:
                query = query.where(CheckpointRow.experiment_id == experiment_id)
            rows = [
                (uuid, exp_id)
                for uuid, exp_id in s.execute(query.limit(DELETIONS_PER_PASS))
                if now_mode or uuid not in retries or retries[uuid].next_at <= now
            ]
            configs = {
                exp.id: exp.config
                for exp in s.scalars(
                    select(ExperimentRow).where(ExperimentRow.id.in_(sorted({e for _, e in rows})))
                )
            }
        if not rows:
            return 0
        storages: dict[int, StorageManager | BaseException] = {}
        done: list[str] = []
        for uuid, exp_id in rows:
            if exp_id not in storages:
                storages[exp_id] = _open_storage(configs.get(exp_id))
            storage = storages[exp_id]
            try:
                if isinstance(storage, BaseException):
                    raise storage
                storage.delete(uuid)
            except Exception as exc:
                self._failed(uuid, exc, now)
                continue
            retries.pop(uuid, None)
            orphans = self.orphans
            if uuid in orphans:
                first = orphans[uuid]
                done_at = self.clock()  # the delete itself may have waited on the store
                if first is None or done_at < first + ORPHAN_SETTLE_SECONDS:
                    if first is None:
                        orphans[uuid] = first = done_at
                    # Delete once more when the settle time is over.
                    retries[uuid] = _Retry(0, first + ORPHAN_SETTLE_SECONDS, "settling")
                    continue
                del orphans[uuid]
            done.append(uuid)
        if done:
            with self.db.write() as s:
                for c in s.scalars(select(CheckpointRow).where(CheckpointRow.uuid.in_(done))):
                    if c.state == "DELETING":
                        c.state = "DELETED"
            log.info("deleted %d checkpoint(s) from storage", len(done))
        return len(done)

    def _failed(self, uuid: str, exc: BaseException, now: float) -> None:
        retries = self.retries
        prev = retries.get(uuid)
        failures = (prev.failures if prev else 0) + 1
        delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * math.pow(2, failures - 1))
        retries[uuid] = _Retry(failures, now + delay, str(exc))
        log.warning(
            "deleting checkpoint %s from storage failed (attempt %d, next in %.0f s): %s",
            uuid,
            failures,
            delay,
            exc,
        )


def _open_storage(config: dict[str, Any] | None) -> StorageManager | BaseException:
    if config is None:
        return RuntimeError("the experiment of this checkpoint is gone")
    try:
        return build_storage(parse_experiment_config(config).checkpoint_storage)
    except Exception as exc:
        return exc
