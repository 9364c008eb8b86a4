"""The Core API used inside tasks: report metrics and checkpoints, follow the searcher,
honour preemption.

``with dauntless.core.init() as core_context:`` opens a :class:`Context` bundling
:class:`TrainContext`, :class:`CheckpointContext`, :class:`SearcherContext`,
:class:`PreemptContext` and :class:`DistributedContext` over a :class:`Backend`:
:class:`MasterBackend` (the master's REST routes of docs/protocol.md, through a retrying
:class:`Session`) on a cluster, or :class:`LocalBackend` (in memory, no master) off it.
"""

from ._backend import (
    Backend,
    CheckpointReport,
    LocalBackend,
    MasterBackend,
    MetricReport,
    SearcherAnswer,
)
from ._checkpoint import METADATA_FILE, CheckpointContext, DownloadMode
from ._cluster_info import TASK_TYPE_TRIAL, ClusterInfo, TrialInfo, get_cluster_info
from ._context import Context
from ._distributed import DistributedContext
from ._init import DEFAULT_LOCAL_CHECKPOINT_DIR, TensorboardMode, init, storage_from
from ._preempt import PreemptContext, PreemptMode
from ._profiler import (
    PROFILER_BUCKET_SECONDS,
    PROFILING_GROUPS,
    ProfilerContext,
    max_rows_per_hour,
)
from ._searcher import SearcherContext, SearcherMode, SearcherOperation
from ._session import APIError, MasterUnreachableError, Session
from ._train import EarlyExitReason, TrainContext, to_json_value

__all__ = [
    "PROFILER_BUCKET_SECONDS",
    "PROFILING_GROUPS",
    "ProfilerContext",
    "max_rows_per_hour",
    "DEFAULT_LOCAL_CHECKPOINT_DIR",
    "METADATA_FILE",
    "TASK_TYPE_TRIAL",
    "APIError",
    "Backend",
    "CheckpointContext",
    "CheckpointReport",
    "ClusterInfo",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "EarlyExitReason",
    "LocalBackend",
    "MasterBackend",
    "MasterUnreachableError",
    "MetricReport",
    "PreemptContext",
    "PreemptMode",
    "SearcherAnswer",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "Session",
    "TensorboardMode",
    "TrainContext",
    "TrialInfo",
    "get_cluster_info",
    "init",
    "storage_from",
    "to_json_value",
]
