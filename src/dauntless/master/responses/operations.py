"""Answers of the master's operation and usage routes (issue 34):
``dauntless.master.routes_master``, ``routes_operations`` and ``routes_usage``."""

from __future__ import annotations

from typing import Any

from ._base import _Open


class MasterLogLine(_Open):
    id: int
    timestamp: float
    level: str
    message: str


class MasterLogsOut(_Open):
    logs: list[MasterLogLine]


class MasterConfigOut(_Open):
    config: dict[str, Any]


class PatchMasterConfigOut(_Open):
    config: dict[str, Any]
    warnings: list[str] = []


class ClusterMessage(_Open):
    message: str
    startTime: str  # noqa: N815 (Determined's JSON names)
    endTime: str | None = None  # noqa: N815
    createdTime: str  # noqa: N815


class ClusterMessageOut(_Open):
    clusterMessage: ClusterMessage | None = None  # noqa: N815


class CleanupLogsOut(_Open):
    removedCount: int  # noqa: N815


class UsageRawEntry(_Open):
    allocation_id: str
    kind: str
    experiment_id: int | None = None
    username: str
    user_id: int | None = None
    workspace: str
    resource_pool: str
    labels: list[str]
    slots: int
    start_time: str
    end_time: str
    seconds: float


class UsageRawOut(_Open):
    resource_entries: list[UsageRawEntry]


class UsagePeriod(_Open):
    period_start: str
    period: str
    seconds: float
    by_username: dict[str, float]
    by_workspace: dict[str, float]
    by_resource_pool: dict[str, float]
    by_experiment_label: dict[str, float]


class UsageAggregatedOut(_Open):
    resource_entries: list[UsagePeriod]


class UsageSummaryOut(_Open):
    since: str
    until: str
    total: float
    by_username: dict[str, float]
    by_workspace: dict[str, float]
    by_resource_pool: dict[str, float]
    by_experiment_label: dict[str, float]
