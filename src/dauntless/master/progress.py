"""An experiment's progress as users see it: the searcher's share of finished work plus
the reported progress of the trials still running.

The searcher knows only ended trials (``Searcher.progress()``: for ``single``, ``random``
and ``grid`` the share of planned trials that ended; for the adaptive searchers the
average share per bracket). Each running trial reports the fraction of its training it
has done (``POST /trials/{id}/progress``); that fraction, divided by the number of
trials the search plans (:func:`dauntless.searcher.planned_trials`, the one definition
that the preview and the create checks use too: ASHA's brackets' trials), is added, so a
one-trial experiment reads 40 % when its trial is 40 % through, not 0 % until it ends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import ExperimentConfig
from dauntless.searcher import planned_trials

from .db import ExperimentRow, TrialRow
from .states import State, is_terminal


def experiment_progress(
    s: Session, exp: ExperimentRow, searcher: Any, config: ExperimentConfig
) -> float:
    """The experiment's progress in 0..1 (see the module docstring).

    Args:
        s: the session of the caller's transaction.
        exp: the experiment.
        searcher: its searcher, restored or just advanced.
        config: the experiment's parsed config.
    """
    done = float(searcher.progress())
    if done >= 1.0:
        return 1.0
    # The live trials' reports only (issue 37: through the (experiment_id, state)
    # index, so the cost does not grow with the trials that ended).
    terminal = [st.value for st in State if is_terminal(st)]
    live = [
        p
        for (p,) in s.execute(
            select(TrialRow.progress).where(
                TrialRow.experiment_id == exp.id,
                TrialRow.state.not_in(terminal),
                TrialRow.progress.is_not(None),
            )
        )
        if p is not None
    ]
    partial = sum(min(max(p, 0.0), 1.0) for p in live) / max(planned_trials(config, searcher), 1)
    return min(1.0, max(done, done + partial))
