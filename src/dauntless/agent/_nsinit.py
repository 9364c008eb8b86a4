"""``python -I -S .../_nsinit.py UID GID GROUPS -- ARGV...``: process 1 of an isolated
task's PID namespace.

A root agent runs a task of another Unix identity in a PID namespace of its own
(``unshare --pid --fork --mount-proc``, :mod:`dauntless.agent._identity`), where it sees
only its own processes. The namespace's first process is this one, started as root:

1. it gives up root for good: the supplementary ``GROUPS`` (comma-separated gids), then
   ``GID``, then ``UID`` (setgroups(2), setgid(2), setuid(2), in that order, and checks
   that no id of root is left), and sets the umask to 077 so that what the task writes
   is its own;
2. it forks ``ARGV`` (the task, with the signal dispositions reset) and reaps every
   process of the namespace (orphans are reparented to process 1) until the task's
   main process exits;
3. it reports how the task ended on fd 3 (``exit N`` or ``signal N``; the shim,
   :mod:`dauntless.agent._shim`, reads it: process 1 of a namespace cannot be killed by
   a signal from inside, so its own exit status could not say), and exits: the kernel
   then kills whatever is left in the namespace.

Process 1 receives only signals it has a handler for; it ignores SIGTERM, SIGINT and
SIGHUP, which the shim sends to the task's process group (the task gets them itself).
Standard library only, run with ``-I -S``: no site-packages, no user code, no
environment variables of Python are read while it is still root.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings  # noqa: F401  (os.execvp imports it: now, while the library is readable)

STATUS_FD = 3


def drop_privileges(uid: int, gid: int, groups: list[int]) -> None:
    """Become ``uid``/``gid`` with supplementary ``groups``, irrevocably.

    Raises:
        PermissionError: an id could not be set, or root is still held afterwards.
    """
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(f"could not become uid {uid}, gid {gid}")
    if uid != 0:
        try:  # must fail now: root cannot be had back
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise PermissionError("root could be regained after dropping it")


def main(argv: list[str]) -> int:
    """Entry point (see the module); returns the exit code of this process.

    Raises:
        SystemExit: 2 on a malformed command line.
    """
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _nsinit.py UID GID GROUPS -- ARGV...\n")
        raise SystemExit(2)
    uid, gid = int(argv[0]), int(argv[1])
    groups = [int(g) for g in argv[2].split(",") if g]
    cmd = argv[4:]
    try:
        drop_privileges(uid, gid, groups)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"isolation: cannot run the task as uid {uid}, gid {gid}: {exc}\n")
        return 126
    os.umask(0o077)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        try:
            for sig in (
                signal.SIGTERM,
                signal.SIGINT,
                signal.SIGHUP,
                signal.SIGPIPE,
                signal.SIGXFSZ,
            ):
                signal.signal(sig, signal.SIG_DFL)
            os.closerange(STATUS_FD, 65536)
            os.execvp(cmd[0], cmd)
        except BaseException as exc:
            try:
                os.write(2, f"could not start {cmd[:1]}: {exc}\n".encode())
            finally:
                os._exit(127)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if done == pid:
            break
    if os.WIFSIGNALED(status):
        report, code = f"signal {os.WTERMSIG(status)}", 128 + os.WTERMSIG(status)
    else:
        code = os.waitstatus_to_exitcode(status)
        report = f"exit {code}"
    try:
        os.write(STATUS_FD, report.encode() + b"\n")
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
