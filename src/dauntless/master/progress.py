"""An experiment's progress as users see it: the searcher's share of finished work plus
the reported progress of the trials still running.

The searcher knows only ended trials (``Searcher.progress()``: for ``single``, ``random``
and ``grid`` the share of planned trials that ended; for the adaptive searchers the
average share per bracket). Each running trial reports the fraction of its training it
has done (``POST /trials/{id}/progress``); that fraction, divided by the number of
trials the search plans, is added, so a one-trial experiment reads 40 % when its trial
is 40 % through, not 0 % until it ends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .db import ExperimentRow, TrialRow
from .states import is_terminal


def planned_trials(searcher: Any, config: dict[str, Any]) -> int:
    """How many trials the search plans in all (at least 1): one for ``single``, the
    grid's points for ``grid``, ``max_trials`` otherwise."""
    space = getattr(searcher, "_space", None)
    size = getattr(space, "size", None)
    if isinstance(size, int) and size > 0:
        return size
    searcher_cfg = config.get("searcher", {})
    if searcher_cfg.get("name") == "single":
        return 1
    n = searcher_cfg.get("max_trials")
    return n if isinstance(n, int) and n > 0 else 1


def experiment_progress(s: Session, exp: ExperimentRow, searcher: Any) -> float:
    """The experiment's progress in 0..1 (see the module docstring).

    Args:
        s: the session of the caller's transaction.
        exp: the experiment.
        searcher: its searcher, restored or just advanced.
    """
    done = float(searcher.progress())
    if done >= 1.0:
        return 1.0
    live = [
        p
        for p, state in s.execute(
            select(TrialRow.progress, TrialRow.state).where(
                TrialRow.experiment_id == exp.id, TrialRow.progress.is_not(None)
            )
        )
        if p is not None and not is_terminal(state)
    ]
    partial = sum(min(max(p, 0.0), 1.0) for p in live) / planned_trials(searcher, exp.config)
    return min(1.0, max(done, done + partial))
