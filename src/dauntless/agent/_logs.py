"""Shipping task output to the master as trial logs, in batches."""

from __future__ import annotations

import logging
import threading
import time
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

    Args:
        client: httpx client whose base URL is the master.
    """

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self._buf: list[dict[str, Any]] = []
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def add(self, allocation_id: str, stdtype: str, line: str) -> None:
        """Queue one line (its trailing newline removed)."""
        with self._lock:
            seq = self._seq.get(allocation_id, 0) + 1
            self._seq[allocation_id] = seq
            self._buf.append(
                {
                    "allocation_id": allocation_id,
                    "seq": seq,
                    "timestamp": time.time(),
                    "stdtype": stdtype,
                    "rank_id": None,
                    "log": line.rstrip("\n"),
                }
            )
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
                r = self.client.post("/api/v1/task/logs", json={"logs": batch})
                if r.status_code == 404:
                    log.warning("master does not know the allocation of %d log lines", len(batch))
                else:
                    r.raise_for_status()
                with self._lock:
                    del self._buf[: len(batch)]

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
