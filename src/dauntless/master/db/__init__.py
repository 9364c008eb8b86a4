"""The master's database: ORM models, engine, sessions and migrations."""

from .engine import Database, SchemaError, check_schema, current_revision, head_revision, upgrade
from .models import (
    AgentRow,
    AllocationRow,
    Base,
    CheckpointRow,
    ClusterRow,
    ExperimentRow,
    InstanceRow,
    MetricRow,
    MetricSummaryRow,
    ModelDefinitionRow,
    TaskLogRow,
    TaskRow,
    TrialRow,
    UserRow,
    UserSessionRow,
)

__all__ = [
    "AgentRow",
    "AllocationRow",
    "Base",
    "CheckpointRow",
    "ClusterRow",
    "Database",
    "ExperimentRow",
    "InstanceRow",
    "MetricRow",
    "MetricSummaryRow",
    "ModelDefinitionRow",
    "SchemaError",
    "TaskLogRow",
    "TaskRow",
    "TrialRow",
    "UserRow",
    "UserSessionRow",
    "check_schema",
    "current_revision",
    "head_revision",
    "upgrade",
]
