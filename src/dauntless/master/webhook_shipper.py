"""Delivering queued webhook events in the background (issue 31 scope 6).

One thread per master takes due ``webhook_events`` rows (``QUEUED``, ``next_at`` passed;
oldest first, at most :data:`BATCH` a round), POSTs each body signed
(:func:`dauntless.master.webhooks.signed_headers`) with no database transaction open,
then records the outcome: a 2xx answer -> ``DELIVERED``; a 3xx or 4xx -> ``FAILED`` (the
receiver refused it; trying again would not help: Determined's rule); a transport error
or a 5xx -> tried again after ``1 s * 2**(attempts - 1)`` capped at
``webhooks.max_backoff``, until ``webhooks.max_attempts`` tries, then ``FAILED``. Every
try's outcome stays in the row (the delivery log: ``GET /webhooks/{id}/events``).

Why a loop of our own rather than a task queue library: the queue is the database
(events commit with the change that caused them and survive a restart), there is one
consumer, and the retry rule is two lines; a broker would add a service to run. The
HTTP requests go through httpx.

The thread never raises out of its loop: a failing receiver, a bad URL or a database
error is logged and retried later, so the master keeps answering whatever the receivers
do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from dauntless._tls import default_ssl_context
from dauntless.config import WebhooksConfig

from .db import Database, WebhookEventRow, WebhookRow
from .webhooks import signed_headers

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("dauntless.master.webhooks")

BATCH = 10
"""The most events one round delivers (Determined's batch size)."""

IDLE_WAIT = 1.0
"""Seconds the thread waits after a failed round."""

IDLE_WAIT_MAX = 30.0
"""The longest the thread sleeps when nothing wakes it (events queued by another
process of the master, which cannot set the wake event, wait at most this long)."""


def backoff(attempts: int, cap: float) -> float:
    """Seconds before try ``attempts + 1`` (``attempts`` >= 1 made): ``2**(attempts-1)``
    capped at ``cap`` (Determined's exponential backoff from 1 s)."""
    return float(min(cap, 2.0 ** max(0, attempts - 1)))


def post(
    client: httpx.Client, url: str, body: bytes, key: bytes, now: float
) -> tuple[int | None, str | None]:
    """POST ``body`` to ``url`` signed with ``key``: ``(status, None)`` or ``(None,
    error)`` for a transport error."""
    import httpx

    try:
        r = client.post(url, content=body, headers=signed_headers(key, int(now), body))
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:1024]
    return r.status_code, None


class Shipper:
    """The background delivery of webhook events.

    Args:
        db: the master database.
        config: ``webhooks`` of the master config.
        key: the signing key.
        wake: set when events were queued (the thread wakes at once).
        clock: seconds since the epoch.
    """

    def __init__(
        self,
        db: Database,
        config: WebhooksConfig,
        key: bytes,
        wake: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db, self.config, self.key, self.wake, self.clock = db, config, key, wake, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None  # made by the first delivery

    def client(self) -> httpx.Client:
        """The delivery thread's HTTP client, made at the first delivery: a master with
        no webhook to call never imports httpx nor loads the CA bundle (issue 37: 4.5 MB
        of its resident memory, with the proxy's client). One TLS context per process
        (loading the CA bundle costs 25-50 ms of CPU)."""
        if self._client is None:
            import httpx

            self._client = httpx.Client(
                timeout=self.config.timeout, follow_redirects=False, verify=default_ssl_context()
            )
        return self._client

    def start(self) -> None:
        """Start the delivery thread."""
        self._thread = threading.Thread(target=self._run, name="webhook-shipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (what is queued stays queued for the next start)."""
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.timeout + 5)
        if self._client is not None:
            self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = IDLE_WAIT
            try:
                if self.run_once() == BATCH:
                    continue
                wait = self.next_wait()
            except Exception:  # noqa: BLE001 - the loop must outlive any failure
                log.exception("webhook delivery round failed; trying again")
            self.wake.wait(wait)
            self.wake.clear()

    def next_wait(self) -> float:
        """Seconds until the next queued event is due (:data:`IDLE_WAIT_MAX` when none
        is queued: new events wake the thread)."""
        with self.db.read() as s:
            due = s.scalar(
                select(func.min(WebhookEventRow.next_at)).where(WebhookEventRow.state == "QUEUED")
            )
        if due is None:
            return IDLE_WAIT_MAX
        return min(IDLE_WAIT_MAX, max(0.0, due - self.clock()))

    def run_once(self) -> int:
        """Deliver the due events (at most :data:`BATCH`); returns how many were tried."""
        now = self.clock()
        with self.db.read() as s:
            due = s.execute(
                select(WebhookEventRow.id, WebhookEventRow.body, WebhookRow.url)
                .join(WebhookRow, WebhookRow.id == WebhookEventRow.webhook_id)
                .where(WebhookEventRow.state == "QUEUED", WebhookEventRow.next_at <= now)
                .order_by(WebhookEventRow.next_at, WebhookEventRow.id)
                .limit(BATCH)
            ).all()
        for event_id, body, url in due:
            if self._stop.is_set():
                break
            status, error = post(self.client(), url, body.encode(), self.key, self.clock())
            self._record(event_id, status, error)
        return len(due)

    def _record(self, event_id: int, status: int | None, error: str | None) -> None:
        now = self.clock()
        with self.db.write() as s:
            row = s.get(WebhookEventRow, event_id)
            if row is None:  # its webhook was deleted meanwhile
                return
            row.attempts += 1
            row.last_status, row.last_error = status, error
            if status is not None and 200 <= status < 300:
                row.state, row.delivered_at = "DELIVERED", now
            elif status is not None and 300 <= status < 500:
                row.state = "FAILED"
            elif row.attempts >= self.config.max_attempts:
                row.state = "FAILED"
            else:
                row.next_at = now + backoff(row.attempts, self.config.max_backoff)
        if status is None or status >= 300:
            log.info("webhook event %d: %s", event_id, error or f"HTTP {status}")
