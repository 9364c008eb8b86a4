"""The master's database: ORM models, engine, sessions and migrations."""

from .engine import Database, SchemaError, check_schema, current_revision, head_revision, upgrade
from .models import (
    AgentRow,
    AllocationRow,
    Base,
    CheckpointRow,
    ClusterRow,
    ExperimentRow,
    MetricRow,
    MetricSummaryRow,
    ModelDefinitionRow,
    TaskLogRow,
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
    "MetricRow",
    "MetricSummaryRow",
    "ModelDefinitionRow",
    "SchemaError",
    "TaskLogRow",
    "TrialRow",
    "UserRow",
    "UserSessionRow",
    "check_schema",
    "current_revision",
    "head_revision",
    "upgrade",
]
