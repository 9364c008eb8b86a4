"""Moving batches to a device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch


def to_device(data: Any, device: torch.device) -> Any:
    """Move a (nested) batch to ``device``.

    Tensors (and objects with a ``to`` method) are moved; numeric numpy arrays become
    tensors; mappings (returned as dicts), lists, tuples and named tuples are handled
    recursively; anything else is returned unchanged.

    Args:
        data: a batch in any of the formats of the PyTorch API (seed 003, "Load Data").
        device: the target device.

    Returns:
        The batch with the same structure, its tensors on ``device`` (the same list or
        tuple object when none of its items changed).
    """
    return mover(device)(data)


def mover(device: torch.device) -> Callable[[Any], Any]:
    """A :func:`to_device` specialised for one device (the training loop's per-batch
    path: on CPU a tensor already there costs one attribute read)."""
    on_cpu = device.type == "cpu"

    def move(data: Any) -> Any:
        cls = type(data)
        if on_cpu and (cls is tuple or cls is list):
            # The common CPU batch, e.g. [images, labels]: return it without rebuilding.
            for v in data:
                if type(v) is not torch.Tensor or not v.is_cpu:
                    break
            else:
                return data
        if isinstance(data, torch.Tensor):
            if on_cpu:
                return data if data.is_cpu else data.to(device)
            return data if data.device == device else data.to(device)
        if isinstance(data, (list, tuple)):
            moved = [move(v) for v in data]
            for a, b in zip(moved, data, strict=True):
                if a is not b:
                    break
            else:
                return data  # nothing moved (e.g. CPU tensors for a CPU model): no copy
            if isinstance(data, tuple) and hasattr(data, "_fields"):
                return type(data)(*moved)
            return type(data)(moved)
        if isinstance(data, Mapping):
            return {k: move(v) for k, v in data.items()}
        if isinstance(data, np.ndarray):
            if data.dtype.kind in "biuf":
                return torch.from_numpy(data).to(device)
            return data
        to = getattr(data, "to", None)
        if callable(to):
            return to(device)
        return data

    return move
