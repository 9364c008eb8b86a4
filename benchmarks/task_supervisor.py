"""What a task's supervisor costs at start (issue 29): a cold task under its shim vs the
launcher cold tasks had before, and an isolated task (a root agent's task of another
Unix identity: PID and mount namespaces, identity dropped).

Each round starts, in turns, one trivial task (``sh -c 'exit 0'``) each way and waits
for its exit:

* ``launcher`` (the baseline, what cold tasks ran before issue 29): ``python -m
  dauntless.agent._launch PID -- sh -c 'exit 0'``, which imports the agent package to
  arm ``PR_SET_PDEATHSIG`` and execs the task;
* ``supervised``: :func:`dauntless.agent._supervise.start_shim` (``python -I
  _shim.py``: standard library only; output file, subreaper, exit record), waited for
  through its handle as the agent does;
* ``isolated`` (as root with PID namespaces only): the same, the task run as
  ``nobody`` through ``unshare --pid --fork --mount-proc`` and ``_nsinit.py``.

Printed per way: the median wall time and CPU time (of this process's waited-for
children: the launcher, or the shim and everything it waited for) per task start, and
the ratio to the baseline measured in the same run.

Usage::

    python benchmarks/task_supervisor.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from dauntless.agent._identity import AgentIdentity, isolated_command, plan_task_user
from dauntless.agent._supervise import start_shim
from dauntless.config import TaskIdentity

TASK = ["sh", "-c", "exit 0"]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def launcher() -> None:
    argv = [sys.executable, "-m", "dauntless.agent._launch", str(os.getpid()), "--", *TASK]
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def supervised(tmp: str, argv: list[str], status_fd: bool = False) -> Callable[[], None]:
    count = iter(range(10**9))

    def run() -> None:
        handle = start_shim(
            os.path.join(tmp, ".tasks", f"t{next(count)}"),
            argv,
            {"PATH": os.environ["PATH"]},
            tmp,
            60.0,
            {"allocation_id": "t", "runtime": "process"},
            status_fd=status_fd,
        )
        code = handle.wait(60)
        assert code == 0, (code, handle.exit_message)
        handle.proc.wait()  # type: ignore[union-attr]  # reap the shim: its CPU counts
        handle.remove()

    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="task-supervisor-")
    os.chmod(tmp, 0o711)
    ways: dict[str, Callable[[], None]] = {
        "launcher": launcher,
        "supervised": supervised(tmp, TASK),
    }
    agent = AgentIdentity.probe()
    if agent.root and agent.pid_namespace:
        user = plan_task_user(TaskIdentity(65534, 65534, "nobody", "nogroup"), agent)
        assert user is not None
        ways["isolated"] = supervised(tmp, isolated_command(user, TASK, None), status_fd=True)
    else:
        print(f"(no isolated runs: {agent.why_not})")
    wall: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    for fn in ways.values():  # warm the page cache once
        fn()
    for _ in range(args.rounds):
        for name, fn in ways.items():
            c0, t0 = _children_cpu(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_children_cpu() - c0)
    base_wall = statistics.median(wall["launcher"])
    base_cpu = statistics.median(cpu["launcher"])
    print(f"{args.rounds} rounds, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'way':<11} {'wall ms':>8} {'cpu ms':>8} {'wall ratio':>11} {'cpu ratio':>10}")
    for name in ways:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<11} {w * 1e3:8.1f} {c * 1e3:8.1f} {w / base_wall:11.2f} {c / base_cpu:10.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
