"""``PreemptContext``: has the master asked this allocation to stop?

On a cluster the chief watches the signal from a background thread that long-polls
``GET /allocations/{id}/signals/preemption?timeout_seconds=N`` (docs/protocol.md), so
that :meth:`PreemptContext.should_preempt` is a flag read, cheap enough to call after
every batch, and a pause takes effect after the batch in progress.
"""

from __future__ import annotations

import enum
import logging
import threading
from typing import Any

from ._backend import Backend
from ._distributed import DistributedContext

logger = logging.getLogger("dauntless.core")

#: Seconds of each long poll (the master answers at once when the signal is raised).
DEFAULT_POLL_SECONDS = 60.0
#: Seconds to wait after a failed poll before the next one.
ERROR_BACKOFF_SECONDS = 5.0


class PreemptMode(enum.Enum):
    """Which processes ask for the preemption signal, and how.

    ``WorkersAskChief``: every rank calls :meth:`PreemptContext.should_preempt` at the
    same points; the chief watches the master and broadcasts its answer (a collective).
    ``ChiefOnly``: only the chief may ask. ``WorkersAskMaster``: every rank watches the
    master itself (no collective).
    """

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    """The preemption signal: checkpoint and exit 0 when it is raised.

    The master raises it when the experiment is paused, the trial is descheduled or the
    cluster needs the slots. Once seen, it stays raised for this process.

    With a backend that long-polls (:attr:`Backend.long_poll`, the master) the signal is
    watched by a daemon thread started on the first :meth:`should_preempt` call (or by
    :meth:`start`); each poll waits up to ``poll_seconds``. Errors of the master are
    logged and the poll retried after ``error_backoff`` seconds: losing the master for a
    while never stops training. Other backends are asked on each call.

    Args:
        backend: where the signal is read.
        allocation_id: this process's allocation.
        distributed: the process layout (for ``WorkersAskChief``); one process when None.
        mode: see :class:`PreemptMode`.
        poll_seconds: seconds each long poll waits, in (0, 60].
        error_backoff: seconds to wait after a failed poll (> 0).

    Raises:
        TypeError: if ``mode`` is not a :class:`PreemptMode`.
        ValueError: if ``poll_seconds`` or ``error_backoff`` is out of range.
    """

    def __init__(
        self,
        backend: Backend,
        allocation_id: str,
        *,
        distributed: DistributedContext | None = None,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        error_backoff: float = ERROR_BACKOFF_SECONDS,
    ) -> None:
        if not isinstance(mode, PreemptMode):
            raise TypeError(f"mode must be a PreemptMode, got {mode!r}")
        if not 0 < poll_seconds <= 60:
            raise ValueError(f"poll_seconds must be in (0, 60], got {poll_seconds}")
        if error_backoff <= 0:
            raise ValueError(f"error_backoff must be > 0 seconds, got {error_backoff}")
        self._backend = backend
        self.allocation_id = allocation_id
        self._dist = distributed or DistributedContext()
        self.mode = mode
        self.poll_seconds = poll_seconds
        self.error_backoff = error_backoff
        self._raised = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._collective = mode is PreemptMode.WorkersAskChief and self._dist.size > 1
        self.acknowledged = False

    # ------------------------------------------------------------------ watching

    def _watches(self) -> bool:
        if self.mode is PreemptMode.WorkersAskMaster:
            return True
        return self._dist.is_chief

    def start(self) -> None:
        """Start the watcher thread now (it otherwise starts on the first check).

        Does nothing when the backend does not long-poll, on ranks that do not watch,
        or when the watcher already runs.
        """
        if not self._backend.long_poll or not self._watches():
            return
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._watch, name=f"preemption-{self.allocation_id}", daemon=True
            )
            self._thread.start()

    def _watch(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                raised = self._backend.get_preemption_signal(
                    self.allocation_id, timeout_seconds=self.poll_seconds
                )
            except Exception as exc:  # a background thread must never die of the master
                if self._stop.is_set():
                    return
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    logger.warning(
                        "could not read the preemption signal (%d failures so far): %s",
                        failures,
                        exc,
                    )
                self._stop.wait(self.error_backoff)
                continue
            failures = 0
            if raised:
                logger.info("the master asked allocation %s to stop", self.allocation_id)
                self._raised.set()
                return

    def stop(self) -> None:
        """Tell the watcher thread to end after its poll in flight (does not wait)."""
        self._stop.set()

    def close(self, timeout: float | None = None) -> None:
        """Stop the watcher thread.

        A poll in flight ends when the backend is closed (the master backend shuts its
        socket down; :meth:`Context.close` does that between :meth:`stop` and this).
        The call waits up to ``timeout`` seconds for the thread to end (default: the
        poll's length plus a second when polls are short, else half a second); a thread
        still waiting then ends, as a daemon, when its poll returns.
        """
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        if timeout is None:
            timeout = self.poll_seconds + 1.0 if self.poll_seconds <= 5 else 0.5
        thread.join(timeout)

    # ------------------------------------------------------------------ asking

    def _local_answer(self) -> bool:
        if self._raised.is_set():
            return True
        if self._backend.long_poll:
            self.start()
            return self._raised.is_set()
        if self._backend.get_preemption_signal(self.allocation_id):
            self._raised.set()
        return self._raised.is_set()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """Whether this allocation should checkpoint and exit; sticky once True.

        With the master this reads a flag the watcher thread sets (no request). In
        ``WorkersAskChief`` mode with several processes it is a collective: every rank
        must call it at the same point, and all get the chief's answer.

        Args:
            auto_ack: acknowledge the signal when it is raised (see
                :meth:`acknowledge_preemption_signal`).

        Raises:
            RuntimeError: if a non-chief rank asks in ``ChiefOnly`` mode.
        """
        if self._thread is not None and not self._collective:
            # The watcher runs: a flag read (the per-batch path).
            if not self._raised.is_set():
                return False
            if auto_ack:
                self.acknowledge_preemption_signal()
            return True
        if self.mode is PreemptMode.ChiefOnly and not self._dist.is_chief:
            raise RuntimeError(
                "should_preempt() is chief-only in PreemptMode.ChiefOnly: ask on rank 0, "
                "or use PreemptMode.WorkersAskChief"
            )
        if self._collective:
            answer: Any = self._local_answer() if self._dist.is_chief else None
            answer = bool(self._dist.broadcast(answer))
            if answer:
                self._raised.set()
        else:
            answer = self._local_answer()
        if answer and auto_ack:
            self.acknowledge_preemption_signal()
        return answer

    def signal_seen_here(self) -> bool:
        """This process's own view of the signal, without any collective; sticky.

        On the chief (or in ``WorkersAskMaster`` mode) it starts the watcher if needed
        and reads its flag; elsewhere it is False until a collective
        :meth:`should_preempt` told this rank. A harness that combines the signal with
        other stop reasons in one collective of its own uses this on the chief.
        """
        if self._raised.is_set():
            return True
        if not self._watches():
            return False
        return self._local_answer()

    def ask_master_now(self) -> bool:
        """This process's view of the signal, brought up to date: the reports queued
        for the master are delivered first (so a decision they cause, such as ASHA
        stopping the trial at a validation, is made), then the master is asked once
        without waiting. No collective; sticky. A process that does not watch the
        signal (a non-chief rank in ``WorkersAskChief`` mode) answers as
        :meth:`signal_seen_here`.

        Raises:
            APIError, MasterUnreachableError: a queued report or the ask failed.
        """
        if self._raised.is_set():
            return True
        if not self._watches():
            return False
        flush = getattr(self._backend, "flush", None)
        if callable(flush):
            flush()
        if self._backend.get_preemption_signal(self.allocation_id):
            self._raised.set()
        return self._raised.is_set()

    def acknowledge_preemption_signal(self) -> None:
        """Record that this process will stop for the preemption.

        The master reschedules a trial whose allocation exits 0 after it raised the
        signal (docs/protocol.md), so the acknowledgement is kept here only.
        """
        self.acknowledged = True
