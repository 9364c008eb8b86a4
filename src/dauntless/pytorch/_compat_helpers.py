"""Module-level helpers Determined's ``determined.pytorch`` exports: ``data_length`` and
``to_device``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ._device import to_device as _to_device


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

    Args:
        data: tensors, numpy arrays, objects with ``.to``, and dicts/lists/tuples of them.
        device: the target, e.g. ``"cpu"`` or ``torch.device("cuda:0")``.
        warned_types: accepted for Determined compatibility (types already warned about);
            unsupported types are returned unchanged without a warning.

    Returns:
        The batch with the same structure on ``device``.
    """
    return _to_device(data, torch.device(device))
