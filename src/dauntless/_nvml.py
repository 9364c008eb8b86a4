"""NVML (``nvidia-ml-py``, the ``gpu`` extra) for the agent's Prometheus page and the
trial profiler: one place that opens the GPUs and reads their utilisation, memory and
power, never by parsing ``nvidia-smi``. Without a driver or the package it holds no
GPU and reads nothing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("dauntless.nvml")


class Nvml:
    """NVML handles of the given GPUs (all when none are named); empty (``lib`` None)
    without a driver or the ``nvidia-ml-py`` package.

    Args:
        gpu_uuids: the GPUs to open, by UUID (empty: every GPU of the machine).
    """

    def __init__(self, gpu_uuids: Sequence[str] = ()) -> None:
        self.lib: Any = None
        self.handles: list[tuple[str, Any]] = []
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
        except Exception:  # no package or no driver: not a GPU machine
            return
        self.lib = pynvml
        wanted = set(gpu_uuids)
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                raw = pynvml.nvmlDeviceGetUUID(h)
                uuid = raw.decode() if isinstance(raw, bytes) else str(raw)
                if not wanted or uuid in wanted:
                    self.handles.append((uuid, h))
        except pynvml.NVMLError as exc:
            log.warning("NVML could not list GPUs: %s", exc)

    def read(self) -> dict[str, dict[str, float]]:
        """``{gpu uuid: {gpu_util (%), gpu_free_memory (bytes), gpu_power (W)}}``."""
        out: dict[str, dict[str, float]] = {}
        nv = self.lib
        for uuid, h in self.handles:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                row = {
                    "gpu_util": float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
                    "gpu_free_memory": float(mem.free),
                }
            except nv.NVMLError:  # a GPU that fell off the bus: skip it this time
                continue
            try:
                row["gpu_power"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW -> W
            except nv.NVMLError:  # not every GPU reports power
                pass
            out[uuid] = row
        return out

    def close(self) -> None:
        """Shut NVML down (once; later calls do nothing)."""
        if self.lib is not None:
            try:
                self.lib.nvmlShutdown()
            except Exception:  # already shut down
                pass
            self.lib = None
