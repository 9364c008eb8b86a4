"""Shipping task output to the master as trial logs, in batches."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import httpx

log = logging.getLogger("dauntless.agent")

BATCH_LINES = 500
"""Most lines in one request to ``/task/logs``."""
FLUSH_SECONDS = 0.25
"""Longest a line waits before it is sent."""
MAX_BUFFERED_LINES = 200_000
"""Lines kept while the master is unreachable; older ones are dropped past this."""


class LogShipper:
    """Collects lines from task streams and posts them to the master in batches.

    A background thread sends whatever is buffered every :data:`FLUSH_SECONDS` (or as soon
    as :data:`BATCH_LINES` are waiting). Lines that fail to send stay buffered, in order,
    and are sent on the next attempt.

    Lines read from a task's output file (a task under a supervisor,
    :mod:`dauntless.agent._supervise`) carry their offset in that file: once the master
    acknowledged them, the allocation's ``on_shipped(seq, offset)`` (:meth:`follow`)
    records where a later agent goes on from.

    Args:
        client: httpx client whose base URL is the master.
    """

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self._buf: list[dict[str, Any]] = []
        self._seq: dict[str, int] = {}
        self._acks: dict[str, Callable[[int, int], None]] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def follow(
        self,
        allocation_id: str,
        on_shipped: Callable[[int, int], None],
        seq: int | None = None,
    ) -> int:
        """Call ``on_shipped(seq, offset)`` when lines of the allocation added with an
        offset are acknowledged; with ``seq``, number its next line ``seq + 1`` (lines up
        to ``seq`` were shipped by an earlier agent).

        Returns:
            The number of the allocation's last line queued so far.
        """
        with self._lock:
            if seq is not None:
                self._seq[allocation_id] = seq
            self._acks[allocation_id] = on_shipped
            return self._seq.get(allocation_id, 0)

    def forget(self, allocation_id: str) -> None:
        """Stop recording acknowledgements of the allocation (its task has ended)."""
        with self._lock:
            self._acks.pop(allocation_id, None)

    def add(self, allocation_id: str, stdtype: str, line: str, offset: int | None = None) -> None:
        """Queue one line (its trailing newline removed); ``offset``: where the line
        ends in its task's output file, if it came from one."""
        with self._lock:
            seq = self._seq.get(allocation_id, 0) + 1
            self._seq[allocation_id] = seq
            entry = {
                "allocation_id": allocation_id,
                "seq": seq,
                "timestamp": time.time(),
                "stdtype": stdtype,
                "rank_id": None,
                "log": line.rstrip("\n"),
            }
            if offset is not None:
                entry["_offset"] = offset
            self._buf.append(entry)
            if len(self._buf) > MAX_BUFFERED_LINES:
                extra = len(self._buf) - MAX_BUFFERED_LINES
                del self._buf[:extra]
                self.dropped += extra
            if len(self._buf) >= BATCH_LINES:
                self._wake.set()

    def pump(self, allocation_id: str, stdtype: str, stream: IO[bytes]) -> None:
        """Read ``stream`` line by line until EOF, queueing each line (run in a thread)."""
        with stream:
            for raw in iter(stream.readline, b""):
                self.add(allocation_id, stdtype, raw.decode("utf-8", errors="replace"))

    def flush(self) -> None:
        """Send everything buffered now.

        Raises:
            httpx.HTTPError: the master is unreachable; the lines stay buffered.
        """
        with self._send_lock:
            while True:
                with self._lock:
                    batch = self._buf[:BATCH_LINES]
                if not batch:
                    return
                body = [{k: v for k, v in e.items() if k != "_offset"} for e in batch]
                r = self.client.post("/api/v1/task/logs", json={"logs": body})
                if r.status_code == 404:
                    log.warning("master does not know the allocation of %d log lines", len(batch))
                else:
                    r.raise_for_status()
                with self._lock:
                    del self._buf[: len(batch)]
                    shipped = {
                        e["allocation_id"]: (e["seq"], e["_offset"])
                        for e in batch
                        if "_offset" in e
                    }
                    acks = {a: self._acks.get(a) for a in shipped}
                for alloc_id, (seq, offset) in shipped.items():
                    ack = acks[alloc_id]
                    if ack is not None:
                        try:
                            ack(seq, offset)
                        except OSError as exc:  # the task's state is gone: nothing to keep
                            log.debug("could not record shipped lines of %s: %s", alloc_id, exc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            try:
                self.flush()
            except (httpx.HTTPError, OSError) as exc:
                log.debug("log shipping failed (%s); will retry", exc)

    def start(self) -> None:
        """Start the background sender."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="log-shipper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the sender after one last flush attempt."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.flush()
        except (httpx.HTTPError, OSError):
            log.warning("dropped %d unsent log lines at shutdown", len(self._buf))
