"""Response models of the routes that answer fixed shapes (docs/protocol.md), so that the
OpenAPI spec describes the answers and FastAPI checks them.

Models of objects allow fields beyond those listed (``extra="allow"``): the listed ones
are promised; a newer master may add more without breaking clients.

One module per aggregate; every model is re-exported here, so ``from .responses import
X`` and ``responses.X`` name the same class wherever it is defined.
"""

from __future__ import annotations

from ._base import (
    Empty,
    Stored,
    StoredCount,
    StoredMany,
)
from .allocations import (
    AllocationOut,
    AllocationsOut,
    HeartbeatOut,
    OpLengthOut,
    PreemptionSignal,
    RendezvousInfo,
    RendezvousOut,
    SearcherOperation,
    TaskSpec,
)
from .checkpoints import (
    CheckpointBody,
    CheckpointDeleted,
    CheckpointOut,
    CheckpointsOut,
)
from .cluster import (
    AgentBody,
    AgentOut,
    AgentRegistered,
    AgentsOut,
    JobBody,
    JobOut,
    JobsOut,
    MasterInfo,
    ResourcePoolOut,
    ResourcePoolsOut,
    SlotOut,
)
from .experiments import (
    ExperimentBody,
    ExperimentCreated,
    ExperimentDetail,
    ExperimentOut,
    ExperimentPage,
    ExperimentSeriesOut,
    LabelsOut,
    MetricNamesOut,
    ModelDefEntry,
    ModelDefTree,
    PreviewBracket,
    PreviewFinalLength,
    PreviewOut,
    PreviewSummary,
    PreviewTrialOut,
    TrialSeriesOut,
)
from .search import SearcherEventsOut, SearchSummaryOut
from .tasks import (
    TaskBody,
    TaskCreated,
    TaskLogLineOut,
    TaskLogsOut,
    TaskOut,
    TasksOut,
)
from .trials import (
    BatchMetricsOut,
    BatchSeriesOut,
    LogLineOut,
    LogsOut,
    MetricOut,
    MetricSeriesOut,
    MetricsOut,
    TrialBody,
    TrialOut,
    TrialsOut,
)
from .users import (
    CsrfOut,
    LoginOut,
    UserBody,
    UserOut,
    UsersOut,
)

__all__ = [
    "AgentBody",
    "AgentRegistered",
    "AgentOut",
    "AgentsOut",
    "AllocationOut",
    "AllocationsOut",
    "BatchMetricsOut",
    "BatchSeriesOut",
    "CheckpointBody",
    "CheckpointDeleted",
    "CheckpointOut",
    "CheckpointsOut",
    "Empty",
    "ExperimentBody",
    "ExperimentCreated",
    "ExperimentDetail",
    "ExperimentOut",
    "ExperimentPage",
    "ExperimentSeriesOut",
    "HeartbeatOut",
    "JobBody",
    "JobOut",
    "JobsOut",
    "LabelsOut",
    "LogLineOut",
    "LoginOut",
    "CsrfOut",
    "LogsOut",
    "MasterInfo",
    "MetricNamesOut",
    "MetricOut",
    "MetricSeriesOut",
    "MetricsOut",
    "ModelDefEntry",
    "ModelDefTree",
    "OpLengthOut",
    "PreemptionSignal",
    "PreviewBracket",
    "PreviewFinalLength",
    "PreviewOut",
    "SearcherEventsOut",
    "SearchSummaryOut",
    "PreviewSummary",
    "PreviewTrialOut",
    "RendezvousInfo",
    "RendezvousOut",
    "ResourcePoolOut",
    "ResourcePoolsOut",
    "SearcherOperation",
    "SlotOut",
    "Stored",
    "StoredCount",
    "StoredMany",
    "TaskBody",
    "TaskCreated",
    "TaskLogLineOut",
    "TaskLogsOut",
    "TaskOut",
    "TaskSpec",
    "TasksOut",
    "TrialBody",
    "TrialOut",
    "TrialSeriesOut",
    "TrialsOut",
    "UserBody",
    "UserOut",
    "UsersOut",
]
