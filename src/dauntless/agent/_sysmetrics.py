"""The agent machine's system metrics for its Prometheus page (issue 34 scope 2, in
part): CPU, memory, disk and network through ``psutil``; GPU utilisation, memory and
power through NVML (``nvidia-ml-py``, the ``gpu`` extra) where a driver answers, never
by parsing ``nvidia-smi``.

Read at scrape time (Prometheus's own period); the disk and network series are the
kernel's cumulative byte counters, so ``rate()`` gives throughput.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psutil  # type: ignore[import-untyped]
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dauntless._nvml import Nvml

log = logging.getLogger("dauntless.agent")


class SystemCollector:
    """A ``prometheus_client`` collector of the machine's CPU, memory, disk, network
    and (with NVML) GPUs, labelled ``agent_id``.

    Series: ``det_agent_cpu_util_percent`` (all cores, since the previous scrape),
    ``det_agent_memory_free_bytes`` (available), ``det_agent_memory_total_bytes``,
    ``det_agent_disk_read_bytes_total``, ``det_agent_disk_write_bytes_total``,
    ``det_agent_network_sent_bytes_total``, ``det_agent_network_recv_bytes_total``; per
    GPU (label ``gpu_uuid``): ``det_agent_gpu_util_percent``,
    ``det_agent_gpu_memory_used_bytes``, ``det_agent_gpu_memory_total_bytes``,
    ``det_agent_gpu_power_watts``.

    Args:
        agent_id: the agent's id.
    """

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.nvml = Nvml()
        psutil.cpu_percent(None)  # the first call only starts the interval

    @property
    def gpus(self) -> int:
        """GPUs NVML reports (0 without NVML)."""
        return len(self.nvml.handles)

    def collect(self) -> Iterator[Metric]:
        a = [self.agent_id]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["agent_id"])
            g.add_metric(a, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["agent_id"])
            c.add_metric(a, value)
            return c

        mem = psutil.virtual_memory()
        yield gauge("det_agent_cpu_util_percent", "CPU use of all cores", psutil.cpu_percent(None))
        yield gauge("det_agent_memory_free_bytes", "Memory available", float(mem.available))
        yield gauge("det_agent_memory_total_bytes", "Memory installed", float(mem.total))
        disk = psutil.disk_io_counters()
        if disk is not None:
            yield counter("det_agent_disk_read_bytes", "Bytes read from disks", disk.read_bytes)
            yield counter("det_agent_disk_write_bytes", "Bytes written to disks", disk.write_bytes)
        net = psutil.net_io_counters()
        yield counter("det_agent_network_sent_bytes", "Bytes sent", float(net.bytes_sent))
        yield counter("det_agent_network_recv_bytes", "Bytes received", float(net.bytes_recv))
        if self.nvml.lib is not None:
            yield from self._gpus()

    def _gpus(self) -> Iterator[Metric]:
        nv = self.nvml.lib
        labels = ["agent_id", "gpu_uuid"]
        util = GaugeMetricFamily("det_agent_gpu_util_percent", "GPU utilisation", labels=labels)
        used = GaugeMetricFamily(
            "det_agent_gpu_memory_used_bytes", "GPU memory used", labels=labels
        )
        total = GaugeMetricFamily(
            "det_agent_gpu_memory_total_bytes", "GPU memory installed", labels=labels
        )
        power = GaugeMetricFamily("det_agent_gpu_power_watts", "GPU power draw", labels=labels)
        for uuid, h in self.nvml.handles:
            key = [self.agent_id, uuid]
            try:
                util.add_metric(key, float(nv.nvmlDeviceGetUtilizationRates(h).gpu))
                info = nv.nvmlDeviceGetMemoryInfo(h)
                used.add_metric(key, float(info.used))
                total.add_metric(key, float(info.total))
            except nv.NVMLError as exc:  # a GPU that fell off the bus: skip it
                log.warning("NVML could not read GPU %s: %s", uuid, exc)
                continue
            try:
                power.add_metric(key, nv.nvmlDeviceGetPowerUsage(h) / 1000.0)  # mW -> W
            except nv.NVMLError:  # not every GPU reports power
                pass
        yield from (util, used, total, power)

    def close(self) -> None:
        """Release NVML."""
        self.nvml.close()
