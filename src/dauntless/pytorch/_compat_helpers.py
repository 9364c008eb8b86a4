"""Module-level helpers Determined's ``determined.pytorch`` exports: ``data_length`` and
``to_device``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ._device import to_device as _to_device

log = logging.getLogger("dauntless.pytorch")


def data_length(data: Any) -> int:
    """The number of records in a batch: the length of a tensor or array; of a dict, its
    first value's; of a list or tuple, its first item's (recursively).

    Args:
        data: a batch as a PyTorchTrial receives it.

    Returns:
        The record count (the first dimension).

    Raises:
        TypeError: for any other type, or a 0-dimensional tensor/array.
        ValueError: for an empty dict, list or tuple.
    """
    if isinstance(data, (torch.Tensor, np.ndarray)):
        if data.ndim == 0:
            raise TypeError("data_length: a 0-dimensional tensor has no length")
        return int(data.shape[0])
    if isinstance(data, Mapping):
        if not data:
            raise ValueError("data_length: empty dict")
        return data_length(next(iter(data.values())))
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError(f"data_length: empty {type(data).__name__}")
        return data_length(data[0])
    raise TypeError(f"data_length: unrecognized batch type {type(data).__name__}")


def to_device(data: Any, device: str | torch.device, warned_types: set[type] | None = None) -> Any:
    """Move a (nested) batch to ``device``; see :meth:`PyTorchTrialContext.to_device`.

    An item that cannot be moved (not a tensor, numeric array, object with ``to``, dict,
    list or tuple) is returned unchanged, and logged as Determined does: the warning
    ``Was not able to move data item of type '<name>' to device.`` once per type and per
    ``warned_types`` set (a new set per call when None; the trial context keeps one for
    the trial's lifetime).

    Args:
        data: tensors, numpy arrays, objects with ``.to``, and dicts/lists/tuples of them.
        device: the target, e.g. ``"cpu"`` or ``torch.device("cuda:0")``.
        warned_types: the types already warned about (updated).

    Returns:
        The batch with the same structure on ``device``.
    """
    warn_unmovable(data, set() if warned_types is None else warned_types)
    return _to_device(data, torch.device(device))


def warn_unmovable(data: Any, warned_types: set[type]) -> None:
    """Log the warning of :func:`to_device` for each type in ``data`` that cannot be
    moved to a device and is not yet in ``warned_types`` (which is updated)."""
    if isinstance(data, Mapping):
        for v in data.values():
            warn_unmovable(v, warned_types)
        return
    if isinstance(data, (list, tuple)):
        for v in data:
            warn_unmovable(v, warned_types)
        return
    if isinstance(data, np.ndarray) and data.dtype.kind in "fciub":
        return
    if not isinstance(data, np.ndarray) and callable(getattr(data, "to", None)):
        return
    if type(data) not in warned_types:
        warned_types.add(type(data))
        log.warning("Was not able to move data item of type '%s' to device.", type(data).__name__)
