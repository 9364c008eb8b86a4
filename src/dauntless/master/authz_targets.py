"""The objects routes act on, as the permission check sees them (:class:`Target`: its
kind, workspace and owners), read from the rows a route's path names. Split out of
:mod:`dauntless.master.authz`, which re-exports every name."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from .db import (
    CheckpointRow,
    ExperimentRow,
    ModelRow,
    ModelVersionRow,
    ProjectRow,
    TaskRow,
    TrialRow,
    WorkspaceRow,
)


@dataclass(frozen=True)
class Target:
    """The object a request acts on.

    Attributes:
        kind: ``experiment``, ``task``, ``project``, ``workspace`` or ``model``.
        label: how refusals name it (``experiment 5``).
        workspace_id: its workspace.
        owners: ``(user id, kind)`` of its owners: the creator of the object, and for a
            project the creator of its workspace too.
        owner_name: the object's owner's name, for refusals (may be None).
    """

    kind: str
    label: str
    workspace_id: int
    owners: tuple[tuple[int | None, str], ...]
    owner_name: str | None = None


def _int(text: str | None) -> int | None:
    """An id from a path (None: not one, or out of the 32-bit range ids have; the
    route's own validation answers 400)."""
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < 2**31 else None


def experiment_target(s: Session, exp_id: int | None) -> Target | None:
    """The target of experiment ``exp_id`` (None: no such experiment)."""
    if exp_id is None:
        return None
    row = s.execute(
        select(ExperimentRow.owner_id, ExperimentRow.owner, ProjectRow.workspace_id)
        .join(ProjectRow, ProjectRow.id == ExperimentRow.project_id)
        .where(ExperimentRow.id == exp_id)
    ).first()
    if row is None:
        return None
    owner_id, owner, ws = row
    return Target("experiment", f"experiment {exp_id}", ws, ((owner_id, "experiment"),), owner)


def task_target(s: Session, task_id: str) -> Target | None:
    """The target of task ``task_id`` (None: no such task)."""
    row = s.execute(
        select(TaskRow.owner_id, TaskRow.owner, TaskRow.workspace_id).where(TaskRow.id == task_id)
    ).first()
    if row is None:
        return None
    owner_id, owner, ws = row
    return Target("task", f"task {task_id}", ws, ((owner_id, "task"),), owner)


def project_target(s: Session, project_id: int | None) -> Target | None:
    """The target of project ``project_id`` (None: no such project)."""
    if project_id is None:
        return None
    row = s.execute(
        select(ProjectRow.user_id, ProjectRow.workspace_id, WorkspaceRow.user_id)
        .join(WorkspaceRow, WorkspaceRow.id == ProjectRow.workspace_id)
        .where(ProjectRow.id == project_id)
    ).first()
    if row is None:
        return None
    owner, ws, ws_owner = row
    return Target(
        "project", f"project {project_id}", ws, ((owner, "project"), (ws_owner, "workspace"))
    )


def workspace_target(s: Session, workspace_id: int | None) -> Target | None:
    """The target of workspace ``workspace_id`` (None: no such workspace)."""
    if workspace_id is None:
        return None
    owner = s.scalar(select(WorkspaceRow.user_id).where(WorkspaceRow.id == workspace_id))
    exists = owner is not None or s.get(WorkspaceRow, workspace_id) is not None
    if not exists:
        return None
    return Target("workspace", f"workspace {workspace_id}", workspace_id, ((owner, "workspace"),))


def model_target(s: Session, ident: str) -> Target | None:
    """The target of model ``ident`` (its name, or its id if all digits), or None."""
    q = select(ModelRow.id, ModelRow.name, ModelRow.workspace_id, ModelRow.user_id)
    mid = _int(ident) if ident.isdigit() else None
    row = s.execute(q.where(ModelRow.id == mid if mid else ModelRow.name == ident)).first()
    if row is None:
        return None
    mid, name, ws, owner = row
    label = f"model {name!r} (#{mid})"
    return Target("model", label, ws, ((owner, "model"),))


def path_target(s: Session, params: dict[str, str]) -> Target | None:
    """The object the path parameters name (the first of ``exp_id``, ``trial_id``,
    ``uuid``, ``model_name``, ``task_id``, ``job_id``, ``project_id``, ``workspace_id``),
    or None."""
    if "exp_id" in params:
        return experiment_target(s, _int(params["exp_id"]))
    if "trial_id" in params:
        tid = _int(params["trial_id"])
        trial = s.get(TrialRow, tid) if tid is not None else None
        return experiment_target(s, trial.experiment_id) if trial else None
    if "uuid" in params:  # a registered checkpoint of a deleted experiment: its model's
        ckpt = s.get(CheckpointRow, params["uuid"])
        if ckpt is None:
            mid = s.scalar(
                select(ModelVersionRow.model_id).where(
                    ModelVersionRow.checkpoint_uuid == params["uuid"]
                )
            )
            return model_target(s, str(mid)) if mid is not None else None
        return experiment_target(s, ckpt.experiment_id)
    if "model_name" in params:
        return model_target(s, params["model_name"])
    if "task_id" in params:
        return task_target(s, params["task_id"])
    if "job_id" in params:
        job = params["job_id"]
        if job.startswith("experiment-"):
            return experiment_target(s, _int(job.removeprefix("experiment-")))
        return task_target(s, job.removeprefix("task-"))
    if "project_id" in params:
        return project_target(s, _int(params["project_id"]))
    if "workspace_id" in params:
        return workspace_target(s, _int(params["workspace_id"]))
    return None


def registered_model_targets(s: Session, uuid: str) -> list[Target]:
    """The targets of the models whose versions name checkpoint ``uuid``."""
    ids = list(
        s.scalars(
            select(ModelVersionRow.model_id)
            .where(ModelVersionRow.checkpoint_uuid == uuid)
            .distinct()
        )
    )
    return [t for t in (model_target(s, str(mid)) for mid in ids) if t is not None]
