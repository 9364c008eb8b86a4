"""The ``det`` command line (also installed as ``dauntless``).

One module per command group (``experiment``, ``trial``, ``checkpoint``, ``agent``,
``slot``, ``master``, ``deploy``, ``version``); each adds itself with ``register``.

The names below other than ``main`` and ``build_parser`` load on first use, so that
``det -h`` and importing this package stay cheap (no httpx, rich, numpy or config
models).
"""

from __future__ import annotations

import importlib
from typing import Any

from .main import build_parser, main

_LAZY = {
    "ClusterState": "_local_cluster",
    "LocalClusterError": "_local_cluster",
    "ProcessRecord": "_local_cluster",
    "default_data_dir": "_local_cluster",
    "read_state": "_local_cluster",
    "start_local_cluster": "_local_cluster",
    "stop_local_cluster": "_local_cluster",
    "apply_overrides": "_submit",
}

__all__ = [
    "ClusterState",
    "LocalClusterError",
    "ProcessRecord",
    "apply_overrides",
    "build_parser",
    "default_data_dir",
    "main",
    "read_state",
    "start_local_cluster",
    "stop_local_cluster",
]


def __getattr__(name: str) -> Any:
    """Load the lazily exported names (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
