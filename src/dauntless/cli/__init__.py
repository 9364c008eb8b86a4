"""The ``det`` command line (also installed as ``dauntless``).

One module per command group (``experiment``, ``trial``, ``checkpoint``, ``agent``,
``slot``, ``master``, ``deploy``, ``version``); each adds itself with ``register``.
"""

from ._local_cluster import (
    ClusterState,
    LocalClusterError,
    ProcessRecord,
    default_data_dir,
    read_state,
    start_local_cluster,
    stop_local_cluster,
)
from .experiment import apply_overrides
from .main import build_parser, main

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
