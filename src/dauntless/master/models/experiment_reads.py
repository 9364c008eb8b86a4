"""Experiments: the reads of the experiment routes with a caller's session (what creates
and changes experiments is :mod:`.experiments` and :mod:`.lifecycle`). Rows only: it
imports no other model module, so any of them may import it."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import CheckpointRow, ExperimentRow, ProjectRow, TrialRow, WorkspaceRow
from ..errors import NotFound
from ..states import State


def read_experiment(session: Session, exp_id: int, *, deleted: bool = True) -> ExperimentRow:
    """An experiment.

    Args:
        exp_id: its id.
        deleted: whether a DELETED experiment (its rows kept while its checkpoints are
            deleted) counts as found.

    Raises:
        NotFound: no such experiment (or it is DELETED and ``deleted`` is False).
    """
    exp = session.get(ExperimentRow, exp_id)
    if exp is None or (not deleted and exp.state == "DELETED"):
        raise NotFound(f"experiment {exp_id} not found")
    return exp


def experiments_by_ids(session: Session, ids: list[int]) -> list[ExperimentRow]:
    """The experiments ``ids``, in that order (unknown ids left out)."""
    if not ids:
        return []
    rows = {
        e.id: e for e in session.scalars(select(ExperimentRow).where(ExperimentRow.id.in_(ids)))
    }
    return [rows[i] for i in ids if i in rows]


def experiments_page(
    session: Session,
    archived: bool | None,
    limit: int,
    offset: int,
    visible: set[int] | None = None,
    workspace_id: int | None = None,
    project_id: int | None = None,
    owners: list[str] | None = None,
) -> tuple[list[ExperimentRow], int]:
    """One page of experiments, newest first, and how many matched in all.

    Args:
        archived: True: archived only; False: unarchived only; None: both.
        limit: at most this many experiments.
        offset: skip this many first.
        visible: only those of these workspaces (the caller's view; None: every one),
            applied in SQL so that the count holds only what the caller may see.
        workspace_id, project_id: only those of this workspace or project.
        owners: only those these users (names) own (Determined's ``users`` filter).
    """
    q = select(ExperimentRow)
    if owners is not None:
        q = q.where(ExperimentRow.owner.in_(owners))
    if archived is not None:
        q = q.where(ExperimentRow.archived == archived)
    if project_id is not None:
        q = q.where(ExperimentRow.project_id == project_id)
    if visible is not None or workspace_id is not None:
        projects = select(ProjectRow.id)
        if visible is not None:
            projects = projects.where(ProjectRow.workspace_id.in_(visible))
        if workspace_id is not None:
            projects = projects.where(ProjectRow.workspace_id == workspace_id)
        q = q.where(ExperimentRow.project_id.in_(projects))
    total = (
        session.scalar(
            select(func.count()).select_from(q.with_only_columns(ExperimentRow.id).subquery())
        )
        or 0
    )
    # The page's ids first, then their rows: filtered by project, the planner reads the
    # matching rows through the project index and sorts them; sorting ids only, not rows
    # with their configs, keeps a scoped list as cheap as an unscoped one (issue 30).
    ids = q.with_only_columns(ExperimentRow.id).order_by(ExperimentRow.id.desc())
    page = select(ExperimentRow).where(ExperimentRow.id.in_(ids.limit(limit).offset(offset)))
    exps = session.scalars(page.order_by(ExperimentRow.id.desc()))
    return list(exps), total


def experiment_checkpoints(session: Session, exp_id: int) -> list[CheckpointRow]:
    """The experiment's checkpoints, oldest report first (none for an unknown one)."""
    return list(
        session.scalars(
            select(CheckpointRow)
            .where(CheckpointRow.experiment_id == exp_id)
            .order_by(CheckpointRow.report_time)
        )
    )


def active_experiments(session: Session) -> list[ExperimentRow]:
    """Every ACTIVE experiment."""
    return list(
        session.scalars(select(ExperimentRow).where(ExperimentRow.state == State.ACTIVE.value))
    )


def warm_start_experiments(session: Session, trial_id: object, uuid: object) -> list[int]:
    """The experiments a config's warm-start source (``searcher.source_trial_id``,
    ``source_checkpoint_uuid``) belongs to; none for a source that does not exist (the
    create reports it) or is not an id."""
    out = []
    if isinstance(trial_id, int) and not isinstance(trial_id, bool) and 0 <= trial_id < 2**31:
        exp = session.scalar(select(TrialRow.experiment_id).where(TrialRow.id == trial_id))
        if exp is not None:
            out.append(exp)
    if isinstance(uuid, str) and len(uuid) <= 64:
        exp = session.scalar(select(CheckpointRow.experiment_id).where(CheckpointRow.uuid == uuid))
        if exp is not None:
            out.append(exp)
    return out


def project_places(session: Session, project_ids: set[int]) -> dict[int, dict[str, object]]:
    """Per project id: ``project_name``, ``workspace_id`` and ``workspace_name`` (what
    experiment views add, as Determined's)."""
    if not project_ids:
        return {}
    rows = session.execute(
        select(ProjectRow.id, ProjectRow.name, WorkspaceRow.id, WorkspaceRow.name)
        .join(WorkspaceRow, WorkspaceRow.id == ProjectRow.workspace_id)
        .where(ProjectRow.id.in_(project_ids))
    )
    return {
        pid: {"project_name": pname, "workspace_id": wid, "workspace_name": wname}
        for pid, pname, wid, wname in rows
    }
