"""Time a task's Python environment: the first build against a cached reuse.

For ``--requirement`` (default ``inflection==0.5.1``, a small pure-Python package from
PyPI), in a fresh directory, :class:`dauntless.agent.runtimes.PythonEnvironments`
builds the environment once (``python -m venv --without-pip`` plus the agent's
``pip --python ... install``, network included), then ``--reuses`` more tasks ask for the
same requirements (the cached path: a lock and a marker file). It also times an import
of the package from the environment's Python, and of ``torch`` when the agent has it,
to show that the agent's own packages are found, not installed again. Wall seconds and
CPU seconds (this process and its children) are printed, and the reuse/build ratio.

Usage::

    python benchmarks/python_env_cache.py [--requirement inflection==0.5.1] [--reuses 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time

from dauntless.agent.runtimes import PythonEnvironments


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requirement", default="inflection==0.5.1")
    p.add_argument("--reuses", type=int, default=20)
    args = p.parse_args()
    lines = [args.requirement]
    module = args.requirement.split("==")[0].split(">")[0].split("<")[0].replace("-", "_")
    with tempfile.TemporaryDirectory(prefix="dauntless-envbench-") as tmp:
        envs = PythonEnvironments(os.path.join(tmp, "envs"))
        log: list[str] = []
        t0, c0 = time.perf_counter(), _cpu()
        env_dir = envs.ensure(lines, tmp, lambda _t, line: log.append(line))
        build_wall, build_cpu = time.perf_counter() - t0, _cpu() - c0
        assert any(line.startswith("building environment") for line in log), log
        reuse_wall, reuse_cpu = [], []
        for _ in range(args.reuses):
            log.clear()
            t0, c0 = time.perf_counter(), _cpu()
            assert envs.ensure(lines, tmp, lambda _t, line: log.append(line)) == env_dir
            reuse_wall.append(time.perf_counter() - t0)
            reuse_cpu.append(_cpu() - c0)
            assert any("using cached Python environment" in line for line in log), log
        python = os.path.join(env_dir, "bin", "python")
        imports = {}
        for mod in (module, "torch"):
            t0 = time.perf_counter()
            r = subprocess.run([python, "-c", f"import {mod}"], capture_output=True)
            imports[mod] = (r.returncode == 0, time.perf_counter() - t0)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(env_dir) for f in fs)
    print(f"requirements: {lines}")
    print(f"first build : {build_wall:8.3f} s wall  {build_cpu:8.3f} s CPU")
    med_w, med_c = statistics.median(reuse_wall), statistics.median(reuse_cpu)
    print(
        f"cached reuse: {med_w * 1e3:8.3f} ms wall {med_c * 1e3:8.3f} ms CPU "
        f"(median of {args.reuses})"
    )
    print(f"reuse / build (wall): {med_w / build_wall:.5f}  ({build_wall / med_w:,.0f}x faster)")
    print(f"environment size on disk: {size / 1024:.0f} KiB")
    for mod, (ok, secs) in imports.items():
        print(f"import {mod} from the environment: {'ok' if ok else 'FAILED'} in {secs:.2f} s")


if __name__ == "__main__":
    main()
