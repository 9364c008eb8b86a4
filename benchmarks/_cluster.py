"""A real master for the benchmarks: ``python -m dauntless.master`` as a subprocess.

:func:`master` starts the master on a free port of 127.0.0.1, its stdout and stderr
going to a log file, waits until ``GET /api/v1/master`` answers, yields a
:class:`Master` (URL, port, process) and stops the process on exit (SIGTERM, then
SIGKILL after ``stop_timeout`` seconds). The master's environment is this process's
without the ``DET_*`` variables (a developer's ``DET_MASTER`` or token must not reach
it) and with ``PYTHONUNBUFFERED=1`` (the log is complete when a start fails).

By default the master runs with ``--agent-timeout 3600 --log-level warning``: a
pretend agent that never sends a heartbeat is not lost within a run, and the master
spends no CPU on info logs. A benchmark measuring the master's defaults passes
``agent_timeout=None`` / ``log_level=None``.

While a master started here runs, SIGTERM (``timeout``, ``kill``) and SIGINT (Ctrl-C)
raise in the benchmark's main thread (:func:`stop_on_signals`), so its ``with`` blocks
unwind and stop the master and whatever else they started (issue 38: a benchmark stopped
by ``timeout`` left its master, started in a session of its own, running for good).

Benchmarks run as ``python benchmarks/X.py`` import it as ``import _cluster`` (the
script's directory is ``sys.path[0]``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

POLL_SECONDS = 0.1  # between two readiness checks of a starting master


class MasterStartError(RuntimeError):
    """The master exited, or did not answer, before it was ready."""


@dataclasses.dataclass(frozen=True)
class Master:
    """A started master.

    Attributes:
        url: ``http://127.0.0.1:<port>``, without a trailing slash.
        port: the port it listens on.
        process: its ``Popen`` (``process.pid`` is the master's own pid: the command is
            the interpreter itself, not a shell).
        log: the file its stdout and stderr go to.
    """

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The master process's pid."""
        return self.process.pid


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free when asked.

    The socket that found it is closed on return, so another process may take the port
    before the caller binds it; the benchmarks accept that small race.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """End ``proc``: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL and reap it.

    Does nothing to a process that has already exited (it is reaped).

    Raises:
        ValueError: if ``timeout`` <= 0.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Stopped(SystemExit):
    """Raised in the main thread by a SIGTERM while :func:`stop_on_signals` is active;
    the exit status is 128 + the signal's number, as a shell reports a killed process."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(128 + signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Stopped` and SIGINT
    ``KeyboardInterrupt`` in the main thread, so that the ``finally`` blocks and context
    managers around it run and stop the processes they started. The previous handlers
    come back when the block ends. Off the main thread (where Python cannot set
    handlers) it does nothing.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_stopped),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def master(
    data_dir: Path,
    *,
    db_url: str | None = None,
    log: Path | None = None,
    src: str | os.PathLike[str] | None = None,
    args: Sequence[str] = (),
    agent_timeout: float | None = 3600.0,
    log_level: str | None = "warning",
    start_new_session: bool = False,
    start_timeout: float = 60.0,
    stop_timeout: float = 20.0,
) -> Iterator[Master]:
    """Start a master, wait until it answers, yield it, stop it on exit (also on SIGTERM
    or SIGINT: see :func:`stop_on_signals`).

    Args:
        data_dir: the master's ``--data-dir`` (it creates the directory when missing).
        db_url: its ``--db-url`` (a SQLAlchemy URL); None: SQLite in ``data_dir``.
        log: the file for its stdout and stderr (truncated; parents made); None:
            ``data_dir / "master.log"``.
        src: a directory put first on the master's ``PYTHONPATH``, to run the package
            found there instead of the installed one (e.g. a checkout of main's
            ``src/``).
        args: more command-line arguments, after the others.
        agent_timeout: ``--agent-timeout`` in seconds; None: the master's default.
        log_level: ``--log-level`` (``debug``, ``info``, ``warning`` or ``error``);
            None: the master's default.
        start_new_session: run the master in a session of its own, so that a Ctrl-C in
            the terminal reaches only the benchmark, which then stops the master itself.
        start_timeout: seconds to wait for ``GET /api/v1/master`` to answer 2xx (checked
            every ``POLL_SECONDS``).
        stop_timeout: seconds between SIGTERM and SIGKILL on exit.

    Yields:
        The running :class:`Master`.

    Raises:
        ValueError: if ``start_timeout`` or ``stop_timeout`` is <= 0.
        MasterStartError: if the master exits, or does not answer within
            ``start_timeout`` seconds; the message names the log. The process is stopped
            first.
        OSError: if the log cannot be opened or the interpreter cannot be started.
    """
    if start_timeout <= 0 or stop_timeout <= 0:
        raise ValueError(
            f"start_timeout and stop_timeout must be > 0 seconds, got {start_timeout} "
            f"and {stop_timeout}"
        )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = data_dir / "master.log" if log is None else log
    argv = [
        sys.executable,
        "-m",
        "dauntless.master",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    if db_url is not None:
        argv += ["--db-url", db_url]
    if agent_timeout is not None:
        argv += ["--agent-timeout", f"{agent_timeout:g}"]
    if log_level is not None:
        argv += ["--log-level", log_level]
    if "--proxy-port" not in args:
        # The task proxy origin's default port is --port + 1, which another process may
        # hold where several benchmarks and test runs share the machine: any free one.
        argv += ["--proxy-port", "0"]
    argv += args
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONUNBUFFERED"] = "1"
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [os.fspath(src), *filter(None, [env.get("PYTHONPATH")])]
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    with stop_on_signals(), log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=start_new_session,
        )
        try:
            _wait_ready(proc, url, log, start_timeout)
            yield Master(url=url, port=port, process=proc, log=log)
        finally:
            stop(proc, stop_timeout)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    """Return once ``GET {url}/api/v1/master`` answers 2xx.

    Raises:
        MasterStartError: if ``proc`` exits first, or ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise MasterStartError(f"the master exited with {code} before it answered: see {log}")
        try:
            httpx.get(url + "/api/v1/master", timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise MasterStartError(
                    f"the master did not answer in {timeout:g} s: see {log}"
                ) from None
            time.sleep(POLL_SECONDS)
