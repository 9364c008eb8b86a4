"""``python -m dauntless.agent._launch PARENT_PID -- ARGV...``: exec ``ARGV`` so that it
dies with the agent.

The agent starts each task through this launcher. On Linux it asks the kernel
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, kept across ``exec``) to kill the task when the
agent process goes away, even by SIGKILL; otherwise a task of a dead agent would run on,
unseen, while the master restarts its trial elsewhere. Elsewhere it just execs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Set the parent-death signal, check the agent is still there, exec the task.

    Raises:
        SystemExit: 2 on a malformed command line, 1 if the agent is already gone.
    """
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m dauntless.agent._launch PARENT_PID -- ARGV...\n")
        raise SystemExit(2)
    parent = int(argv[0])
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            sys.stderr.write(f"warning: prctl failed (errno {ctypes.get_errno()})\n")
        if os.getppid() != parent:  # the agent died before the signal was armed
            raise SystemExit(1)
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
