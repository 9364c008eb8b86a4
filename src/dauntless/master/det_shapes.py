"""Determined 0.38.1's REST shapes (grpc-gateway JSON of its protobufs) for the answers
Dauntless's ``/api/v1`` shares with Determined's own client (issue 33).

Pure functions: each takes what a Dauntless route already read through the model
functions and returns the fields Determined's client reads, with its names (camelCase),
its enum strings (``STATE_ACTIVE``) and its timestamp form (RFC 3339 text). The routes
merge these fields into their Dauntless answers where the two do not clash (one answer
serves both clients), so no behaviour is implemented twice; the contract is Determined's
``proto/src/determined/**.proto`` as its generated client (``determined.common.api.
bindings``) reads it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

DETERMINED_API_VERSION = "0.38.1"
"""The Determined release whose client these shapes are checked against."""


def log_message(text: str | None) -> str:
    """A stored log line as Determined's ``message``: ending in a newline, as its log
    shipper keeps it (its CLI prints messages with ``end=""``, so lines without one
    would run together)."""
    text = text or ""
    return text if text.endswith("\n") else text + "\n"


def timestamp(seconds: float | None) -> str | None:
    """protobuf ``Timestamp`` JSON: RFC 3339 UTC text of seconds since the epoch
    (None stays None)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def master_info(
    *,
    version: str,
    cluster_id: str,
    cluster_name: str,
    master_id: str,
    sso_providers: list[dict[str, Any]],
    rbac_enabled: bool,
) -> dict[str, Any]:
    """Determined's ``GetMasterResponse`` (``GET /info``, ``GET /api/v1/master``).

    Args:
        version: the version to report (to Determined's client, the Determined
            release whose API is served: its CLI warns at every command when the
            master's version differs from its own).
        cluster_id: the cluster's id (stable across restarts).
        cluster_name: ``cluster_name`` of the master config.
        master_id: this master process's id (new at each start, as Determined's).
        sso_providers: Dauntless's provider entries (``name``, ``sso_url``, ``type``,
            ``always_redirect``).
        rbac_enabled: whether role-based permissions are enforced.
    """
    return {
        "version": version,
        "masterId": master_id,
        "clusterId": cluster_id,
        "clusterName": cluster_name,
        "telemetryEnabled": False,
        "ssoProviders": [
            {
                "name": p["name"],
                "ssoUrl": p["sso_url"],
                "type": p["type"],
                "alwaysRedirect": bool(p.get("always_redirect", False)),
            }
            for p in sso_providers
        ],
        "externalLoginUri": None,
        "externalLogoutUri": None,
        "branding": "determined",
        "rbacEnabled": rbac_enabled,
        "strictJobQueueControl": False,
        "userManagementEnabled": True,
        "featureSwitches": [],
        "hasCustomLogo": False,
    }


def agent_user_group(link: dict[str, Any] | None) -> dict[str, Any] | None:
    """Determined's ``AgentUserGroup`` from Dauntless's ``agent_user_group`` (snake_case)."""
    if link is None:
        return None
    return {
        "agentUid": link.get("agent_uid"),
        "agentGid": link.get("agent_gid"),
        "agentUser": link.get("agent_user"),
        "agentGroup": link.get("agent_group"),
    }


def user_fields(view: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``User`` fields that Dauntless's user answer names otherwise
    (``id``, ``username``, ``admin``, ``active``, ``remote`` are shared)."""
    return {
        "displayName": view.get("display_name"),
        "modifiedAt": timestamp(view.get("modified_at")),
        "agentUserGroup": agent_user_group(view.get("agent_user_group")),
    }


def camel(name: str) -> str:
    """``snake_case`` -> ``camelCase`` (how grpc-gateway names a protobuf field)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def with_camel(view: dict[str, Any]) -> dict[str, Any]:
    """``view`` plus a camelCase copy of each snake_case top-level key (Determined's
    client reads those); a key already present is left as it is."""
    out = dict(view)
    for key, value in view.items():
        if "_" in key:
            out.setdefault(camel(key), value)
    return out


def body_config() -> Any:
    """A pydantic ``ConfigDict`` for request bodies: unknown fields refused, each field
    accepted under its own (snake_case) name and under Determined's camelCase one."""
    from pydantic import ConfigDict
    from pydantic.alias_generators import to_camel

    return ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


_SCHEDULERS = {
    "priority": "SCHEDULER_TYPE_PRIORITY",
    "fair_share": "SCHEDULER_TYPE_FAIR_SHARE",
    "round_robin": "SCHEDULER_TYPE_ROUND_ROBIN",
}
_POOL_TYPES = {"aws": "RESOURCE_POOL_TYPE_AWS", "gcp": "RESOURCE_POOL_TYPE_GCP"}


def resource_pool(pool: dict[str, Any], default_pool: str, cluster_name: str) -> dict[str, Any]:
    """Determined's ``ResourcePool`` from one entry of Dauntless's ``resource_pools``
    (:func:`dauntless.master.models.agents.resource_pools`).

    Fields Dauntless has no notion of (Docker images of agents, Fluent Bit, startup
    scripts, instance types) are Determined's empty values; ``slotsAvailable`` counts
    every slot of the pool's live agents, ``slotsUsed`` the held ones.
    """
    provider = pool.get("provider")
    return {
        "name": pool["name"],
        "description": pool.get("description") or "",
        "type": _POOL_TYPES.get(provider or "", "RESOURCE_POOL_TYPE_STATIC"),
        "numAgents": pool["agents"],
        "slotsAvailable": pool["slots_total"],
        "slotsUsed": pool["slots_used"],
        "slotType": "TYPE_CPU",
        "auxContainerCapacity": 0,
        "auxContainersRunning": 0,
        "defaultComputePool": pool["name"] == default_pool,
        "defaultAuxPool": pool["name"] == default_pool,
        "preemptible": bool(pool["preemption"]),
        "minAgents": pool.get("min_instances") or 0,
        "maxAgents": pool.get("max_instances") or 0,
        "auxContainerCapacityPerAgent": 0,
        "schedulerType": _SCHEDULERS.get(pool["scheduler"], "SCHEDULER_TYPE_UNSPECIFIED"),
        "schedulerFittingPolicy": "FITTING_POLICY_BEST",
        "location": "",
        "imageId": "",
        "instanceType": "",
        "masterUrl": "",
        "masterCertName": "",
        "startupScript": "",
        "containerStartupScript": "",
        "agentDockerNetwork": "",
        "agentDockerRuntime": "",
        "agentDockerImage": "",
        "agentFluentImage": "",
        "maxIdleAgentPeriod": 0,
        "maxAgentStartingPeriod": 0,
        "details": {},
        "clusterName": cluster_name,
        "resourceManagerMetadata": {},
    }


_EXPERIMENT_STATES = frozenset(
    {
        "ACTIVE",
        "PAUSED",
        "STOPPING_COMPLETED",
        "STOPPING_CANCELED",
        "STOPPING_ERROR",
        "STOPPING_KILLED",
        "COMPLETED",
        "CANCELED",
        "ERROR",
        "DELETED",
        "DELETING",
        "DELETE_FAILED",
        "QUEUED",
        "PULLING",
        "STARTING",
        "RUNNING",
    }
)


def state(value: str | None) -> str:
    """Determined's ``STATE_*`` enum string of a Dauntless state (``ACTIVE`` ->
    ``STATE_ACTIVE``; experiment, trial and checkpoint states share the names);
    ``STATE_UNSPECIFIED`` for one Determined has not."""
    if value in _EXPERIMENT_STATES or value in ("PARTIALLY_DELETED",):
        return f"STATE_{value}"
    return "STATE_UNSPECIFIED"


def experiment(view: dict[str, Any], job_id: str, original_config: str) -> dict[str, Any]:
    """Determined's ``Experiment`` from Dauntless's experiment answer
    (:func:`dauntless.master.schemas.experiment_view`).

    Args:
        view: Dauntless's experiment JSON (times in seconds since the epoch).
        job_id: the experiment's job id (``GET /api/v1/jobs``).
        original_config: the config as submitted, YAML text.
    """
    config = view.get("config") or {}
    searcher = config.get("searcher") or {}
    resources = config.get("resources") or {}
    return {
        "id": view["id"],
        "name": view.get("name") or "",
        "description": view.get("description") or "",
        "labels": list(config.get("labels") or view.get("labels") or []),
        "startTime": timestamp(view.get("start_time")),
        "endTime": timestamp(view.get("end_time")),
        "state": state(view.get("state")),
        "archived": bool(view.get("archived")),
        "numTrials": view.get("num_trials") or 0,
        "displayName": view.get("username") or "",
        "userId": view.get("user_id"),
        "username": view.get("username") or "",
        "resourcePool": resources.get("resource_pool") or "default",
        "searcherType": searcher.get("name") or "",
        "searcherMetric": searcher.get("metric"),
        "notes": "",
        "jobId": job_id,
        "forkedFrom": view.get("parent_id"),
        "progress": view.get("progress"),
        "projectId": view.get("project_id") or 1,
        "projectName": view.get("project_name"),
        "workspaceId": view.get("workspace_id"),
        "workspaceName": view.get("workspace_name"),
        "parentArchived": False,
        "config": config,
        "originalConfig": original_config,
        "projectOwnerId": view.get("project_owner_id") or 0,
        "bestTrialSearcherMetric": view.get("best_searcher_metric"),
        "unmanaged": False,
    }


def trial(view: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``trialv1Trial`` from Dauntless's trial answer
    (:func:`dauntless.master.schemas.trial_view`)."""
    latest = view.get("latest_validation")
    return {
        "id": view["id"],
        "experimentId": view["experiment_id"],
        "startTime": timestamp(view.get("start_time")),
        "endTime": timestamp(view.get("end_time")),
        "state": state(view.get("state")),
        "restarts": view.get("restarts") or 0,
        "hparams": view.get("hparams") or {},
        "totalBatchesProcessed": view.get("total_batches") or 0,
        "bestValidation": None,
        "latestValidation": None
        if latest is None
        else {
            "totalBatches": view.get("latest_validation_batches") or 0,
            "metrics": {"avgMetrics": latest},
            "numInputs": 0,
        },
        "bestCheckpoint": None,
        "runnerState": "",
        "wallClockTime": 0,
        "taskId": f"{view['experiment_id']}.{view['id']}",
        "searcherMetricValue": view.get("best_validation"),
    }


def checkpoint(view: dict[str, Any], experiment_config: dict[str, Any] | None) -> dict[str, Any]:
    """Determined's ``Checkpoint`` from Dauntless's checkpoint answer
    (:func:`dauntless.master.schemas.checkpoint_view`); ``resources`` (file -> bytes)
    is given as Determined's int64 JSON (decimal strings)."""
    meta = dict(view.get("metadata") or {})
    meta.setdefault("steps_completed", view.get("total_batches"))
    searcher_metric = view.get("searcher_metric")
    metric_name = ((experiment_config or {}).get("searcher") or {}).get("metric")
    validation = (
        {"avgMetrics": {metric_name: searcher_metric}}
        if metric_name is not None and searcher_metric is not None
        else None
    )
    return {
        "uuid": view["uuid"],
        "taskId": f"{view.get('experiment_id')}.{view.get('trial_id')}",
        "allocationId": None,
        "reportTime": timestamp(view.get("report_time")),
        "resources": {k: str(v) for k, v in (view.get("resources") or {}).items()},
        "metadata": meta,
        "state": state(view.get("state")),
        "training": {
            "trialId": view.get("trial_id"),
            "experimentId": view.get("experiment_id"),
            "experimentConfig": experiment_config,
            "hparams": None,
            "trainingMetrics": None,
            "validationMetrics": validation,
            "searcherMetric": searcher_metric,
        },
    }


def agent(view: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``Agent`` from Dauntless's agent answer
    (:func:`dauntless.master.schemas.agent_view`): slots keyed by id, each with its
    device and the container (allocation) holding it."""
    slots: dict[str, Any] = {}
    total = disabled = 0
    for sl in view.get("slots") or []:
        total += 1
        disabled += 0 if sl.get("enabled", True) else 1
        device_type = "TYPE_CUDA" if sl.get("type") == "cuda" else "TYPE_CPU"
        holder = sl.get("allocation_id")
        slots[str(sl["id"])] = {
            "id": str(sl["id"]),
            "device": {
                "id": 0,
                "brand": sl.get("device") or "",
                "uuid": "",
                "type": device_type,
            },
            "enabled": bool(sl.get("enabled", True)),
            "draining": bool(view.get("draining")),
            "container": None
            if holder is None
            else {"id": holder, "state": "STATE_RUNNING", "devices": []},
        }
    stats = {
        "total": total,
        "disabled": disabled,
        "draining": 0 if not view.get("draining") else total,
    }
    return {
        "id": view["id"],
        "registeredTime": timestamp(view.get("registered_at")),
        "slots": slots,
        "containers": {},
        "resourcePools": [view.get("resource_pool") or "default"],
        "addresses": [view["hostname"]] if view.get("hostname") else [],
        "enabled": bool(view.get("enabled", True)),
        "draining": bool(view.get("draining")),
        "version": "",
        "slotStats": {"typeStats": {"TYPE_CPU": stats}, "brandStats": {}},
    }


def model(view: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``Model`` from Dauntless's model view
    (:func:`dauntless.master.registry_views.model_views`)."""
    return {
        "id": view["id"],
        "name": view["name"],
        "description": view.get("description") or "",
        "metadata": view.get("metadata") or {},
        "labels": list(view.get("labels") or []),
        "notes": view.get("notes") or "",
        "workspaceId": view.get("workspace_id"),
        "userId": view.get("user_id") or 0,
        "username": view.get("username") or "",
        "creationTime": timestamp(view.get("creation_time")),
        "lastUpdatedTime": timestamp(view.get("last_updated_time")),
        "numVersions": view.get("num_versions") or 0,
        "archived": bool(view.get("archived")),
    }


def model_version(view: dict[str, Any], experiment_config: dict[str, Any] | None) -> dict[str, Any]:
    """Determined's ``ModelVersion`` from Dauntless's version view
    (:func:`dauntless.master.registry_views.version_views`); ``experiment_config`` is the
    config of the checkpoint's experiment (None once it is deleted)."""
    return {
        "id": view["id"],
        "version": view["version"],
        "model": model(view["model"]),
        "checkpoint": checkpoint(view["checkpoint"], experiment_config),
        "name": view.get("name") or "",
        "comment": view.get("comment") or "",
        "notes": view.get("notes") or "",
        "metadata": view.get("metadata") or {},
        "labels": list(view.get("labels") or []),
        "userId": view.get("user_id") or 0,
        "username": view.get("username") or "",
        "creationTime": timestamp(view.get("creation_time")),
        "lastUpdatedTime": timestamp(view.get("last_updated_time")),
    }
