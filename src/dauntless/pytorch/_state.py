"""Seeding, and the random-generator states saved in a PyTorchTrial checkpoint.

``state-dict.pth`` (docs/protocol.md, "Checkpoint layout") is a dict with
``models_state_dict``, ``optimizers_state_dict`` and ``lr_schedulers_state_dict`` (lists,
in wrapping order), ``callbacks`` ({name: state}), ``rng_state`` (below) and
``trial_state`` (see ``_resume.py``), plus ``scaler_state_dict`` with a GradScaler.
Everything in it is a tensor or plain Python data, so it loads with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

STATE_KEYS = (
    "models_state_dict",
    "optimizers_state_dict",
    "lr_schedulers_state_dict",
    "callbacks",
    "rng_state",
    "trial_state",
)


def seed_all(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator and torch (CPU and CUDA).

    Args:
        seed: the trial seed, in [0, 2**32).

    Raises:
        ValueError: if ``seed`` is not an int in range.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_rng_state() -> dict[str, Any]:
    """Capture the states of ``random``, numpy's global generator and torch.

    Returns:
        ``{"cpu_rng_state": ByteTensor, "np_rng_state": {...}, "random_rng_state":
        tuple, "gpu_rng_state": [ByteTensor] (only with CUDA)}``, all loadable with
        ``weights_only=True``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "cpu_rng_state": torch.get_rng_state(),
        "np_rng_state": {
            "name": name,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "random_rng_state": random.getstate(),
    }
    if torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore states captured by :func:`get_rng_state`.

    A ``gpu_rng_state`` is applied only when CUDA is available with at least as many
    devices.

    Raises:
        KeyError: if a CPU, numpy or random state is missing.
    """
    torch.set_rng_state(state["cpu_rng_state"].cpu())
    np_state = state["np_rng_state"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].cpu().numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    version, internal, gauss_next = state["random_rng_state"]
    random.setstate((version, tuple(internal), gauss_next))
    gpu = state.get("gpu_rng_state")
    if gpu is not None and torch.cuda.is_available() and torch.cuda.device_count() >= len(gpu):
        torch.cuda.set_rng_state_all([s.cpu() for s in gpu])
