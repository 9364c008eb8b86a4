"""The master's background fold of metric reports, in a process of its own.

The master acknowledges training reports unfolded and folds them into their summaries in
bulk every few seconds (:class:`~dauntless.master.metric_fold.MetricFolder`). Folding is
CPU work (JSON, the M4 summaries of every reported metric) of about a millisecond per
report of 256 metrics, done in bursts, and in the master's process it competes for the
interpreter lock with the requests that store reports: with 32 trials reporting, the
acknowledgements that came during a fold waited for it. With the fold in a thread the
p99 acknowledgement was 100-500 ms on PostgreSQL and 80-90 ms on SQLite; in a process of
its own, 20-60 ms and about 40 ms (issue 19, ``benchmarks/metric_ingest.py
--sender-rate 2.5``).

So the master (``python -m dauntless.master``) runs ``python -m
dauntless.master.fold_worker`` (a :class:`FoldWorker`), which runs the same
:class:`MetricFolder` on a connection of its own, at a lower CPU priority. Readers in
the master still fold their trials' pending reports first; two folders of one trial are
safe because a fold whose reports another folder folded first is rolled back and read
again (:func:`~dauntless.master.metric_fold.write_fold`). On SQLite the two processes
share the database file's one write lock: the pysqlite driver begins a transaction at
its first write, so a writer that finds the lock taken waits for it (the 30 s busy
timeout) rather than fail; 2 x 3,000 concurrent read-then-write transactions of two
processes gave no error.

The worker reads the database URL from its standard input's first line (so a password
is not on its command line) and exits when that input reaches its end, which is when
the master closes it or dies, SIGKILL included: it never outlives its master.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

from .metric_fold import FOLD_INTERVAL, MetricFolder

log = logging.getLogger("dauntless.master.fold_worker")

NICE = 10
"""The worker's niceness increment (``os.nice``): on a busy machine the kernel gives the
CPU to the master's requests and the database server first, and the fold, which can
wait, takes what is left (issue 19: the acknowledgements' p99)."""

RESTART_DELAY = 5.0
"""Seconds the master waits before starting a worker again after it exited."""


class FoldWorker:
    """Runs the background fold in a child process and keeps it running.

    A supervising thread starts the worker and, when it exits unasked (a crash, an out
    of memory kill), logs its exit status and starts another after
    :data:`RESTART_DELAY` seconds; pending reports wait in the database meanwhile and
    readers fold what they read. Same interface as
    :class:`~dauntless.master.metric_fold.MetricFolder`: :meth:`start` and :meth:`close`.

    Args:
        db_url: the master database's URL (SQLAlchemy form, password included).
        interval: seconds between the worker's folds (> 0).

    Raises:
        ValueError: ``interval`` <= 0.
    """

    def __init__(self, db_url: str, interval: float = FOLD_INTERVAL) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.db_url = db_url
        self.interval = interval
        self.stop = threading.Event()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._thread: threading.Thread | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dauntless.master.fold_worker", f"{self.interval!r}"],
            stdin=subprocess.PIPE,
        )
        assert proc.stdin is not None
        proc.stdin.write(self.db_url.encode() + b"\n")
        proc.stdin.flush()
        self.starts += 1
        return proc

    def _supervise(self) -> None:
        while not self.stop.is_set():
            try:
                self.process = self._spawn()
            except OSError:
                log.exception("could not start the metric fold worker")
            else:
                code = self.process.wait()
                if self.stop.is_set():
                    return
                log.error(
                    "the metric fold worker (pid %d) exited with status %d; starting "
                    "another in %g s",
                    self.process.pid,
                    code,
                    RESTART_DELAY,
                )
            self.stop.wait(RESTART_DELAY)

    def start(self) -> None:
        """Start the worker, and its supervisor (a daemon thread)."""
        self._thread = threading.Thread(target=self._supervise, name="fold-worker", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Ask the worker to exit (its input ends; a fold in flight is rolled back and
        redone by the next one), wait up to ``timeout`` seconds for it, and kill it if it
        has not exited. A worker the supervisor starts at that moment sees its input end
        when the master exits."""
        self.stop.set()
        proc = self.process
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(timeout)


def _exit_when_input_ends() -> None:
    """Block until standard input ends (the master closed it or died), then exit at
    once: a fold in flight is rolled back by the database and redone later."""
    while sys.stdin.buffer.read(65536):
        pass
    os._exit(0)


def main(argv: list[str]) -> int:
    """The worker: ``python -m dauntless.master.fold_worker [INTERVAL]``, the database
    URL on the first line of standard input. Folds every INTERVAL seconds (default
    :data:`FOLD_INTERVAL`) until its input ends. Returns 2 for bad arguments."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s fold-worker: %(message)s"
    )
    try:
        interval = float(argv[0]) if argv else FOLD_INTERVAL
        if not interval > 0:
            raise ValueError
    except ValueError:
        print(f"fold_worker: INTERVAL must be seconds > 0, got {argv[0]!r}", file=sys.stderr)
        return 2
    url = sys.stdin.buffer.readline().decode().strip()
    if not url:
        print("fold_worker: expected the database URL on standard input", file=sys.stderr)
        return 2
    from .db import Database

    # A signal to the master's process group (^C in its terminal, a service manager's
    # SIGTERM) is for the master: it stops, and this worker with it once its input ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(NICE)  # background work: the master and the database come first
    threading.Thread(target=_exit_when_input_ends, name="input-watch", daemon=True).start()
    MetricFolder(Database(url), interval).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
