"""Run model code written for Determined unchanged: ``import determined`` resolves to
Dauntless.

The directory :data:`SHIM_PATH` holds a package named ``determined`` whose modules
re-export Dauntless's (``determined.core`` is :mod:`dauntless.core`'s objects,
``determined.pytorch`` :mod:`dauntless.pytorch`'s, ``python -m
determined.launch.torch_distributed`` runs :mod:`dauntless.launch.torch_distributed`, ...).
It is never installed into site-packages; it is put on the path of trial processes only:

- on a cluster the agent prepends it to every task's ``PYTHONPATH``;
- off the cluster (local mode: ``pytorch.init()``, ``core.init()``) opt in with
  ``import dauntless.compat; dauntless.compat.install()`` before ``import determined``,
  or run ``PYTHONPATH=$(python -m dauntless.compat) python3 train.py``.

A real ``determined`` package imported earlier in the same process is left alone:
:func:`install` refuses rather than mixing the two.
"""

from __future__ import annotations

import os
import sys

#: The directory holding the ``determined`` compatibility package.
SHIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")

__all__ = ["SHIM_PATH", "install", "is_installed"]


def is_installed() -> bool:
    """True when ``import determined`` gives (or would give) the compatibility package."""
    module = sys.modules.get("determined")
    if module is not None:
        return bool(getattr(module, "__dauntless_compat__", False))
    return SHIM_PATH in sys.path


def install() -> None:
    """Put the compatibility package first on ``sys.path`` of this process.

    Idempotent. Child processes inherit it only through ``PYTHONPATH`` (the agent sets
    that for trials).

    Raises:
        RuntimeError: when a different ``determined`` package is already imported.
    """
    module = sys.modules.get("determined")
    if module is not None and not getattr(module, "__dauntless_compat__", False):
        raise RuntimeError(
            f"a different 'determined' package is already imported ({module.__file__}); "
            "call dauntless.compat.install() before importing determined"
        )
    if SHIM_PATH not in sys.path:
        sys.path.insert(0, SHIM_PATH)
