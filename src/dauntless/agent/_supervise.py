"""The agent's side of task supervisors (:mod:`dauntless.agent._shim`): starting a
task under its shim, following its output and exit, and adopting the tasks an earlier
run of the agent left (issue 29, "no orphans").

Each task has a state directory ``<agent work dir>/.tasks/<allocation id>/`` (mode
0700, the agent's): ``meta.json`` (what the agent needs to adopt it again: the
allocation id, the runtime, the container's name), the shim's files (its module
docstring) and ``shipped`` (``seq offset``: the last line of ``output`` the master
acknowledged, so that a later agent ships on from there with the same line numbers;
the master stores each ``(allocation, seq)`` once).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from .runtimes.base import TaskHandle

log = logging.getLogger("dauntless.agent")

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim.py")
"""The supervisor's file, run by path (``python -I``): no package imports."""
NSINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_nsinit.py")
"""Process 1 of an isolated task's PID namespace, run by path (``python -I -S``)."""
STATE_DIR = ".tasks"
"""The directory of the tasks' state directories, under the agent's work dir."""
TAIL_IDLE_SECONDS = 0.05
"""How long a follower of a task's output waits when there is no new line."""


def state_dir(work_dir: str, allocation_id: str) -> str:
    """The state directory of a task (see the module)."""
    return os.path.join(work_dir, STATE_DIR, allocation_id)


def process_ident(pid: int) -> str | None:
    """``pid start-time`` of a running process (how the shim names its agent), None if
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return f"{pid} {fields[19].decode()}" if len(fields) > 19 else None


def _write_atomic(path: str, text: str) -> None:
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def claim(directory: str) -> None:
    """Make this agent process the one in charge of the task of ``directory``: its shim
    stops counting the agent's absence (:mod:`dauntless.agent._shim`)."""
    ident = process_ident(os.getpid())
    assert ident is not None  # this process runs
    _write_atomic(os.path.join(directory, "agent"), ident)


class ShimHandle(TaskHandle):
    """A task run by its shim (started now, or adopted from an earlier agent).

    Args:
        directory: the task's state directory.
        proc: the shim process, when this agent started it (None: adopted).
        name: the container's name for a container task, else None.
    """

    def __init__(self, directory: str, proc: subprocess.Popen | None, name: str | None = None):
        self.dir = directory
        self.proc = proc  # type: ignore[assignment]
        self.name = name
        self.cleanup_paths: list[str] = []
        self._shim: str | None = None
        self.exit_code: int | None = None
        self.exit_message: str | None = None
        self.ended = False

    @property
    def pid(self) -> int:
        """The shim's process id (signals to the task go through it)."""
        if self.proc is not None:
            return int(self.proc.pid)
        ident = self._shim_ident()
        return int(ident.split()[0]) if ident else -1

    def _shim_ident(self) -> str | None:
        if self._shim is None:
            text = _read(os.path.join(self.dir, "shim"))
            self._shim = text.strip() if text else None
        return self._shim

    def shim_alive(self) -> bool:
        """Whether the shim still runs."""
        if self.proc is not None:
            return self.proc.poll() is None
        ident = self._shim_ident()
        return bool(ident) and process_ident(int(ident.split()[0])) == ident  # type: ignore[union-attr]

    def _open_exit_fd(self) -> int | None:
        """A pidfd of the shim (pidfd_open(2), Linux 5.3+): readable once the shim has
        exited, which it does right after writing ``exit``. None when the kernel or
        Python lacks it, or the shim is gone or cannot be named for sure (a pid is
        only checked against the shim's start time after the pidfd pins it)."""
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return None
        pid = self.pid
        if pid <= 0:
            return None
        try:
            fd = int(pidfd_open(pid))
        except OSError:
            return None
        if self.proc is None and process_ident(pid) != self._shim_ident():
            os.close(fd)  # the pid names another process now
            return None
        return fd

    def poll(self) -> int | None:
        """The exit code once the task has ended, else None. An unknown exit (the shim
        died without recording one) ends the task with code None and a message:
        read :attr:`ended` and :attr:`exit_message`."""
        if self.ended:
            return self.exit_code
        text = _read(os.path.join(self.dir, "exit"))
        if text is None:
            if self.shim_alive():
                return None
            text = _read(os.path.join(self.dir, "exit"))  # written just before it exited
        if text is None:
            self.exit_code, self.exit_message = None, "its supervisor (shim) died"
        else:
            try:
                result = json.loads(text)
                self.exit_code, self.exit_message = result["exit_code"], result.get("message")
            except (ValueError, KeyError, TypeError):
                self.exit_code, self.exit_message = None, "its exit record is unreadable"
        if self.proc is not None:
            self.proc.poll()  # reap the shim
        self.ended = True
        return self.exit_code

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: until it ends) for the end; the exit
        code, or None while it runs (or when it ended unknown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if self.ended:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        """SIGTERM: a graceful stop of the task's process group; SIGKILL: every process
        of the task at once (through the shim)."""
        pid = self.pid
        if pid <= 0 or not self.shim_alive():
            return
        try:
            os.kill(pid, signal.SIGUSR1 if sig == signal.SIGKILL else signal.SIGTERM)
        except ProcessLookupError:
            pass

    @property
    def stdout(self) -> None:  # the output is in the state directory
        return None

    @property
    def stderr(self) -> None:
        return None

    def lines(self, offset: int = 0) -> Iterator[tuple[int, str, str]]:
        """The task's output lines from byte ``offset`` of its output file, following
        it until the task has ended and every line is read.

        Yields:
            ``(offset after the line, "stdout"|"stderr", text)``.
        """
        path = os.path.join(self.dir, "output")
        # Between reads it waits TAIL_IDLE_SECONDS, or less: until the shim exits. So
        # the end of a task is seen when its shim exits, not up to TAIL_IDLE_SECONDS
        # later (half of it on average: a slot's gap between two short trials).
        exit_fd = self._open_exit_fd()
        try:
            yield from self._tail(path, offset, exit_fd)
        finally:
            if exit_fd is not None:
                os.close(exit_fd)

    def _tail(self, path: str, offset: int, exit_fd: int | None) -> Iterator[tuple[int, str, str]]:
        buf = b""
        with open(path, "rb") as f:
            f.seek(offset)
            pos = offset
            while True:
                chunk = f.read(1 << 16)
                if chunk:
                    buf += chunk
                    *complete, buf = buf.split(b"\n")
                    for rec in complete:
                        pos += len(rec) + 1
                        if rec:
                            kind = "stderr" if rec[:1] == b"E" else "stdout"
                            yield pos, kind, rec[1:].decode("utf-8", errors="replace")
                    continue
                self.poll()
                if self.ended:
                    chunk = f.read()
                    if not chunk:
                        return
                    buf += chunk
                    continue
                if exit_fd is None:
                    time.sleep(TAIL_IDLE_SECONDS)
                elif select.select([exit_fd], [], [], TAIL_IDLE_SECONDS)[0]:
                    # The shim has exited: the next poll() sees the end, or, for a shim
                    # killed before it recorded an exit and not yet reaped (a zombie
                    # still named by its pid and start time), a later one. A pidfd stays
                    # readable, so from here the loop sleeps instead of spinning on it.
                    exit_fd = None

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Wait for the end and return ``(stdout, stderr)`` (for tests and tools)."""
        self.wait(timeout)
        out: list[str] = []
        err: list[str] = []
        for _pos, kind, text in self.lines():
            (err if kind == "stderr" else out).append(text + "\n")
        return "".join(out).encode(), "".join(err).encode()

    @property
    def returncode(self) -> int | None:
        """The exit code once known (as :attr:`subprocess.Popen.returncode`)."""
        return self.exit_code if self.ended else None

    def shipped(self) -> tuple[int, int]:
        """``(seq, offset)`` of the last line the master acknowledged; (0, 0) if none."""
        text = _read(os.path.join(self.dir, "shipped"))
        try:
            seq, offset = (int(x) for x in (text or "0 0").split())
        except ValueError:
            return 0, 0
        return seq, offset

    def record_shipped(self, seq: int, offset: int) -> None:
        """Remember the last acknowledged line (see :meth:`shipped`)."""
        if os.path.isdir(self.dir):
            _write_atomic(os.path.join(self.dir, "shipped"), f"{seq} {offset}")

    def remove(self) -> None:
        """Remove the state directory (the task has ended and its exit is reported)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def start_shim(
    directory: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    grace: float,
    meta: dict[str, Any],
    status_fd: bool = False,
    on_orphan: list[str] | None = None,
    name: str | None = None,
) -> ShimHandle:
    """Start a task under a new shim.

    Args:
        directory: the task's state directory (made here, mode 0700; must not exist).
        argv, env, cwd: what the shim starts, with which variables, where.
        grace: seconds the task may outlive this agent (``orphan_grace_period``).
        meta: what a later agent needs to adopt the task (``allocation_id``,
            ``runtime``; written to ``meta.json``).
        status_fd: the task reports its own exit status on fd 3 (an isolated task).
        on_orphan: an argv the shim runs after ending the task for its agent's absence.
        name: the container's name of a container task.

    Raises:
        OSError: the directory exists or the shim could not be started.
    """
    make_state_dir(directory, argv, env, cwd, grace, meta, status_fd, on_orphan, name)
    # Not in the agent's session or process group: the shim outlives the agent.
    with open(os.path.join(directory, "shim.log"), "ab") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-I", SHIM, directory],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            close_fds=True,
            env={"PATH": env.get("PATH", os.defpath)},
        )
    return ShimHandle(directory, proc, name)


def make_state_dir(
    directory: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    grace: float,
    meta: dict[str, Any],
    status_fd: bool = False,
    on_orphan: list[str] | None = None,
    name: str | None = None,
) -> None:
    """Make a task's state directory for its shim, claimed by this agent: ``meta.json``,
    an empty ``output``, ``agent`` and ``spec.json`` (arguments as :func:`start_shim`'s).
    :func:`start_shim` then starts the shim; the warm worker forks one instead
    (:meth:`dauntless.agent._warm.WarmStarter.fork_supervised`).

    Raises:
        OSError: the directory exists or cannot be written.
    """
    os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
    os.mkdir(directory, 0o700)
    _write_atomic(os.path.join(directory, "meta.json"), json.dumps({**meta, "name": name}))
    # Made here, so that the agent can follow it from the start (the shim appends).
    os.close(os.open(os.path.join(directory, "output"), os.O_WRONLY | os.O_CREAT, 0o600))
    claim(directory)
    spec = {
        "argv": argv,
        "env": env,
        "cwd": cwd,
        "grace": grace,
        "status_fd": status_fd,
        "on_orphan": on_orphan,
    }
    _write_atomic(os.path.join(directory, "spec.json"), json.dumps(spec))


def adoptable(work_dir: str) -> list[tuple[dict[str, Any], ShimHandle]]:
    """The tasks an earlier run of this agent left under ``work_dir``, claimed by this
    process: ``[(meta, handle)]``, ended ones included (their exit is still to report).
    A state directory without ``meta.json`` (an agent died while starting it) is
    removed."""
    root = os.path.join(work_dir, STATE_DIR)
    out = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    for name in names:
        directory = os.path.join(root, name)
        text = _read(os.path.join(directory, "meta.json"))
        try:
            meta = json.loads(text) if text else None
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("allocation_id") != name:
            shutil.rmtree(directory, ignore_errors=True)
            continue
        claim(directory)
        out.append((meta, ShimHandle(directory, None, meta.get("name"))))
    return out
