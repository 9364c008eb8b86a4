"""Automatic mixed precision over ``torch.amp``: autocast forwards, fp32 outputs.

With ``context.experimental.use_amp()`` each wrapped model's forward runs under
``torch.autocast`` (float16 on CUDA, bfloat16 on CPU, the types torch's autocast supports
there) and its floating-point outputs are cast back to float32, so that losses and
metrics computed from them are float32. On CUDA a ``torch.amp.GradScaler`` scales the
loss (float16 gradients would underflow); bfloat16 has float32's range and needs none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

SCALER_METHODS = ("scale", "step", "update", "unscale_", "state_dict", "load_state_dict")


def autocast_dtype(device: torch.device) -> torch.dtype:
    """The autocast type on ``device``: float16 on CUDA, bfloat16 elsewhere."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def to_float32(value: Any) -> Any:
    """Cast half-precision floating tensors in a (nested) output to float32.

    Tensors of other types, and anything that is not a tensor, mapping, list or tuple, are
    returned unchanged; mappings come back as dicts.
    """
    if isinstance(value, torch.Tensor):
        if value.dtype in (torch.float16, torch.bfloat16):
            return value.float()
        return value
    if isinstance(value, Mapping):
        return {k: to_float32(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_float32(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_float32(v) for v in value)
    return value


def autocast_forward(model: torch.nn.Module, device: torch.device) -> None:
    """Make ``model``'s forward run under autocast on ``device`` and return float32.

    The model's own ``forward`` is replaced on the instance (its class, parameters and
    ``state_dict`` are untouched).

    Args:
        model: the module to change in place.
        device: where it runs (selects the autocast device type and dtype).
    """
    inner: Callable[..., Any] = model.forward
    device_type = "cuda" if device.type == "cuda" else "cpu"
    dtype = autocast_dtype(device)

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=dtype):
            out = inner(*args, **kwargs)
        return to_float32(out)

    model.forward = forward  # type: ignore[method-assign]


def check_scaler(scaler: Any) -> None:
    """Check that ``scaler`` behaves like a ``torch.amp.GradScaler``.

    Raises:
        TypeError: if a needed method is missing.
    """
    missing = [m for m in SCALER_METHODS if not callable(getattr(scaler, m, None))]
    if missing:
        raise TypeError(
            f"wrap_scaler needs a torch.amp.GradScaler, got {type(scaler).__name__} "
            f"(missing {missing})"
        )
