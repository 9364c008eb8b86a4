"""Per-task resource use (issue 34 scope 3): the agent samples each running task's
process tree (the task's root process and every descendant) through ``psutil``: CPU
(percent of one core, summed over the tree), resident memory, and GPU memory through
NVML (``nvidia-ml-py``) where a driver answers. Samples ride on the heartbeat, at most
one per task per :data:`TASK_SAMPLE_SECONDS`.

Container runtimes (Docker, Podman) run a task's processes under the engine's daemon,
not under the agent: their trees here hold only the client process, so for them the
figures cover only what runs under the agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psutil  # type: ignore[import-untyped]

log = logging.getLogger("dauntless.agent")

TASK_SAMPLE_SECONDS = 10.0
"""Seconds between two samples of one task (the master keeps one row per task per
bucket of this length, so the volume is bounded either way)."""


def _gpu_memory_by_pid() -> Callable[[], dict[int, int]] | None:
    """A function giving GPU memory (bytes) per pid from NVML, or None without NVML."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no package or no driver: not a GPU machine
        return None

    def read() -> dict[int, int]:
        used: dict[int, int] = {}
        for h in handles:
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            except pynvml.NVMLError:
                continue
            for p in procs:
                if p.usedGpuMemory is not None:
                    used[p.pid] = used.get(p.pid, 0) + int(p.usedGpuMemory)
        return used

    return read


class TaskSampler:
    """Samples of the running tasks' process trees.

    Args:
        period: seconds between two samples (:meth:`due`).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, period: float = TASK_SAMPLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.period = period
        self._clock = clock
        self._next = clock()
        # allocation id -> (wall seconds, CPU seconds of the tree) at the last sample
        self._last: dict[str, tuple[float, float]] = {}
        # pid -> psutil.Process, kept so each process's CPU times are read cheaply
        self._procs: dict[int, Any] = {}
        self._gpu = _gpu_memory_by_pid()

    def due(self) -> bool:
        """Whether a sample is due now (then the next is one period later)."""
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.period
        return True

    def _tree(self, root: int) -> list[Any]:
        try:
            top = self._procs.get(root) or psutil.Process(root)
            self._procs[root] = top
            return [top, *top.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self, roots: Mapping[str, int]) -> list[dict[str, Any]]:
        """One sample of each task.

        Args:
            roots: allocation id -> the pid of the task's root process.

        Returns:
            ``{allocation_id, cpu_percent, rss_bytes, gpu_memory_bytes, processes}`` per
            task whose tree could be read: ``cpu_percent`` is the tree's CPU time since
            the previous sample over the wall time (100 = one core; None at the first
            sample of a task), ``gpu_memory_bytes`` None without NVML.
        """
        gpu = self._gpu() if self._gpu is not None else None
        now = time.monotonic()
        out = []
        for alloc_id, root in roots.items():
            procs = self._tree(root)
            if not procs:
                continue
            cpu_seconds, rss, pids = 0.0, 0, set()
            for p in procs:
                try:
                    t = p.cpu_times()
                    cpu_seconds += t.user + t.system
                    rss += p.memory_info().rss
                    pids.add(p.pid)
                except psutil.Error:  # exited between the listing and the read
                    continue
            last = self._last.get(alloc_id)
            self._last[alloc_id] = (now, cpu_seconds)
            cpu = None
            if last is not None and now > last[0]:
                cpu = max(cpu_seconds - last[1], 0.0) / (now - last[0]) * 100.0
            out.append(
                {
                    "allocation_id": alloc_id,
                    "cpu_percent": cpu,
                    "rss_bytes": rss,
                    "gpu_memory_bytes": (
                        sum(v for pid, v in gpu.items() if pid in pids) if gpu is not None else None
                    ),
                    "processes": len(pids),
                }
            )
        for gone in set(self._last) - set(roots):
            del self._last[gone]
        alive = set(roots.values())
        for pid in [pid for pid in self._procs if pid not in alive]:
            del self._procs[pid]
        return out
