"""Slot discovery: the GPUs an agent can hand out, or its CPU.

GPUs are found through NVML (``pynvml``, when installed) or ``nvidia-smi``; with none, the
agent offers one CPU slot (the whole machine), or ``artificial_slots`` CPU slots for tests.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """One slot: ``id`` unique within the agent, ``type`` ``cpu`` or ``cuda``."""

    id: str
    type: str
    device: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "type": self.type, "device": self.device}


def _nvml_gpus() -> list[Slot] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: not a GPU machine
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            out.append(Slot(id=str(i), type="cuda", device=name))
        return out
    finally:
        pynvml.nvmlShutdown()


def _smi_gpus() -> list[Slot] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        res = subprocess.run(
            [exe, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = []
    for line in res.stdout.splitlines():
        if "," in line:
            idx, name = (x.strip() for x in line.split(",", 1))
            out.append(Slot(id=idx, type="cuda", device=name))
    return out


def discover_slots(
    slot_type: str = "auto", artificial_slots: int = 0, visible_gpus: str | None = None
) -> list[Slot]:
    """The slots this machine offers.

    Args:
        slot_type: ``auto`` (GPUs if any, else CPU), ``cuda``/``gpu``, ``cpu`` or ``none``.
        artificial_slots: if > 0, this many CPU slots regardless of hardware (testing).
        visible_gpus: comma-separated GPU indices to offer (default: all found).

    Returns:
        The slots; empty for ``none``.

    Raises:
        RuntimeError: ``slot_type`` is ``cuda`` but no GPU was found.
        ValueError: an unknown ``slot_type``.
    """
    if slot_type not in ("auto", "cuda", "gpu", "cpu", "none"):
        raise ValueError(f"slot_type must be auto, cuda, gpu, cpu or none; got {slot_type!r}")
    if artificial_slots > 0:
        return [
            Slot(id=f"cpu{i}", type="cpu", device="artificial") for i in range(artificial_slots)
        ]
    if slot_type == "none":
        return []
    if slot_type in ("auto", "cuda", "gpu"):
        gpus = _nvml_gpus()
        if gpus is None:
            gpus = _smi_gpus()
        if gpus and visible_gpus:
            keep = {x.strip() for x in visible_gpus.split(",") if x.strip()}
            gpus = [g for g in gpus if g.id in keep]
        if gpus:
            return gpus
        if slot_type != "auto":
            raise RuntimeError("slot_type is cuda but no GPU was found (NVML / nvidia-smi)")
    return [Slot(id="cpu0", type="cpu", device="cpu")]
