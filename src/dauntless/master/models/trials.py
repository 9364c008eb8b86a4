"""Trials: reads and small edits of ``TrialRow`` with a caller's session (what moves a
trial through its states is :mod:`.search`, :mod:`.runs` and :mod:`.lifecycle`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db import ExperimentRow, TrialRow
from ..errors import BadRequest, NotFound
from ..states import State, is_terminal


def searcher_operation(session: Session, trial_id: int) -> dict[str, Any]:
    """The trial's next searcher operation (docs/protocol.md, harness routes):
    ``{"op": {"length": batches} | None, "completed": bool}``; ``completed`` once the
    searcher closed the trial or it is no longer ACTIVE and no operation is open.

    Raises:
        NotFound: no such trial.
    """
    trial = session.get(TrialRow, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    op_len, done = trial.searcher_op_length, trial.searcher_completed_length
    if op_len is not None and (done is None or op_len > done):
        return {"op": {"length": op_len}, "completed": False}
    if trial.searcher_closed or trial.state != State.ACTIVE.value:
        return {"op": None, "completed": True}
    return {"op": None, "completed": False}


def get_trial(session: Session, trial_id: int) -> tuple[TrialRow, ExperimentRow]:
    """A trial and its experiment.

    Raises:
        NotFound: no such trial.
    """
    trial = session.get(TrialRow, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    exp = session.get(ExperimentRow, trial.experiment_id)
    assert exp is not None  # FK guarantees it
    return trial, exp


def live_trials(session: Session, exp_id: int) -> list[TrialRow]:
    """The experiment's trials that have not ended."""
    return [
        t
        for t in session.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id))
        if not is_terminal(t.state)
    ]


def trial_by_request(session: Session, exp_id: int, request_id: str) -> TrialRow:
    """The experiment's trial the searcher knows as ``request_id``.

    Raises:
        RuntimeError: no such trial (the searcher's state and the rows disagree).
    """
    trial = session.scalar(
        select(TrialRow).where(TrialRow.experiment_id == exp_id, TrialRow.request_id == request_id)
    )
    if trial is None:
        raise RuntimeError(f"searcher named unknown trial request {request_id}")
    return trial


def report_early_exit(session: Session, trial_id: int, reason: str) -> None:
    """Mark that the trial will exit early (``INVALID_HP``); applied at its exit.

    Raises:
        BadRequest: an unknown reason.
        NotFound: no such trial.
    """
    if reason not in ("INVALID_HP", "EXITED_REASON_INVALID_HP"):
        raise BadRequest(f"unknown early-exit reason {reason!r}", [("reason", "INVALID_HP")])
    trial, _ = get_trial(session, trial_id)
    trial.early_exit_reason = "INVALID_HP"
