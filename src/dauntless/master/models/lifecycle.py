"""Lifecycle of experiments and trials as user actions and searcher errors move it:
pause, activate, cancel, kill (seed 001, reference §7.3-7.4). The allowed moves are the
declarative rules of :mod:`dauntless.master.states`; each function runs in the caller's
write session and wakes the control loop once it commits.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from ..context import MasterContext
from ..db import ExperimentRow, TaskLogRow, TrialRow
from ..states import STOPPING, State, is_terminal
from . import allocations, runs, search, trials

log = logging.getLogger("dauntless.master")


def pause_experiment(s: Session, ctx: MasterContext, exp_id: int) -> None:
    """ACTIVE -> PAUSED: running trials checkpoint at their next chance and exit.

    Raises:
        NotFound: no such experiment.
        IllegalTransition: the experiment cannot be paused in its state.
    """
    exp = search.read_experiment(s, exp_id)
    search.set_experiment_state(ctx, exp, State.PAUSED)
    for trial in trials.live_trials(s, exp_id):
        runs.stop_allocation(s, ctx, trial, kill=False)
    ctx.wake_after_commit(s)


def activate_experiment(s: Session, ctx: MasterContext, exp_id: int) -> None:
    """PAUSED -> ACTIVE: trials are scheduled again and resume from their latest
    checkpoint.

    Raises:
        NotFound: no such experiment.
        IllegalTransition: the experiment cannot be activated in its state.
    """
    exp = search.read_experiment(s, exp_id)
    search.set_experiment_state(ctx, exp, State.ACTIVE)
    ctx.wake_after_commit(s)


def cancel_experiment(s: Session, ctx: MasterContext, exp_id: int, kill: bool = False) -> None:
    """Stop every trial: gracefully (checkpoint, exit) or, with ``kill``, at once.

    The experiment is STOPPING_CANCELED / STOPPING_KILLED until its last trial exits,
    then CANCELED.

    Raises:
        NotFound: no such experiment.
        IllegalTransition: the experiment already ended.
    """
    stopping = State.STOPPING_KILLED if kill else State.STOPPING_CANCELED
    exp = search.read_experiment(s, exp_id)
    if State(exp.state) in (State.STOPPING_KILLED, State.STOPPING_CANCELED) and not kill:
        return
    search.set_experiment_state(ctx, exp, stopping)
    for trial in trials.live_trials(s, exp_id):
        if runs.stop_allocation(s, ctx, trial, kill=kill):
            if State(trial.state) not in STOPPING or kill:
                search.set_trial_state(ctx, trial, stopping)
        elif not is_terminal(trial.state):
            # Nothing runs: it passes through the stopping state at once.
            search.set_trial_state(ctx, trial, stopping)
            search.set_trial_state(ctx, trial, State.CANCELED)
    search.maybe_finish_experiment(s, ctx, exp)
    ctx.wake_after_commit(s)


def kill_trial(s: Session, ctx: MasterContext, trial_id: int) -> None:
    """Kill one trial now; it ends CANCELED and the searcher hears of it.

    Raises:
        NotFound: no such trial.
        IllegalTransition: the trial already ended.
    """
    trial, exp = trials.get_trial(s, trial_id)
    search.set_trial_state(ctx, trial, State.STOPPING_KILLED)
    if not runs.stop_allocation(s, ctx, trial, kill=True) and not is_terminal(trial.state):
        search.trial_canceled(s, ctx, exp, trial)
    ctx.wake_after_commit(s)


def searcher_failed(
    s: Session, ctx: MasterContext, exp: ExperimentRow, why: str, trial: TrialRow | None = None
) -> None:
    """A searcher error (e.g. the ASHA metric is missing, a custom search method
    raised): the experiment errors, and the reason is written into the trial's log
    (``det trial logs``; None: every live trial's)."""
    log.error("experiment %s: searcher error: %s", exp.id, why)
    for t in [trial] if trial is not None else trials.live_trials(s, exp.id):
        alloc = allocations.live_allocation(s, t.id)
        s.add(
            TaskLogRow(
                trial_id=t.id,
                allocation_id=alloc.group_id if alloc is not None else "master",
                seq=None,
                timestamp=ctx.clock(),
                stdtype="stderr",
                rank_id=None,
                log=f"searcher error (the experiment stops): {why}\n",
            )
        )
    if State(exp.state) not in (State.ACTIVE, State.PAUSED):
        return
    search.set_experiment_state(ctx, exp, State.STOPPING_ERROR)
    for t in trials.live_trials(s, exp.id):
        if runs.stop_allocation(s, ctx, t, kill=True):
            search.set_trial_state(ctx, t, State.STOPPING_ERROR)
        elif not is_terminal(t.state):
            search.set_trial_state(ctx, t, State.STOPPING_ERROR)
            search.set_trial_state(ctx, t, State.ERROR)
    search.maybe_finish_experiment(s, ctx, exp)


search.searcher_error_handlers.append(searcher_failed)
