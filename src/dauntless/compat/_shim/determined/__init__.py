"""Determined's top-level package, answered by Dauntless (see :mod:`dauntless.compat`)."""

import importlib as _importlib

import dauntless as _dauntless
from dauntless import LOG_FORMAT, InvalidHP, __version__, get_cluster_info
from dauntless._import_path import import_from_path
from dauntless.core import ClusterInfo, TrialInfo

from . import errors

__dauntless_compat__ = True

_LAZY = ("core", "pytorch", "experimental", "launch", "keras", "transformers", "lightning")


def __getattr__(name):
    if name in _LAZY:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(
        f"module 'determined' has no attribute {name!r} (Dauntless {_dauntless.__version__})"
    )


__all__ = [
    "LOG_FORMAT",
    "ClusterInfo",
    "InvalidHP",
    "TrialInfo",
    "__version__",
    "errors",
    "get_cluster_info",
    "import_from_path",
]
