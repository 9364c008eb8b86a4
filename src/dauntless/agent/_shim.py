"""``python -I .../_shim.py STATE_DIR``: the supervisor (*shim*) of one task on an agent.

The agent starts one shim per task it runs as a process (cold start, container clients
included); the shim starts the task and outlives the agent, as containerd's shim or
Podman's conmon outlive their daemons. It does what the agent cannot do if the agent
dies (issue 29, "no orphans"; issue 36 builds agent restarts on it):

- **Holds the task's output.** The task's stdout and stderr are pipes to the shim, which
  appends each line to ``STATE_DIR/output`` as a record (``O`` or ``E``, the line's
  bytes, a newline; a line over :data:`MAX_LINE` bytes is cut into records). The agent
  reads that file and ships it; an agent started again later ships on from where the
  last one stopped, so no line is lost while no agent runs.
- **Reaps everything the task starts.** The shim is a child subreaper
  (``PR_SET_CHILD_SUBREAPER``, prctl(2)): a process of the task whose parent exits
  (a daemon, a Jupyter kernel in a session of its own) becomes the shim's child instead
  of init's, so the shim can always find and end every process of the task.
- **Watches the agent.** ``STATE_DIR/agent`` names the agent process in charge
  (``pid start-time``, written by the agent that started or adopted the task). While
  that process is gone, a clock runs; if no agent writes the file again within the grace
  period (``grace`` of the spec, seconds), the shim ends the whole task and exits: a task
  never runs unattended for longer.
- **Ends the task whole.** SIGTERM to the shim is passed to the task's process group (a
  graceful stop); SIGUSR1 kills every process of the task (SIGKILL, repeated until none
  is left). When the task's main process exits, what it left running gets SIGTERM and,
  a few seconds later, SIGKILL. Then ``STATE_DIR/exit`` records the exit code and the
  shim exits; the agent reports the exit.

It runs with ``python -I`` by path and imports only the standard library: an interpreter
that starts in ~20 ms and holds ~9 MB, instead of the agent package's imports.

Files of ``STATE_DIR`` (a directory of the agent, mode 0700): ``spec.json`` (written by
the agent, read and removed at start: ``argv``, ``env``, ``cwd``, ``grace``, optional
``status_fd`` (the task reports its own exit status on fd 3: an isolated task's pid 1,
:mod:`dauntless.agent._nsinit`), optional ``on_orphan`` (an argv run after the task was
ended for its agent's absence, e.g. the container engine's ``rm --force``)); ``shim``
(``pid start-time`` of the shim); ``task`` (the main process's pid); ``output``;
``exit`` (``{"exit_code": int|null, "message": str|null}``, written last, atomically).
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MAX_LINE = 64 * 1024
"""Bytes of one output record; a longer line is split."""
AGENT_CHECK_SECONDS = 1.0
"""How often the shim checks that its agent is there."""
LEFTOVER_GRACE_SECONDS = 3.0
"""Seconds between SIGTERM and SIGKILL for what a task left running after its main
process exited, or when its agent is gone for good."""
DRAIN_SECONDS = 2.0
"""How long output is still read after every process of the task has gone."""


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (field 22 of ``/proc/PID/stat``, in clock
    ticks since boot): with the pid it names one process, as pids are reused; None when
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def alive(ident: str) -> bool:
    """Whether the process named by ``pid start-time`` still runs."""
    try:
        pid_text, start = ident.split()
        return start_time(int(pid_text)) == start
    except ValueError:
        return False


_WALL = 0x40000000
"""``__WALL`` of ``<linux/wait.h>``: :func:`os.waitid` considers children of every kind,
those made by ``clone`` with another exit signal too."""


def has_children() -> bool:
    """Whether this process has a child (running, stopped, or exited and not yet waited
    for), from one ``waitid(P_ALL, WNOHANG | WNOWAIT)``, which waits for nothing and
    reaps nothing.

    For a child subreaper (the shim) False means that it has no descendant at all: a
    process whose parent exits is made a child of the subreaper before that parent
    becomes a zombie the subreaper can reap (``PR_SET_CHILD_SUBREAPER``, prctl(2)), so
    every descendant keeps an ancestor among the subreaper's children. It costs one
    system call where :func:`descendants` reads every ``/proc/PID/stat`` of the host
    (about 2 ms at 100 processes). True when the kernel refuses the call (conservative:
    the caller then looks through ``/proc``).
    """
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return False
    except OSError:
        return True
    return True


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) > 1:
            children.setdefault(int(rest[1]), []).append(int(name))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _write_atomic(path: str, text: str) -> None:
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


class Shim:
    """One task's supervisor (see the module).

    Args:
        state_dir: the task's state directory (holds ``spec.json``).
    """

    def __init__(self, state_dir: str) -> None:
        self.dir = state_dir
        path = os.path.join(state_dir, "spec.json")
        with open(path, encoding="utf-8") as f:
            self.spec = json.load(f)
        os.unlink(path)  # it holds the task's variables: read once
        self.grace = float(self.spec.get("grace", 180.0))
        self.out = os.open(
            os.path.join(state_dir, "output"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        self.partial = {"O": b"", "E": b""}
        self.pid = 0
        self.status: int | None = None  # the main process's wait status
        self.reported: str | None = None  # what an isolated task's pid 1 reported
        self.message: str | None = None
        self.agent_gone_since: float | None = None
        self.ended_for_orphan = False

    # ------------------------------------------------------------------ output

    def _record(self, tag: str, data: bytes) -> None:
        buf = self.partial[tag] + data
        lines = buf.split(b"\n")
        self.partial[tag] = lines.pop()
        while len(self.partial[tag]) > MAX_LINE:
            lines.append(self.partial[tag][:MAX_LINE])
            self.partial[tag] = self.partial[tag][MAX_LINE:]
        chunks = []
        for line in lines:
            while len(line) > MAX_LINE:
                chunks.append(tag.encode() + line[:MAX_LINE] + b"\n")
                line = line[MAX_LINE:]
            chunks.append(tag.encode() + line + b"\n")
        if chunks:
            os.write(self.out, b"".join(chunks))

    def _flush_partial(self) -> None:
        for tag, rest in self.partial.items():
            if rest:
                os.write(self.out, tag.encode() + rest + b"\n")
                self.partial[tag] = b""

    # ------------------------------------------------------------------ the task

    def start(self) -> dict[int, str]:
        """Fork and exec the task; returns ``{read fd: tag}`` of its output pipes."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r = status_w = -1
        if self.spec.get("status_fd"):
            status_r, status_w = os.pipe()
        me = os.getpid()
        self.pipe_reads = [fd for fd in (out_r, err_r, status_r) if fd >= 0]
        pid = os.fork()
        if pid == 0:  # the task: never returns
            self.become_task(me, out_w, err_w, status_w)
        for fd in (out_w, err_w, status_w):
            if fd >= 0:
                os.close(fd)
        self.pid = pid
        self.status_r = status_r
        _write_atomic(os.path.join(self.dir, "task"), str(pid))
        return {out_r: "O", err_r: "E"}

    def become_task(self, shim_pid: int, out_w: int, err_w: int, status_w: int) -> None:
        """In the forked child: become the task (a new session that dies with the shim,
        stdio on the shim's pipes, ``exec`` of the spec's argv); never returns.

        Args:
            shim_pid: the shim's pid (the child's expected parent).
            out_w, err_w: write ends of the stdout and stderr pipes.
            status_w: write end of the status pipe (fd 3 of the task), or -1.
        """
        try:
            os.setsid()
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the shim
            if os.getppid() != shim_pid:
                os._exit(1)
            for sig in (
                signal.SIGTERM,
                signal.SIGUSR1,
                signal.SIGCHLD,
                signal.SIGINT,
                signal.SIGPIPE,  # ignored by Python; the task gets the default
                signal.SIGXFSZ,
            ):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            if status_w >= 0:
                os.dup2(status_w, 3)
                os.set_inheritable(3, True)  # (dup2 of a fd onto itself sets nothing)
            os.closerange(4 if status_w >= 0 else 3, 65536)
            os.chdir(self.spec["cwd"])
            argv = self.spec["argv"]
            os.execvpe(argv[0], argv, self.spec["env"])
        except BaseException as exc:  # the exec failed
            try:
                os.write(2, f"could not start {self.spec['argv'][:1]}: {exc}\n".encode())
            finally:
                os._exit(127)

    def kill_all(self, sig: int = signal.SIGKILL, rounds: int = 50) -> None:
        """Send ``sig`` to every process of the task; with SIGKILL, until none is left
        (a process may fork while it is being killed)."""
        for _ in range(rounds):
            pids = descendants(os.getpid())
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if sig != signal.SIGKILL:
                return
            self._reap()
            time.sleep(0.02)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid and self.status is None:
                self.status = status

    def _check_agent(self, now: float) -> None:
        try:
            with open(os.path.join(self.dir, "agent"), encoding="utf-8") as f:
                ident = f.read().strip()
        except OSError:
            ident = ""
        if alive(ident):
            self.agent_gone_since = None
            return
        if self.agent_gone_since is None:
            self.agent_gone_since = now
        elif now - self.agent_gone_since >= self.grace and not self.ended_for_orphan:
            self.ended_for_orphan = True
            self.message = (
                f"its agent was gone for {now - self.agent_gone_since:.0f} s (more than "
                f"the grace period of {self.grace:g} s): the task was ended"
            )
            self.end_leftovers()

    def end_leftovers(self) -> None:
        """SIGTERM to every process of the task, SIGKILL to those still there after
        :data:`LEFTOVER_GRACE_SECONDS`. Returns at once when the shim has no child left
        (:func:`has_children`: then the task has no process left), which is how most
        tasks end: their main process exited and was reaped, and started nothing that
        outlived it."""
        if not has_children():
            return
        self.kill_all(signal.SIGTERM)
        deadline = time.monotonic() + LEFTOVER_GRACE_SECONDS
        while time.monotonic() < deadline and descendants(os.getpid()):
            self._reap()
            time.sleep(0.05)
        self.kill_all(signal.SIGKILL)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Run the task to its end and record its exit (see the module)."""
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _write_atomic(os.path.join(self.dir, "shim"), f"{os.getpid()} {start_time(os.getpid())}")
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        pending: list[int] = []  # signal numbers, handled in the loop
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD, signal.SIGINT):
            signal.signal(sig, lambda s, _f: pending.append(s))
        streams = self.start()
        sel = selectors.DefaultSelector()
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        if self.status_r >= 0:
            sel.register(self.status_r, selectors.EVENT_READ)
        reported = b""
        ended_at: float | None = None
        next_check = 0.0
        while True:
            now = time.monotonic()
            if now >= next_check:
                self._check_agent(now)
                next_check = now + AGENT_CHECK_SECONDS
            for key, _ in sel.select(timeout=0.5):
                fd = int(key.fd)
                if fd == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                data = os.read(fd, 65536)
                if fd == self.status_r:
                    if data:
                        reported += data
                    else:
                        sel.unregister(fd)
                        os.close(fd)
                        self.status_r = -1
                    continue
                if data:
                    self._record(streams[fd], data)
                else:
                    sel.unregister(fd)
                    os.close(fd)
                    del streams[fd]
            while pending:
                got = pending.pop(0)
                if got in (signal.SIGTERM, signal.SIGINT) and self.status is None:
                    try:
                        os.killpg(self.pid, signal.SIGTERM)
                    except (ProcessLookupError, PermissionError):
                        pass
                elif got == signal.SIGUSR1:
                    self.kill_all(signal.SIGKILL)
            self._reap()
            if self.status is not None and ended_at is None:
                ended_at = time.monotonic()
                self.end_leftovers()  # what the main process left running
            if ended_at is not None and (
                not streams or time.monotonic() - ended_at > LEFTOVER_GRACE_SECONDS + DRAIN_SECONDS
            ):
                break
        self._flush_partial()
        self.reported = reported.decode(errors="replace").strip() or None
        self._finish()

    def _finish(self) -> None:
        code: int | None = None
        assert self.status is not None
        code = os.waitstatus_to_exitcode(self.status)
        if self.reported:  # "exit N" / "signal N" from an isolated task's pid 1
            kind, _, num = self.reported.partition(" ")
            if num.lstrip("-").isdigit():
                code = int(num) if kind == "exit" else -int(num)
        if self.ended_for_orphan:
            code = None
        result = {"exit_code": code, "message": self.message}
        _write_atomic(os.path.join(self.dir, "exit"), json.dumps(result))
        on_orphan = self.spec.get("on_orphan")
        if self.ended_for_orphan and on_orphan:
            try:
                subprocess.run(on_orphan, timeout=60, capture_output=True, check=False)
            except (OSError, subprocess.SubprocessError):
                pass


def main(argv: list[str]) -> int:
    """Entry point: ``STATE_DIR``.

    Raises:
        SystemExit: 2 on a malformed command line.
    """
    if len(argv) != 1:
        sys.stderr.write("usage: python -I _shim.py STATE_DIR\n")
        raise SystemExit(2)
    Shim(argv[0]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
