"""Workspaces: create, read, edit, archive, delete, pins, and the resource pools bound
to them (Determined's rules and messages, reference §1.1-1.5). Rows only: no context;
the caller's write session commits.

Names are 1-80 characters with a non-space one, unique case-insensitively. Workspace 1
(``Uncategorized``) is immutable: it cannot be renamed, archived or deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ..db import (
    AllocationRow,
    ExperimentRow,
    ModelRow,
    PoolBindingRow,
    ProjectRow,
    RoleAssignmentRow,
    TaskLogRow,
    TaskRow,
    WorkspacePinRow,
    WorkspaceRow,
)
from ..errors import BadRequest, Conflict, NotFound
from .pool_bindings import available_pools

MAX_NAME = 80
"""The longest workspace or project name, in characters (Determined's)."""

AGENT_FIELDS = ("agent_uid", "agent_gid", "agent_user", "agent_group")
"""The keys of a workspace's ``agent_user_group``."""

ENDED_TASK_STATES = ("COMPLETED", "ERROR", "CANCELED")
"""Task states of a task that has ended."""


def check_name(name: str, what: str = "workspace") -> str:
    """``name`` stripped of nothing, checked: 1-80 characters, one not a space.

    Raises:
        BadRequest: naming the field ``name``.
    """
    if not name or not name.strip() or len(name) > MAX_NAME:
        raise BadRequest(
            f"invalid {what} name",
            [("name", f"1 to {MAX_NAME} characters, at least one not a space")],
        )
    return name


def read_workspace(s: Session, workspace_id: int) -> WorkspaceRow:
    """A workspace by id.

    Raises:
        NotFound: no such workspace.
    """
    ws = s.get(WorkspaceRow, workspace_id)
    if ws is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return ws


def workspace_by_name(s: Session, name: str) -> WorkspaceRow | None:
    """The workspace called ``name`` (exactly, else case-insensitively), or None."""
    ws = s.scalar(select(WorkspaceRow).where(WorkspaceRow.name == name))
    if ws is None:
        ws = s.scalar(select(WorkspaceRow).where(func.lower(WorkspaceRow.name) == name.lower()))
    return ws


def _unique(s: Session, name: str, other_than: int | None = None) -> None:
    q = select(WorkspaceRow.id).where(func.lower(WorkspaceRow.name) == name.lower())
    if other_than is not None:
        q = q.where(WorkspaceRow.id != other_than)
    if s.scalar(q) is not None:
        raise Conflict(
            f"workspace {name!r} already exists: avoid names equal to other workspaces "
            "(case-insensitive)"
        )


def list_workspaces(
    s: Session,
    visible: set[int] | None,
    *,
    name: str | None = None,
    archived: bool | None = None,
    user_ids: Sequence[int] = (),
    pinned_by: int | None = None,
    sort_by: str = "id",
    order_by: str = "asc",
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[WorkspaceRow], int]:
    """A page of workspaces and how many matched.

    Args:
        visible: the workspace ids the caller may see (None: all), applied in SQL.
        name: only the one called this (case-insensitive).
        archived: only archived (True) or unarchived (False) ones; None: both.
        user_ids: only those created by these users.
        pinned_by: only those this user pinned.
        sort_by: ``id`` or ``name``; order_by: ``asc`` or ``desc``.
        offset, limit: the page (``limit`` 0: every one).
    """
    q = select(WorkspaceRow)
    if visible is not None:
        q = q.where(WorkspaceRow.id.in_(visible))
    if name:
        q = q.where(func.lower(WorkspaceRow.name) == name.lower())
    if archived is not None:
        q = q.where(WorkspaceRow.archived == archived)
    if user_ids:
        q = q.where(WorkspaceRow.user_id.in_(user_ids))
    if pinned_by is not None:
        pins = select(WorkspacePinRow.workspace_id).where(WorkspacePinRow.user_id == pinned_by)
        q = q.where(WorkspaceRow.id.in_(pins))
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    column = WorkspaceRow.name if sort_by == "name" else WorkspaceRow.id
    q = q.order_by(column.desc() if order_by == "desc" else column.asc())
    if offset:
        q = q.offset(offset)
    if limit:
        q = q.limit(limit)
    return list(s.scalars(q)), total


def workspace_counts(
    s: Session, ids: Iterable[int], user_id: int | None
) -> dict[int, dict[str, Any]]:
    """Per workspace: ``num_projects``, ``num_experiments``, ``pinned`` and ``pinned_at``
    (for ``user_id``)."""
    ids = list(ids)
    out: dict[int, dict[str, Any]] = {
        i: {"num_projects": 0, "num_experiments": 0, "pinned": False, "pinned_at": None}
        for i in ids
    }
    if not ids:
        return out
    for ws, n in s.execute(
        select(ProjectRow.workspace_id, func.count())
        .where(ProjectRow.workspace_id.in_(ids))
        .group_by(ProjectRow.workspace_id)
    ):
        out[ws]["num_projects"] = n
    for ws, n in s.execute(
        select(ProjectRow.workspace_id, func.count())
        .join(ExperimentRow, ExperimentRow.project_id == ProjectRow.id)
        .where(ProjectRow.workspace_id.in_(ids))
        .group_by(ProjectRow.workspace_id)
    ):
        out[ws]["num_experiments"] = n
    if user_id is not None:
        for ws, at in s.execute(
            select(WorkspacePinRow.workspace_id, WorkspacePinRow.pinned_at).where(
                WorkspacePinRow.user_id == user_id, WorkspacePinRow.workspace_id.in_(ids)
            )
        ):
            out[ws].update(pinned=True, pinned_at=at)
    return out


def check_agent_user_group(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A workspace's ``agent_user_group`` checked: uid/gid non-negative integers,
    user/group non-empty names; empty parts dropped (None when nothing is left).

    Raises:
        BadRequest: naming the bad field.
    """
    if not value:
        return None
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key not in AGENT_FIELDS:
            raise BadRequest(
                "invalid agent_user_group", [(f"agent_user_group.{key}", "unknown field")]
            )
        if v is None or v == "":
            continue
        if key in ("agent_uid", "agent_gid"):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**31:
                raise BadRequest(
                    "invalid agent_user_group",
                    [(f"agent_user_group.{key}", "a non-negative integer id")],
                )
        elif not isinstance(v, str) or len(v) > 32 or not v.strip():
            raise BadRequest(
                "invalid agent_user_group",
                [(f"agent_user_group.{key}", "a name of 1 to 32 characters")],
            )
        out[key] = v
    return out or None


def create_workspace(
    s: Session,
    now: float,
    user_id: int | None,
    name: str,
    *,
    agent_user_group: dict[str, Any] | None = None,
    checkpoint_storage_config: dict[str, Any] | None = None,
    default_compute_pool: str | None = None,
    default_aux_pool: str | None = None,
    pools: Sequence[str] = (),
    creator_role: int | None = None,
) -> WorkspaceRow:
    """Create a workspace (its id assigned); its creator gets ``creator_role`` on it.

    Args:
        pools: the cluster's resource pools (to check the default pools).

    Raises:
        BadRequest: a bad name, agent user group or default pool.
        Conflict: the name is taken (case-insensitively).
    """
    check_name(name)
    _unique(s, name)
    ws = WorkspaceRow(
        name=name,
        archived=False,
        immutable=False,
        user_id=user_id,
        created_at=now,
        agent_user_group=check_agent_user_group(agent_user_group),
        checkpoint_storage_config=checkpoint_storage_config or None,
    )
    s.add(ws)
    s.flush()
    set_default_pools(s, ws, default_compute_pool, default_aux_pool, pools)
    if creator_role is not None and user_id is not None:
        s.add(
            RoleAssignmentRow(
                role_id=creator_role, user_id=user_id, workspace_id=ws.id, created_at=now
            )
        )
    return ws


def refuse_immutable(ws: WorkspaceRow, verb: str) -> None:
    """Raises Conflict when ``ws`` is immutable (the Uncategorized workspace)."""
    if ws.immutable:
        raise Conflict(f"workspace {ws.id} ({ws.name}) is immutable and cannot be {verb}")


def refuse_archived(ws: WorkspaceRow) -> None:
    """Raises Conflict when ``ws`` is archived (nothing may change in it)."""
    if ws.archived:
        raise Conflict(
            f"workspace {ws.id} ({ws.name}) is archived; to make changes, first unarchive "
            "the workspace"
        )


def rename_workspace(s: Session, ws: WorkspaceRow, name: str) -> None:
    """Rename ``ws``.

    Raises:
        BadRequest: a bad name. Conflict: immutable, or the name is taken.
    """
    if name == ws.name:
        return
    refuse_immutable(ws, "renamed")
    check_name(name)
    _unique(s, name, other_than=ws.id)
    ws.name = name


def set_default_pools(
    s: Session,
    ws: WorkspaceRow,
    compute: str | None,
    aux: str | None,
    pools: Sequence[str],
) -> None:
    """Set the workspace's default compute and auxiliary pools ("" clears one; None
    leaves it).

    Raises:
        BadRequest: a pool that does not exist or is bound to other workspaces only.
    """
    available = set(available_pools(s, ws.id, pools))
    for attr, value in (("default_compute_pool", compute), ("default_aux_pool", aux)):
        if value is None:
            continue
        if value and value not in available:
            raise BadRequest(
                "unable to bind a resource pool that does not exist or is not available to "
                "the workspace",
                [(attr, f"pool {value!r} is not available to workspace {ws.name!r}")],
            )
        setattr(ws, attr, value or None)


def set_archived(s: Session, workspace_id: int, archived: bool) -> WorkspaceRow:
    """Archive or unarchive a workspace.

    Raises:
        NotFound: no such workspace. Conflict: it is immutable.
    """
    ws = read_workspace(s, workspace_id)
    refuse_immutable(ws, "archived" if archived else "unarchived")
    ws.archived = archived
    return ws


def delete_workspace(s: Session, workspace_id: int) -> None:
    """Delete an empty workspace with its (empty) projects, ended tasks, pins, role
    assignments and pool bindings.

    Raises:
        NotFound: no such workspace.
        Conflict: immutable, holds experiments (move or delete them first) or tasks
            that have not ended (kill them first).
    """
    ws = read_workspace(s, workspace_id)
    refuse_immutable(ws, "deleted")
    projects = select(ProjectRow.id).where(ProjectRow.workspace_id == workspace_id)
    n = s.scalar(
        select(func.count())
        .select_from(ExperimentRow)
        .where(ExperimentRow.project_id.in_(projects))
    )
    if n:
        raise Conflict(
            f"workspace {workspace_id} ({ws.name}) contains {n} experiment(s); move or delete "
            "them first"
        )
    models = s.scalar(
        select(func.count()).select_from(ModelRow).where(ModelRow.workspace_id == workspace_id)
    )
    if models:
        raise Conflict(
            f"workspace {workspace_id} ({ws.name}) contains {models} model(s) of the model "
            "registry; move or delete them first"
        )
    live = s.scalar(
        select(func.count())
        .select_from(TaskRow)
        .where(TaskRow.workspace_id == workspace_id, TaskRow.state.not_in(ENDED_TASK_STATES))
    )
    if live:
        raise Conflict(
            f"workspace {workspace_id} ({ws.name}) has {live} task(s) that have not ended; "
            "kill them first"
        )
    tasks = select(TaskRow.id).where(TaskRow.workspace_id == workspace_id)
    runs = select(AllocationRow.id).where(AllocationRow.task_id.in_(tasks))
    s.execute(delete(TaskLogRow).where(TaskLogRow.allocation_id.in_(runs)))
    s.execute(delete(AllocationRow).where(AllocationRow.task_id.in_(tasks)))
    s.execute(delete(TaskRow).where(TaskRow.workspace_id == workspace_id))
    s.execute(delete(ProjectRow).where(ProjectRow.workspace_id == workspace_id))
    s.execute(delete(WorkspacePinRow).where(WorkspacePinRow.workspace_id == workspace_id))
    s.execute(delete(PoolBindingRow).where(PoolBindingRow.workspace_id == workspace_id))
    for a in s.scalars(
        select(RoleAssignmentRow).where(RoleAssignmentRow.workspace_id == workspace_id)
    ):
        s.delete(a)  # through the ORM: the grants' change flag sees it
    s.delete(ws)


def workspace_storage(ws: WorkspaceRow, cluster: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint storage an experiment of ``ws`` falls back on: the workspace's
    ``checkpoint_storage_config`` merged over the cluster default field by field when
    both have the same type (a different type below is ignored), else the cluster
    default (Determined's order, reference §1.2)."""
    own = ws.checkpoint_storage_config
    if not own:
        return cluster
    if own.get("type") == cluster.get("type"):
        return {**cluster, **own}
    return dict(own)


def workspace_pool(ws: WorkspaceRow, slots: int) -> str:
    """The pool of an experiment or task of ``ws`` that names none: the workspace's
    default compute pool (``slots`` > 0) or auxiliary pool (0 slots), else
    ``default``."""
    chosen = ws.default_compute_pool if slots > 0 else ws.default_aux_pool
    return chosen or "default"


def pin(s: Session, workspace_id: int, user_id: int, pinned: bool, now: float) -> None:
    """Pin (or unpin) a workspace for a user; pinning twice changes nothing.

    Raises:
        NotFound: no such workspace.
    """
    read_workspace(s, workspace_id)
    row = s.get(WorkspacePinRow, (workspace_id, user_id))
    if pinned and row is None:
        s.add(WorkspacePinRow(workspace_id=workspace_id, user_id=user_id, pinned_at=now))
    elif not pinned and row is not None:
        s.delete(row)
