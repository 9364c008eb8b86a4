"""Determined 0.38.1's shapes of generic tasks (commands, notebooks, shells,
TensorBoards), the ``Task`` behind each and its log lines, for Determined's own client
(issue 33): pure functions over Dauntless's task views, as
:mod:`dauntless.master.det_shapes` for experiments, trials and checkpoints."""

from __future__ import annotations

from typing import Any

from .det_shapes import log_message, timestamp

_TASK_STATES = {
    "QUEUED": "STATE_QUEUED",
    "ASSIGNED": "STATE_STARTING",
    "RUNNING": "STATE_RUNNING",
    "TERMINATING": "STATE_TERMINATING",
    "COMPLETED": "STATE_TERMINATED",
    "ERROR": "STATE_TERMINATED",
    "CANCELED": "STATE_TERMINATED",
}
"""Dauntless task state -> Determined's ``taskv1State`` (Determined has one ended state;
how a task ended is its ``exitStatus``)."""

_TASK_TYPES = {
    "COMMAND": "TASK_TYPE_COMMAND",
    "NOTEBOOK": "TASK_TYPE_NOTEBOOK",
    "SHELL": "TASK_TYPE_SHELL",
    "TENSORBOARD": "TASK_TYPE_TENSORBOARD",
}


def _exit_status(view: dict[str, Any]) -> str | None:
    if view.get("state") not in ("COMPLETED", "ERROR", "CANCELED"):
        return None
    text = view["state"].lower()
    if view.get("exit_code") is not None:
        text += f" (exit code {view['exit_code']})"
    if view.get("exit_message"):
        text += f": {view['exit_message']}"
    return text


def ntsc(view: dict[str, Any], job_id: str) -> dict[str, Any]:
    """Determined's ``Command`` / ``Notebook`` / ``Shell`` / ``Tensorboard`` from
    Dauntless's task view (:meth:`dauntless.master.tasks.TaskService.view`); the fields
    of all four in one object (each reads its own).

    Args:
        view: the task's view (times in seconds since the epoch).
        job_id: the task's job id (``GET /api/v1/jobs``).
    """
    out: dict[str, Any] = {
        "id": view["id"],
        "description": view.get("description") or "",
        "state": _TASK_STATES.get(view.get("state") or "", "STATE_UNSPECIFIED"),
        "startTime": timestamp(view.get("start_time") or view.get("created_at")),
        "container": None,
        "displayName": view.get("owner") or "",
        "userId": view.get("user_id"),
        "username": view.get("owner") or "",
        "resourcePool": view.get("resource_pool") or "default",
        "exitStatus": _exit_status(view),
        "jobId": job_id,
        "workspaceId": view.get("workspace_id"),
    }
    if view.get("service_url"):
        out["serviceAddress"] = view["service_url"]
    if view.get("type") == "TENSORBOARD":
        out["experimentIds"] = list(view.get("experiment_ids") or [])
        out["trialIds"] = list(view.get("trial_ids") or [])
    return out


def generic_task(view: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``Task`` fields (``GET /api/v1/tasks/{id}``) of a task view: its type,
    times and its latest allocation (``isReady`` once its service answers)."""
    alloc = view.get("allocation_id")
    state = _TASK_STATES.get(view.get("state") or "", "STATE_UNSPECIFIED")
    return {
        "taskId": view["id"],
        "taskType": _TASK_TYPES.get(view.get("type") or "", "TASK_TYPE_UNSPECIFIED"),
        "startTime": timestamp(view.get("created_at")),
        "endTime": timestamp(view.get("end_time")),
        "allocations": []
        if alloc is None
        else [
            {
                "taskId": view["id"],
                "allocationId": alloc,
                "state": state,
                "isReady": bool(view.get("ready")),
                "startTime": timestamp(view.get("start_time")),
                "endTime": timestamp(view.get("end_time")),
                "slots": view.get("slots") or 0,
            }
        ],
    }


def task_log(line: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``TaskLogsResponse`` of one task log line (a line of
    :func:`dauntless.master.models.tasks.read_task_logs`)."""
    return {
        "id": str(line["id"]),
        "taskId": line["task_id"],
        "allocationId": line.get("allocation_id"),
        "agentId": None,
        "containerId": line.get("allocation_id"),
        "rankId": line.get("rank_id"),
        "timestamp": timestamp(line.get("timestamp")),
        "level": "LOG_LEVEL_ERROR" if line.get("stdtype") == "stderr" else "LOG_LEVEL_INFO",
        "log": line.get("log") or "",
        "message": log_message(line.get("log")),
        "source": "",
        "stdtype": line.get("stdtype") or "stdout",
    }
