"""``determined.experimental``: :mod:`dauntless.experimental`, and Determined's SDK
(``client``, ``Determined`` and its objects) from :mod:`dauntless.sdk`."""

from dauntless.experimental import *  # noqa: F403
from dauntless.experimental import __all__ as _local
from dauntless.sdk import (
    Checkpoint,
    CheckpointState,
    Determined,
    DownloadMode,
    Experiment,
    ExperimentState,
    OrderBy,
    Trial,
    TrialMetrics,
    TrialState,
)

from . import client

__all__ = [
    *_local,
    "Checkpoint",
    "CheckpointState",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentState",
    "OrderBy",
    "Trial",
    "TrialMetrics",
    "TrialState",
    "client",
]
