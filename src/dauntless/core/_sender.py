"""``BackgroundSender``: run report calls on a worker thread, in order.

Training reports are frequent and nothing waits for their answer, so the master backend
sends them from this thread: the training loop never waits for an HTTP round trip (or
for the master's database) to report metrics. Anything that needs an answer, or must be
ordered after the reports, calls :meth:`BackgroundSender.flush` first. A call may
:meth:`~BackgroundSender.hold` for a while to let more reports gather into one request;
:meth:`~BackgroundSender.flush` ends every hold at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("dauntless.core")

_STOP = object()


class BackgroundSender:
    """A FIFO of calls executed by one daemon thread (started on the first call).

    A call that raises does not stop the ones after it; the first error is raised in
    the submitting thread by the next :meth:`submit` or :meth:`flush`.

    Args:
        name: the worker thread's name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._hurry = threading.Event()

    def _raise_error(self) -> None:
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def submit(self, call: Callable[[], object]) -> None:
        """Queue ``call`` to run after every call queued before it.

        Raises:
            Exception: the error of an earlier call, if one failed since the last check.
        """
        self._raise_error()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._queue.put(call)

    def hold(self, seconds: float) -> None:
        """Wait up to ``seconds`` on the worker thread, unless a :meth:`flush` (or
        :meth:`close`) is waiting or comes meanwhile: then return at once. Call it only
        from a queued call."""
        if seconds > 0:
            self._hurry.wait(seconds)

    def flush(self) -> None:
        """Wait until every queued call has run, cutting short any :meth:`hold`.

        Call it from one thread at a time (the thread that submits).

        Raises:
            Exception: the first error of a call that failed since the last check.
        """
        if self._thread is not None:
            self._hurry.set()
            try:
                self._queue.join()
            finally:
                self._hurry.clear()
        self._raise_error()

    def close(self) -> None:
        """Run what is queued, then stop the thread; a failed call is logged, not raised."""
        try:
            self.flush()
        except Exception as exc:  # closing must not mask the error being handled
            logger.error("a report to the master was lost: %s", exc)
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            call = self._queue.get()
            try:
                if call is _STOP:
                    return
                call()  # type: ignore[operator]
            except Exception as exc:  # delivered to the submitting thread
                with self._lock:
                    if self._error is None:
                        self._error = exc
            finally:
                self._queue.task_done()
