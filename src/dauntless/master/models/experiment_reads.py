"""Experiments: the reads of the experiment routes with a caller's session (what creates
and changes experiments is :mod:`.experiments` and :mod:`.lifecycle`). Rows only: it
imports no other model module, so any of them may import it."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import CheckpointRow, ExperimentRow
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


def experiments_page(
    session: Session, archived: bool | None, limit: int, offset: int
) -> tuple[list[ExperimentRow], int]:
    """One page of experiments, newest first, and how many matched in all.

    Args:
        archived: True: archived only; False: unarchived only; None: both.
        limit: at most this many experiments.
        offset: skip this many first.
    """
    q = select(ExperimentRow)
    if archived is not None:
        q = q.where(ExperimentRow.archived == archived)
    total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    exps = session.scalars(q.order_by(ExperimentRow.id.desc()).limit(limit).offset(offset))
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
