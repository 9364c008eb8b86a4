"""Experiments: the reads of the experiment routes with a caller's session (what creates
and changes experiments is :mod:`.experiments` and :mod:`.lifecycle`). Rows only: it
imports no other model module, so any of them may import it."""

from __future__ import annotations

from sqlalchemy import select
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
