"""Allocation to first line of user code: warm (fork server) against cold (interpreters).

Measures what the agent's process runtime does once it has a trial's task spec, for a
trivial script whose first line records the time and its own CPU use
(``getrusage(RUSAGE_SELF)``, the CPU the process spent before that line):

- ``warm``: :class:`dauntless.agent._warm.WarmStarter.fork` of the script, as the agent
  does for a single-rank trial (docs/warm-start.md): one request to the agent's fork
  server, one ``fork``;
- ``warm, supervised``: :meth:`~dauntless.agent._warm.WarmStarter.fork_supervised`, what
  the agent does since issue 36: the server forks the trial's supervisor, which forks
  the trial and holds its output in a state directory (the first line is read there);
- ``cold``: the process runtime's cold argv, ``python -m dauntless.agent._launch PID --
  sh -c <startup hook> sh sh -c 'python3 probe.py'``, i.e. the parent-death launcher, the
  shell and a fresh interpreter that imports what the trial imports (``dauntless.core``
  and ``torch``, which the fork server has already imported).

Printed, to the script's first line and to the end of its ``import dauntless.core,
torch`` (the point a cold trial can start work): median and p90 wall milliseconds from
the start call, and the CPU spent by Dauntless's processes until then (warm: the fork
server's CPU during the request plus the child's ``RUSAGE_SELF``; cold: the CPU of the whole process chain, launcher, shells and
interpreter, from ``wait4`` at its exit right after the imports, so only "to imports
done" has a cold CPU figure).

Usage::

    python benchmarks/warm_start.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dauntless.agent._supervise import make_state_dir
from dauntless.agent._warm import WarmStarter
from dauntless.agent.runtimes.base import startup_hook_script

PROBE = """\
import resource, time
t = time.time()
r = resource.getrusage(resource.RUSAGE_SELF)
import dauntless.core, torch  # what a trial imports (already there when warm)
t2 = time.time()
r2 = resource.getrusage(resource.RUSAGE_SELF)
print(t, r.ru_utime + r.ru_stime, t2, r2.ru_utime + r2.ru_stime, flush=True)
"""


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm_runs(starter: WarmStarter, probe: Path, tmp: Path, runs: int) -> list[tuple]:
    out = []
    assert starter.proc is not None
    for i in range(runs):
        cwd = tmp / f"warm-{i}"
        cwd.mkdir()
        c0 = _cpu(starter.proc.pid)
        t0 = time.time()
        proc = starter.fork(
            {
                "kind": "script",
                "target": str(probe),
                "args": [],
                "env": dict(os.environ),
                "cwd": str(cwd),
            }
        )
        assert proc.stdout is not None
        first, child_cpu, ready, ready_cpu = map(float, proc.stdout.readline().split())
        proc.wait(60)
        server_cpu = _cpu(starter.proc.pid) - c0
        out.append((first - t0, child_cpu + server_cpu, ready - t0, ready_cpu + server_cpu))
    return out


def supervised_runs(starter: WarmStarter, probe: Path, tmp: Path, runs: int) -> list[tuple]:
    """As :func:`warm_runs`, through :meth:`WarmStarter.fork_supervised` (what the agent
    does: the server forks the trial's supervisor, which forks the trial); the CPU adds
    the supervisor's own, read when the first line is in its output file."""
    out = []
    assert starter.proc is not None
    for i in range(runs):
        cwd = tmp / f"supervised-{i}"
        cwd.mkdir()
        state = str(tmp / "state" / f"task-{i}")
        env = dict(os.environ)
        c0 = _cpu(starter.proc.pid)
        t0 = time.time()
        make_state_dir(state, ["python3", str(probe)], env, str(cwd), 60.0, {})
        handle = starter.fork_supervised(
            {"kind": "script", "target": str(probe), "args": [], "env": env, "cwd": str(cwd)},
            state,
        )
        _pos, _kind, text = next(handle.lines())
        supervisor_cpu = _cpu(handle.pid)
        first, child_cpu, ready, ready_cpu = map(float, text.split())
        handle.wait(60)
        server_cpu = _cpu(starter.proc.pid) - c0 + supervisor_cpu
        out.append((first - t0, child_cpu + server_cpu, ready - t0, ready_cpu + server_cpu))
    return out


def cold_runs(probe: Path, tmp: Path, runs: int) -> list[tuple]:
    out = []
    for i in range(runs):
        cwd = tmp / f"cold-{i}"
        cwd.mkdir()
        argv = [
            sys.executable,
            "-m",
            "dauntless.agent._launch",
            str(os.getpid()),
            "--",
            "sh",
            "-c",
            startup_hook_script(),
            "sh",
            "sh",
            "-c",
            f"python3 {probe}",
        ]
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        t0 = time.time()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        first, _child_cpu, ready, _ready_cpu = map(float, proc.stdout.readline().split())
        # The whole chain's CPU (launcher, shells, interpreter: one process exec'd
        # into the next, or its waited-for children), from the kernel at its exit.
        _pid, _status, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        cpu = usage.ru_utime + usage.ru_stime
        out.append((first - t0, float("nan"), ready - t0, cpu))
    return out


def _summary(name: str, rows: list[tuple]) -> None:
    for label, w, c in (("first line", 0, 1), ("dauntless.core+torch imported", 2, 3)):
        walls = sorted(r[w] for r in rows)
        cpus = sorted(r[c] for r in rows)
        p90 = walls[int(0.9 * (len(walls) - 1))]
        cpu = (
            f"CPU median {statistics.median(cpus) * 1e3:.1f} ms"
            if not any(math.isnan(x) for x in cpus)
            else "CPU not measured here (a cold chain's CPU is read at its exit)"
        )
        print(
            f"{name}: to {label}: wall median {statistics.median(walls) * 1e3:.1f} ms, "
            f"p90 {p90 * 1e3:.1f} ms; {cpu}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory(prefix="dauntless-warm-") as tmp_s:
        tmp = Path(tmp_s)
        probe = tmp / "probe.py"
        probe.write_text(PROBE)
        starter = WarmStarter(str(tmp / "fs.sock"), dict(os.environ), os.getpid())
        starter.start()
        if not starter.wait_ready(120):
            raise SystemExit("the fork server did not start")
        try:
            warm = warm_runs(starter, probe, tmp, args.runs)
            supervised = supervised_runs(starter, probe, tmp, args.runs)
        finally:
            starter.stop()
        cold = cold_runs(probe, tmp, args.runs)
    _summary("warm", warm)
    _summary("warm, supervised", supervised)
    _summary("cold", cold)
    ratio = statistics.median(r[2] for r in cold) / statistics.median(r[2] for r in warm)
    print(f"cold / warm wall ratio to imports done: {ratio:.1f}x")
    ratio = statistics.median(r[0] for r in supervised) / statistics.median(r[0] for r in warm)
    print(f"warm supervised / warm wall ratio to the first line: {ratio:.2f}x")
    print(json.dumps({"load_after": open("/proc/loadavg").read().strip()}))


if __name__ == "__main__":
    main()
