"""The system-metrics profiler (Determined 0.38's ``core_context.profiler``; issue 34
scope 2): a background thread on each node's chief-local process samples the machine's
CPU, memory, disk and network through ``psutil`` and the task's GPUs through NVML
(``nvidia-ml-py``; skipped quietly where there is no driver), averages the samples and
reports them as the ``profiling`` metric groups, together with the training loop's
timings of the data loader and the training step.

Volume: one report every ``sampling_interval * samples_per_report`` seconds (10 s by
default), each at most one row per group of :data:`PROFILING_GROUPS`; the master keeps
at most one row per trial, agent and group per :data:`PROFILER_BUCKET_SECONDS` whatever
the client sends (:func:`max_rows_per_hour`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dauntless._nvml import Nvml

logger = logging.getLogger("dauntless.core")

# The same values as dauntless.config's (which the master reads); repeated here because
# importing dauntless.config would load pydantic into every task at ``import
# dauntless.core`` (tests/unit/core_api/test_profiler.py keeps them equal).
PROFILING_GROUPS = ("cpu", "memory", "disk", "network", "gpu", "timing")
"""The groups of profiler metrics."""
PROFILER_BUCKET_SECONDS = 10
"""The master keeps one row per trial, agent and group per this many seconds."""

MIN_SAMPLING_INTERVAL = 0.1
"""The shortest sampling interval in seconds (Determined's limit)."""

DEFAULT_SAMPLING_INTERVAL = 1.0
DEFAULT_SAMPLES_PER_REPORT = 10


def max_rows_per_hour(agents: int = 1, gpus_per_agent: int = 0) -> int:
    """The most profiler rows the master stores for one trial in an hour.

    Each agent of the trial reports each group of :data:`PROFILING_GROUPS` (``gpu``
    only with GPUs) at most once per :data:`PROFILER_BUCKET_SECONDS` bucket; a row holds
    all of an agent's GPUs, so GPUs do not multiply rows.

    Args:
        agents: the trial's agents (nodes), >= 1.
        gpus_per_agent: GPUs per agent, >= 0.

    Returns:
        Rows per hour.

    Raises:
        ValueError: for agents < 1 or gpus_per_agent < 0.
    """
    if agents < 1 or gpus_per_agent < 0:
        raise ValueError(
            f"need agents >= 1 and gpus_per_agent >= 0, got {agents}, {gpus_per_agent}"
        )
    groups = len(PROFILING_GROUPS) - (0 if gpus_per_agent else 1)
    buckets = math.ceil(3600 / PROFILER_BUCKET_SECONDS)
    return agents * groups * buckets


class SystemSampler:
    """One sample of the machine's state per :meth:`sample` call.

    Throughputs are the change of the kernel's counters since the previous call,
    divided by the seconds between the calls.

    Args:
        gpu_uuids: the GPUs to read (the task's); every GPU NVML sees when empty.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self, gpu_uuids: Sequence[str] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        import psutil  # type: ignore[import-untyped]

        self._psutil = psutil
        self._clock = clock
        self._nvml = Nvml(gpu_uuids)
        psutil.cpu_percent(None)  # the first call only starts the interval
        self._last = (clock(), psutil.disk_io_counters(), psutil.net_io_counters())

    @property
    def gpus(self) -> int:
        """GPUs read (0 without NVML)."""
        return len(self._nvml.handles)

    def sample(self) -> dict[str, dict[str, Any]]:
        """The groups' values now: ``cpu`` ``{cpu_util_simple}`` (% of all cores since
        the last call), ``memory`` ``{memory_free}`` (bytes available), ``disk``
        ``{disk_iops, disk_throughput_read, disk_throughput_write}`` (ops/s, bytes/s),
        ``network`` ``{net_throughput_sent, net_throughput_recv}`` (bytes/s), and
        ``gpu`` ``{uuid: {...}}`` with GPUs."""
        ps = self._psutil
        now = self._clock()
        disk, net = ps.disk_io_counters(), ps.net_io_counters()
        then, disk0, net0 = self._last
        self._last = (now, disk, net)
        dt = max(now - then, 1e-6)
        out: dict[str, dict[str, Any]] = {
            "cpu": {"cpu_util_simple": float(ps.cpu_percent(None))},
            "memory": {"memory_free": float(ps.virtual_memory().available)},
        }
        if disk is not None and disk0 is not None:
            ops = (disk.read_count + disk.write_count) - (disk0.read_count + disk0.write_count)
            out["disk"] = {
                "disk_iops": max(ops, 0) / dt,
                "disk_throughput_read": max(disk.read_bytes - disk0.read_bytes, 0) / dt,
                "disk_throughput_write": max(disk.write_bytes - disk0.write_bytes, 0) / dt,
            }
        if net is not None and net0 is not None:
            out["network"] = {
                "net_throughput_sent": max(net.bytes_sent - net0.bytes_sent, 0) / dt,
                "net_throughput_recv": max(net.bytes_recv - net0.bytes_recv, 0) / dt,
            }
        if self._nvml.handles:
            gpus = self._nvml.read()
            if gpus:
                out["gpu"] = gpus
        return out

    def close(self) -> None:
        """Release NVML."""
        self._nvml.close()


def average(samples: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The mean of each value over the samples that have it (nested GPU values too).

    Args:
        samples: what :meth:`SystemSampler.sample` returned, in order.

    Returns:
        Group -> name -> mean (or name -> sub-name -> mean for ``gpu``).
    """
    sums: dict[tuple[str, ...], list[float]] = {}
    for sample in samples:
        for group, values in sample.items():
            for name, value in values.items():
                if isinstance(value, dict):
                    for sub, v in value.items():
                        sums.setdefault((group, name, sub), []).append(float(v))
                else:
                    sums.setdefault((group, name), []).append(float(value))
    out: dict[str, dict[str, Any]] = {}
    for key, seen in sums.items():
        mean = sum(seen) / len(seen)
        if len(key) == 3:
            out.setdefault(key[0], {}).setdefault(key[1], {})[key[2]] = mean
        else:
            out.setdefault(key[0], {})[key[1]] = mean
    return out


class Timings:
    """Seconds the training loop spends per named phase (``dataloader_next``,
    ``train_batch``), summed until :meth:`take`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            acc = self._sums.setdefault(name, [0.0, 0.0])
            acc[0] += seconds
            acc[1] += 1

    def take(self) -> dict[str, Any]:
        """The ``timing`` group's values since the last call (empty when none):
        ``{name: {total_seconds, mean_seconds, count}}`` plus ``dataloader_share``
        (the data loader's part of data loader + step time, 0..1) when both were timed.
        """
        with self._lock:
            sums, self._sums = self._sums, {}
        out: dict[str, Any] = {
            name: {"total_seconds": total, "mean_seconds": total / n, "count": n}
            for name, (total, n) in sums.items()
            if n
        }
        dl, step = sums.get("dataloader_next"), sums.get("train_batch")
        if dl and step and dl[0] + step[0] > 0:
            out["dataloader_share"] = dl[0] / (dl[0] + step[0])
        return out


ReportSink = Callable[[list[dict[str, Any]]], None]
"""Sends one report: a list of ``{group, agent_id, metrics}`` rows."""


class ProfilerContext:
    """Turn the system-metrics profiler on and off (``core_context.profiler``).

    On a cluster, the profiler runs only on each node's chief-local process (local rank
    0); elsewhere, and off-cluster, :meth:`on` does nothing (as in Determined).

    Args:
        sink: sends a report (None: profiling is a no-op here).
        agent_id: the agent this process runs on (the rows' ``agent_id``).
        gpu_uuids: the task's GPUs.
        sampler_factory: builds the sampler (tests pass their own).
    """

    def __init__(
        self,
        sink: ReportSink | None,
        agent_id: str = "",
        gpu_uuids: Sequence[str] = (),
        sampler_factory: Callable[[Sequence[str]], Any] = SystemSampler,
    ) -> None:
        self._sink = sink
        self._agent_id = agent_id or "local"
        self._gpu_uuids = tuple(gpu_uuids)
        self._factory = sampler_factory
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.timings = Timings()
        #: Timings are recorded only between these batches (``profiling.begin_on_batch``
        #: and ``end_after_batch``; None: no end).
        self.begin_on_batch = 0
        self.end_after_batch: int | None = None
        #: Synchronise the GPU before reading the clock (``profiling.sync_timings``).
        self.sync_timings = True

    @property
    def enabled(self) -> bool:
        """True while the sampling thread runs."""
        return self._thread is not None

    def times_batch(self, batch: int) -> bool:
        """Whether the loop should time batch ``batch`` (0-based): profiling is on and
        it lies within ``begin_on_batch .. end_after_batch``."""
        if self._thread is None or batch < self.begin_on_batch:
            return False
        return self.end_after_batch is None or batch <= self.end_after_batch

    def on(
        self,
        *,
        sampling_interval: float = DEFAULT_SAMPLING_INTERVAL,
        samples_per_report: int = DEFAULT_SAMPLES_PER_REPORT,
    ) -> None:
        """Start sampling every ``sampling_interval`` seconds and reporting the average
        of every ``samples_per_report`` samples (no-op off-cluster or if already on).

        Raises:
            ValueError: ``sampling_interval`` < 0.1 s, or ``samples_per_report`` not an
                int >= 1.
        """
        if (
            isinstance(sampling_interval, bool)
            or not isinstance(sampling_interval, (int, float))
            or not sampling_interval >= MIN_SAMPLING_INTERVAL
        ):
            raise ValueError(
                f"sampling_interval must be >= {MIN_SAMPLING_INTERVAL} seconds, got "
                f"{sampling_interval!r}"
            )
        if (
            isinstance(samples_per_report, bool)
            or not isinstance(samples_per_report, int)
            or samples_per_report < 1
        ):
            raise ValueError(f"samples_per_report must be an int >= 1, got {samples_per_report!r}")
        with self._lock:
            if self._sink is None or self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run,
                args=(float(sampling_interval), samples_per_report),
                name="dauntless-profiler",
                daemon=True,
            )
            self._thread.start()
        logger.info(
            "profiler on: a sample every %.1f s, a report every %d samples",
            sampling_interval,
            samples_per_report,
        )

    def off(self) -> None:
        """Stop the thread, reporting the samples taken since the last report."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=30)

    def _run(self, interval: float, per_report: int) -> None:
        try:
            sampler = self._factory(self._gpu_uuids)
        except Exception as exc:  # psutil missing or broken: profiling is best effort
            logger.warning("profiler: cannot sample this machine: %s", exc)
            return
        samples: list[dict[str, dict[str, Any]]] = []
        try:
            while True:
                stopped = self._stop.wait(interval)
                if not stopped:
                    samples.append(sampler.sample())
                if len(samples) >= per_report or stopped:
                    self._report(samples)
                    samples = []
                if stopped:
                    return
        finally:
            sampler.close()

    def _report(self, samples: Sequence[dict[str, dict[str, Any]]]) -> None:
        groups = average(samples)
        timing = self.timings.take()
        if timing:
            groups["timing"] = timing
        rows = [
            {"group": group, "agent_id": self._agent_id, "metrics": values}
            for group, values in groups.items()
        ]
        if not rows or self._sink is None:
            return
        try:
            self._sink(rows)
        except Exception as exc:  # the master is away: drop this report, train on
            logger.warning("profiler: could not report system metrics: %s", exc)


__all__ = [
    "PROFILER_BUCKET_SECONDS",
    "PROFILING_GROUPS",
    "ProfilerContext",
    "SystemSampler",
    "Timings",
    "average",
    "max_rows_per_hour",
]
