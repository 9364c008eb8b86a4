"""Warm trial start: the agent's side of the fork server (:mod:`dauntless.exec._forkserver`).

:class:`WarmStarter` starts the fork server (in the background, at agent start), decides
whether a task may be forked from it (:func:`warm_request`), and forks it, returning a
handle that looks like the :class:`subprocess.Popen` of the cold path to the rest of the
agent (``pid``, ``poll``, ``wait``, ``stdout``, ``stderr``). Anything the warm path cannot
reproduce exactly runs the cold path instead (docs/warm-start.md):

- a task other than a trial, or a trial with more than one rank on this node or more
  than one node (those go through the rank launcher);
- an entrypoint other than ``module:Class``, ``python[3] FILE.py ARGS`` or ``python[3]
  -m MODULE ARGS`` whose ``python`` is the agent's own interpreter on the task's
  ``PATH``, or one with shell syntax;
- a task with a Python environment (``python_requirements``), bind mounts, an image, or
  a ``startup-hook.sh``;
- a task whose variables that take effect when an interpreter or library starts
  (``PYTHON*`` other than ``PYTHONPATH``/``PYTHONUNBUFFERED``, ``OMP_NUM_THREADS``,
  ``LD_PRELOAD`` ...) differ from the fork server's;
- a fork server that is not ready yet (it imports torch once, in about a second) or
  has died.
"""

from __future__ import annotations

import array
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

from ._supervise import ShimHandle

log = logging.getLogger("dauntless.agent")

_SAFE_COMMAND = re.compile(r"[A-Za-z0-9_./=:,@%+\- ]+")
"""Entrypoint strings the warm path runs without a shell: no quoting, globs, variables,
redirections or command lists."""

_IMPORT_TIME_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "MALLOC_CONF",
    "TORCH_HOME",
)
"""Variables read when an interpreter or library starts: a task that sets them to other
values than the fork server has runs cold."""

_PYTHON_NAMES = ("python", "python3", f"python3.{sys.version_info[1]}")


def _differs(env: dict[str, str], base: dict[str, str], name: str) -> bool:
    return env.get(name) != base.get(name)


def warm_request(
    argv: list[str], env: dict[str, str], cwd: str, base_env: dict[str, str]
) -> dict[str, Any] | None:
    """The fork request for a task, or None when it must start cold (module docstring).

    Args:
        argv: the agent's argv for the task (:func:`dauntless.agent._agent.launched_command`).
        env: the task's variables.
        cwd: the directory the task starts in.
        base_env: the fork server's variables.

    Returns:
        ``{"kind", "target", "args", "env", "cwd"}`` for :mod:`dauntless.exec._forkserver`,
        or None.
    """
    if env.get("DET_TASK_TYPE") != "TRIAL":
        return None
    if env.get("DET_WORLD_SIZE", "1") != "1" or env.get("DET_NUM_PARTS", "1") != "1":
        return None
    if os.path.exists(os.path.join(cwd, "startup-hook.sh")):
        return None
    for name in set(env) | set(base_env):
        if name.startswith("PYTHON") and name not in ("PYTHONPATH", "PYTHONUNBUFFERED"):
            if _differs(env, base_env, name):
                return None
    if any(_differs(env, base_env, name) for name in _IMPORT_TIME_VARS):
        return None
    exe = sys.executable
    harness = [exe, "-m", "dauntless.launch.torch_distributed", "--", exe, "-m"]
    if argv[: len(harness)] == harness and argv[len(harness) :] == ["dauntless.exec.harness"]:
        # One rank: what the launcher sets before it execs the harness.
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", **env}
        target = json.loads(env.get("DET_EXPERIMENT_CONFIG", "{}")).get("entrypoint")
        if not isinstance(target, str):
            return None
        return {"kind": "harness", "target": target, "args": [], "env": env, "cwd": cwd}
    if len(argv) != 3 or argv[:2] != ["sh", "-c"] or not _SAFE_COMMAND.fullmatch(argv[2]):
        return None
    words = shlex.split(argv[2])
    if len(words) < 2 or words[0] not in _PYTHON_NAMES:
        return None
    found = shutil.which(words[0], path=env.get("PATH", ""))
    if found is None or not _same_python(found, exe):
        return None
    if words[1] == "-m":
        if len(words) < 3:
            return None
        return {"kind": "module", "target": words[2], "args": words[3:], "env": env, "cwd": cwd}
    if words[1].startswith("-") or not words[1].endswith(".py"):
        return None
    if not os.path.isfile(os.path.join(cwd, words[1])):
        return None
    return {"kind": "script", "target": words[1], "args": words[2:], "env": env, "cwd": cwd}


def _same_python(a: str, b: str) -> bool:
    """Whether two paths start the same interpreter in the same environment: the same
    directory (a venv's ``bin/``) and the same real binary."""
    return os.path.dirname(os.path.abspath(a)) == os.path.dirname(
        os.path.abspath(b)
    ) and os.path.realpath(a) == os.path.realpath(b)


class WarmProcess:
    """A forked trial, with the part of :class:`subprocess.Popen`'s interface the agent
    uses. Its exit status arrives on the request's connection to the fork server.

    Attributes:
        pid: the trial's process id (also its process group id).
        stdout, stderr: the read ends of its output pipes.
        returncode: the exit code once known (negative: killed by that signal).
    """

    def __init__(self, conn: socket.socket, pid: int, stdout: IO[bytes], stderr: IO[bytes]):
        self._conn = conn
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._buf = b""

    def _read_exit(self, timeout: float | None) -> None:
        """Read the exit status, waiting up to ``timeout`` seconds (None: until it comes)."""
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return
        try:
            if self._done.is_set():
                return
            self._conn.settimeout(timeout)
            try:
                while b"\n" not in self._buf:
                    chunk = self._conn.recv(4096)
                    if not chunk:  # the fork server died: its children died with it
                        break
                    self._buf += chunk
            except (TimeoutError, BlockingIOError):
                return
            except OSError:
                pass
            try:
                self.returncode = int(json.loads(self._buf.split(b"\n", 1)[0])["exit"])
            except (ValueError, KeyError):
                self.returncode = -9  # no status: the server (and so the trial) was killed
            self._conn.close()
            self._done.set()
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        """The exit code if the trial has exited, else None (does not wait)."""
        if not self._done.is_set():
            self._read_exit(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` seconds.
        """
        if timeout is None:
            while not self._done.is_set():
                self._read_exit(None)
        else:
            deadline = time.monotonic() + timeout
            while not self._done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(f"trial pid {self.pid}", timeout)
                self._read_exit(left)
        assert self.returncode is not None
        return self.returncode


class WarmStarter:
    """The agent's fork server: started in the background, used when ready.

    Args:
        socket_path: where the server listens (in the agent's work dir).
        env: the server's variables (the agent's, without its credential).
        parent_pid: the agent's pid (the server dies with it).
    """

    READY_TIMEOUT_SECONDS = 120.0
    """How long the server may take to import torch before the agent gives up on it."""

    def __init__(self, socket_path: str, env: dict[str, str], parent_pid: int) -> None:
        self.socket_path = socket_path
        self.env = env
        self.parent_pid = parent_pid
        self.proc: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._settled = threading.Event()  # the last start ended: ready, or failed
        self._lock = threading.Lock()
        self._started_at = 0.0

    def start(self) -> None:
        """Start the fork server; a thread waits for its ``ready`` line."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            self._ready.clear()
            self._settled.clear()
            self._started_at = time.monotonic()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dauntless.exec._forkserver",
                    self.socket_path,
                    str(self.parent_pid),
                ],
                env=self.env,
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            proc = self.proc
        threading.Thread(target=self._watch, args=(proc,), daemon=True, name="forkserver").start()

    def _watch(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() == b"ready":
            with self._lock:
                if self.proc is proc:
                    self._ready.set()
                    self._settled.set()
            log.info("warm worker (fork server) ready, pid %d", proc.pid)
        else:
            code = proc.wait()
            with self._lock:
                if self.proc is proc:
                    self._settled.set()
            log.warning("the warm worker did not start (exit %s): trials start cold", code)
        proc.stdout.read()  # EOF when it exits
        with self._lock:
            if self.proc is proc:  # not a newer server's readiness
                self._ready.clear()

    RESTART_SECONDS = 60.0
    """The least time between two starts of the server (one that keeps dying is not
    restarted in a loop; trials start cold meanwhile)."""

    def restart_if_dead(self) -> bool:
        """Start the server again if it exited and the last start is old enough; call
        from the agent's main thread (its children die with the starting thread).
        Returns whether it was started."""
        with self._lock:
            proc = self.proc
            if proc is None or proc.poll() is None:
                return False
            if time.monotonic() - self._started_at < self.RESTART_SECONDS:
                return False
        log.warning("the warm worker exited (%s); starting it again", proc.returncode)
        self.start()
        return True

    def ready(self) -> bool:
        """Whether the server is up and answering."""
        return self._ready.is_set() and self.proc is not None and self.proc.poll() is None

    def wait_if_starting(self) -> bool:
        """If the server is running but not ready yet, wait until it is, or until
        :attr:`READY_TIMEOUT_SECONDS` after its start; returns :meth:`ready` (False at
        once when it is not starting: stopped, dead, or never started)."""
        with self._lock:
            proc, started_at = self.proc, self._started_at
        if proc is None or proc.poll() is not None:
            return False
        left = self.READY_TIMEOUT_SECONDS - (time.monotonic() - started_at)
        self._settled.wait(max(0.0, left))
        return self.ready()

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the server; returns :meth:`ready`."""
        self._ready.wait(timeout)
        return self.ready()

    def _ask(
        self, request: dict[str, Any], out_w: int, err_w: int
    ) -> tuple[socket.socket, int, bytes]:
        """Send the server one request with ``out_w``/``err_w`` as the child's stdout and
        stderr; returns ``(connection, pid, what followed the pid's line)``.

        Raises:
            OSError: the server cannot be reached or did not answer with a pid.
        """
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(30.0)
            conn.connect(self.socket_path)
            data = json.dumps(request).encode() + b"\n"
            fds = array.array("i", [out_w, err_w]).tobytes()
            sent = conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            if sent < len(data):
                conn.sendall(data[sent:])
            buf = b""
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    raise OSError("the fork server closed the connection")
                buf += chunk
            line, rest = buf.split(b"\n", 1)
            return conn, int(json.loads(line)["pid"]), rest
        except (OSError, ValueError, KeyError) as exc:
            conn.close()
            raise OSError(f"warm start failed: {exc}") from None

    def fork(self, request: dict[str, Any]) -> WarmProcess:
        """Fork a trial whose output comes to this agent through pipes (it dies with the
        server, so with the agent).

        Raises:
            OSError: the server cannot be reached or did not answer with a pid.
        """
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            conn, pid, rest = self._ask(request, out_w, err_w)
        except OSError:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        proc = WarmProcess(conn, pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
        proc._buf = rest
        return proc

    SUPERVISOR_START_SECONDS = 30.0
    """How long a forked supervisor may take to name itself in its state directory."""

    def fork_supervised(self, request: dict[str, Any], directory: str) -> ShimHandle:
        """Fork a trial under a supervisor of its own, as a cold start has: the server
        forks the supervisor (:mod:`dauntless.agent._shim`), which forks the trial, holds
        its output in ``directory`` and outlives the server and the agent, so that an
        agent started again adopts the trial (docs/partitions.md).

        Args:
            request: the fork request (:func:`warm_request`).
            directory: the task's state directory, made by
                :func:`dauntless.agent._supervise.make_state_dir`.

        Returns:
            The supervisor's handle (as :func:`dauntless.agent._supervise.start_shim`'s).

        Raises:
            OSError: the server cannot be reached, did not answer, or its supervisor did
                not start within :data:`SUPERVISOR_START_SECONDS`.
        """
        null = [os.open(os.devnull, os.O_WRONLY) for _ in range(2)]
        try:
            conn, pid, _rest = self._ask({**request, "shim_dir": directory}, *null)
        finally:
            for fd in null:
                os.close(fd)
        conn.close()  # its exit is read from the state directory, as a cold one's
        # The supervisor names itself in STATE_DIR/shim when it runs (before the trial).
        ident = os.path.join(directory, "shim")
        deadline = time.monotonic() + self.SUPERVISOR_START_SECONDS
        while not os.path.exists(ident) and not os.path.exists(os.path.join(directory, "exit")):
            if time.monotonic() > deadline:
                raise OSError(f"the warm trial's supervisor (pid {pid}) did not start")
            time.sleep(0.005)
        handle = ShimHandle(directory, None)
        handle.warm = True  # type: ignore[attr-defined]
        return handle

    def stop(self) -> None:
        """Stop the server (its running children die with it: ``PR_SET_PDEATHSIG``)."""
        with self._lock:
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
