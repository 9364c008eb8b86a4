"""Trials: reads of ``TrialRow`` with a caller's session."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..db import TrialRow
from ..errors import NotFound
from ..states import State


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
