"""Dauntless: a self-hosted deep learning training platform.

The model-definition API lives in :mod:`dauntless.pytorch` (PyTorchTrial, the Trainer)
and :mod:`dauntless.core` (the Core API); ``import dauntless as det`` is the drop-in for
``import determined as det`` (``det.pytorch`` and ``det.core`` load on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dauntless.core import ClusterInfo

__version__ = "0.1.0"

#: The log line format of the trial harness (Determined's ``det.LOG_FORMAT``).
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

_SUBPACKAGES = ("core", "pytorch", "errors", "experimental", "compat")


class InvalidHP(Exception):
    """Raise from trial code to end a trial early because its hyperparameters are invalid.

    The trial exits without counting as a failure; searchers treat it as an early exit.
    """


def get_cluster_info() -> ClusterInfo | None:
    """The running task's cluster info, or None when not running on a Dauntless cluster.

    Read from the ``DET_*`` environment variables the agent sets (docs/protocol.md): the
    master URL, allocation, and for trials ``trial.trial_id``, ``trial.hparams``,
    ``trial.trial_seed`` and ``latest_checkpoint`` (the uuid to resume from, or None).

    Raises:
        ValueError: when on a cluster but a variable is missing or malformed.
    """
    from dauntless.core import ClusterInfo

    return ClusterInfo.from_env()


def import_from_path(path: Any) -> Any:
    """Import modules from ``path`` without the module cache mixing them up (a context
    manager; Determined's ``det.import_from_path``).

    See :func:`dauntless._import_path.import_from_path`.
    """
    from dauntless._import_path import import_from_path as _impl

    return _impl(path)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"dauntless.{name}")
    raise AttributeError(f"module 'dauntless' has no attribute {name!r}")


__all__ = ["LOG_FORMAT", "InvalidHP", "__version__", "get_cluster_info", "import_from_path"]
