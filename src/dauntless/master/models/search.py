"""An experiment's search: its searcher restored from the rows, searcher operations
applied to trials, state changes checked against the declarative rules of
:mod:`dauntless.master.states`, and the experiment's end once its search is over.

Every function runs in the caller's write session; the searcher's snapshot, the trials
and the experiment change together (seed 001, reference §7).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, object_session

from dauntless.config import searcher_length
from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
    restore_searcher,
)

from ..context import BoundedDict, MasterContext
from ..custom_searchers import method_factory
from ..db import CheckpointRow, ExperimentRow, ModelDefinitionRow, TrialRow
from ..errors import BadRequest, NotFound
from ..progress import experiment_progress
from ..states import STOPPING, State, check_transition, is_terminal
from . import allocations, experiment_index, searcher_log, trials

log = logging.getLogger("dauntless.master")


def read_experiment(s: Session, exp_id: int) -> ExperimentRow:
    """A live (not deleted) experiment.

    Raises:
        NotFound: no such experiment, or it was deleted.
    """
    exp = s.get(ExperimentRow, exp_id)
    if exp is None or exp.state == State.DELETED.value:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


# ---------------------------------------------------------------- restored searchers
# Issue 35: a model-based searcher restores by replaying its sampler's log (O(trials)
# sampler calls), so the master keeps the searcher it last stored for each experiment and
# takes it again when the stored snapshot is still the one it made; any other case (a
# rolled-back transaction, another process's write, a searcher changed without being
# stored) restores from the snapshot. A searcher taken for changes is held by that
# caller alone until ``apply`` stores it back.

_SEARCHERS: weakref.WeakKeyDictionary[MasterContext, dict[int, Any]] = weakref.WeakKeyDictionary()
_SEARCHERS_LOCK = threading.Lock()

#: Called as ``handler(s, ctx, exp, why)`` when a searcher reports an error of its own
#: code (a custom search method raised): :mod:`.lifecycle` registers
#: ``searcher_failed`` here, since it imports this module and cannot be imported by it.
searcher_error_handlers: list[Callable[[Session, MasterContext, ExperimentRow, str], None]] = []


#: Experiments whose searchers the master keeps (issue 37: a searcher holds its live
#: trials' records, its method's state and up to RECENTLY_ENDED_KEPT ended records, so
#: the cache is bounded; an experiment dropped from it restores its searcher from the
#: rows when next needed).
KEPT_SEARCHERS = 64


def _cache(ctx: MasterContext) -> dict[int, Any]:
    with _SEARCHERS_LOCK:
        return _SEARCHERS.setdefault(ctx, BoundedDict(KEPT_SEARCHERS))


def searcher_for(ctx: MasterContext, exp: ExperimentRow, *, read_only: bool = False):
    """The experiment's searcher, as its stored snapshot and events say
    (:mod:`.searcher_log`), journaling its events from now on.

    ``read_only``: the caller only reads it (``progress()``, pending events); the
    master keeps it for the next caller instead of handing it over for changes.

    Raises:
        MethodLoadError: a custom search method run in the master cannot be loaded.
    """
    cache = _cache(ctx)
    config = ctx.experiment_config(exp)
    with _SEARCHERS_LOCK:  # taken out: no other caller changes it while it is checked
        kept = cache.pop(exp.id, None)
    searcher = None
    if kept is not None:
        kept_config, kept_seq, candidate = kept
        # The same config (``det experiment continue`` may change it) and the state the
        # database holds: every stored change advances ``searcher_seq`` (issue 37: a
        # comparison of snapshots cost O(trials) per event).
        if kept_config == config and kept_seq == exp.searcher_seq:
            searcher = candidate
    if searcher is None:
        factory = method_factory(exp.id, config, lambda: _context_of(ctx, exp.id))
        searcher = restore_searcher(config, exp.searcher_state, method=factory)
        if searcher.archivable:
            searcher.archive_ended(_ended_lookup(ctx, exp))
        if exp.searcher_seq > exp.searcher_snapshot_seq:
            session = object_session(exp)
            if session is None:
                raise RuntimeError(f"experiment {exp.id}: its row is not in a session")
            searcher.replay_events(searcher_log.events_after(session, exp))
        if searcher.replayable:
            searcher.start_journal()
    elif searcher.archivable:  # this caller's session, for its events' lookups
        searcher.archive_ended(_ended_lookup(ctx, exp))
    if read_only:  # put back for the next caller (readers only call progress() & co.)
        with _SEARCHERS_LOCK:
            cache.setdefault(exp.id, (config, exp.searcher_seq, searcher))
    return searcher


def _ended_lookup(ctx: MasterContext, exp: ExperimentRow) -> Callable[[str], Any]:
    """A lookup of the experiment's ended trials' searcher records (issue 37 scope 2),
    in the caller's session (which sees the records its own transaction wrote) while
    that is alive, else in a read session of its own. It holds neither the session, the
    row nor the context (a kept searcher outlives the first two, and its cache is weakly
    keyed by the last)."""
    exp_id = exp.id
    session = object_session(exp)
    ref = None if session is None else weakref.ref(session)
    ctx_ref = weakref.ref(ctx)  # the cache of searchers is weakly keyed by the context

    def lookup(request_id: str) -> Any:
        current = None if ref is None else ref()
        if current is not None and current.in_transaction():
            return searcher_log.ended_record(current, exp_id, request_id)
        context = ctx_ref()
        if context is None:
            raise RuntimeError(f"experiment {exp_id}: its master has stopped")
        with context.db.read() as s:
            return searcher_log.ended_record(s, exp_id, request_id)

    return lookup


def _context_of(ctx: MasterContext, exp_id: int) -> bytes | None:
    with ctx.db.read() as s:
        row = s.get(ModelDefinitionRow, exp_id)
        return None if row is None else bytes(row.content)


def forget_searcher(ctx: MasterContext, exp_id: int) -> None:
    """Drop the experiment's kept searcher, if any (issue 37: an ended search's
    searcher is rarely needed again; a later caller restores it from the rows)."""
    cache = _cache(ctx)
    with _SEARCHERS_LOCK:
        cache.pop(exp_id, None)


def _keep(ctx: MasterContext, exp: ExperimentRow, searcher: Any) -> None:
    cache = _cache(ctx)
    config = ctx.experiment_config(exp)
    with _SEARCHERS_LOCK:
        cache[exp.id] = (config, exp.searcher_seq, searcher)


def set_experiment_state(ctx: MasterContext, exp: ExperimentRow, state: State) -> None:
    """Move an experiment to ``state`` (stamping its end time when terminal), queueing
    the events of webhooks triggered by it (:mod:`dauntless.master.webhooks`).

    Raises:
        IllegalTransition: the rules of :mod:`dauntless.master.states` refuse it.
    """
    check_transition("experiment", exp.state, state)
    exp.state = state.value
    if is_terminal(state):
        exp.end_time = ctx.clock()
        forget_searcher(ctx, exp.id)
    s = object_session(exp)
    if s is not None:  # webhooks' state-change triggers, queued in this transaction
        ctx.webhooks.on_experiment_state(s, exp, state.value)


def set_trial_state(ctx: MasterContext, trial: TrialRow, state: State) -> None:
    """Move a trial to ``state``; a trial that ends queues its experiment for
    checkpoint GC.

    Raises:
        IllegalTransition: the rules of :mod:`dauntless.master.states` refuse it.
    """
    check_transition("trial", trial.state, state)
    trial.state = state.value
    if is_terminal(state):
        trial.end_time = ctx.clock()
        ctx.gc_due.add(trial.experiment_id)


def apply(
    s: Session,
    ctx: MasterContext,
    exp: ExperimentRow,
    searcher,
    ops: Iterable[Operation],
    known: Iterable[TrialRow] = (),
) -> None:
    """Apply searcher operations in order, feeding follow-up events back in; then store
    the searcher's snapshot and the experiment's progress, and end the experiment when
    its search is over.

    Args:
        known: trials of ``exp`` this transaction already holds (the trial whose event
            produced ``ops``). An operation on one of them, or on a trial created here,
            uses that row instead of selecting it again by its request id: one
            statement less, and the row's changes then go out in one UPDATE instead of
            one per operation (the select flushed what came before it).
    """
    queue: deque[Operation] = deque(ops)
    held: dict[str, TrialRow] = {t.request_id: t for t in known if t.experiment_id == exp.id}

    def by_request(request_id: str) -> TrialRow:
        trial = held.get(request_id)
        if trial is None:
            trial = held[request_id] = trials.trial_by_request(s, exp.id, request_id)
        return trial

    while queue:
        op = queue.popleft()
        if isinstance(op, Create):
            parent = None if op.parent_request_id is None else by_request(op.parent_request_id)
            trial = TrialRow(
                experiment_id=exp.id,
                request_id=op.request_id,
                state=State.ACTIVE.value,
                hparams=op.hparams,
                seed=op.seed,
                restarts=0,
                run_id=0,
                total_batches=0,
                searcher_closed=False,
                start_time=ctx.clock(),
                parent_id=None if parent is None else parent.id,
                warm_start_checkpoint=None if parent is None else warm_start_checkpoint(s, parent),
            )
            # The new trial's own first operation goes into its INSERT (issue 37: an
            # UPDATE per trial fewer); every other follow-up is queued as before. The
            # searcher's events are the same: only the row is written once.
            follow = list(searcher.on_trial_created(op.request_id))
            while (
                follow
                and isinstance(follow[0], ValidateAfter)
                and follow[0].request_id == op.request_id
            ):
                trial.searcher_op_length = follow.pop(0).length
            s.add(trial)
            s.flush()
            held[op.request_id] = trial
            experiment_index.note_trial_created(s, exp, trial)
            queue.extend(follow)
        elif isinstance(op, ValidateAfter):
            trial = by_request(op.request_id)
            trial.searcher_op_length = op.length
        elif isinstance(op, Close):
            trial = by_request(op.request_id)
            trial.searcher_closed = True
            alloc = None if is_terminal(trial.state) else allocations.live_allocation(s, trial.id)
            if not is_terminal(trial.state) and alloc is None:
                set_trial_state(ctx, trial, State.COMPLETED)
                queue.extend(searcher.on_trial_closed(op.request_id))
            elif alloc is not None and searcher_length(ctx.experiment_config(exp)) is None:
                # 0.38: the trial is not polling searcher operations; stop it through
                # the preemption path (it checkpoints and exits; then COMPLETED).
                allocations.signal_stop(s, alloc)
        elif isinstance(op, Shutdown):
            exp.searcher_shutdown = True
        else:
            raise TypeError(f"unknown searcher operation {op!r}")
    # The progress first: its read flushes what came before, and the experiment's new
    # progress then goes out in the same UPDATE as its searcher_seq (issue 37: one
    # statement per event fewer). Storing the log changes neither input of it.
    exp.progress = experiment_progress(s, exp, searcher, ctx.experiment_config(exp))
    searcher_log.store(s, exp, searcher)
    _keep(ctx, exp, searcher)
    error = searcher.method_error
    if error is not None and State(exp.state) in (State.ACTIVE, State.PAUSED):
        for handler in searcher_error_handlers:
            handler(s, ctx, exp, f"the custom search method failed:\n{error}")
    maybe_finish_experiment(s, ctx, exp)


def warm_start_checkpoint(s: Session, parent: TrialRow) -> str | None:
    """The checkpoint a clone of ``parent`` starts from: the parent's checkpoint at the
    length it last validated for the searcher (the end of its PBT round), else its
    latest; None when it has none (the clone then starts from scratch)."""
    if parent.searcher_completed_length is not None:
        uuid_ = s.scalars(
            select(CheckpointRow.uuid).where(
                CheckpointRow.trial_id == parent.id,
                CheckpointRow.total_batches == parent.searcher_completed_length,
                CheckpointRow.state.in_(("COMPLETED", "UPLOADING")),
            )
        ).first()
        if uuid_ is not None:
            return str(uuid_)
    if parent.latest_checkpoint is None:
        log.warning("trial %s has no checkpoint: its clone starts from scratch", parent.id)
    return parent.latest_checkpoint


def maybe_finish_experiment(s: Session, ctx: MasterContext, exp: ExperimentRow) -> None:
    """End a stopping experiment, or one whose searcher shut down, once every trial has
    ended: CANCELED after a cancel or kill, ERROR after a searcher error or when every
    trial failed, else COMPLETED."""
    stopping = State(exp.state) in STOPPING
    if is_terminal(exp.state) or not (exp.searcher_shutdown or stopping):
        return
    # Whether a trial still runs, without reading the ended ones (issue 37: a stopping
    # search calls this at every trial's end).
    terminal = [st.value for st in State if is_terminal(st)]
    live = s.scalars(
        select(TrialRow.id)
        .where(TrialRow.experiment_id == exp.id, TrialRow.state.not_in(terminal))
        .limit(1)
    ).first()
    if live is not None:
        return
    counts = dict(
        s.execute(
            select(TrialRow.state, func.count())
            .where(TrialRow.experiment_id == exp.id)
            .group_by(TrialRow.state)
        ).all()
    )
    final = {
        State.STOPPING_CANCELED: State.CANCELED,
        State.STOPPING_KILLED: State.CANCELED,
        State.STOPPING_ERROR: State.ERROR,
    }.get(State(exp.state), State.COMPLETED)
    if final is State.COMPLETED and counts and set(counts) == {State.ERROR.value}:
        final = State.ERROR
    if final is State.COMPLETED and State(exp.state) is State.PAUSED:
        # Paused after its last trials had done their work (the pause reached them
        # as they finished): nothing is left to resume, so it completes.
        set_experiment_state(ctx, exp, State.STOPPING_COMPLETED)
    set_experiment_state(ctx, exp, final)
    exp.progress = 1.0 if final is State.COMPLETED else exp.progress
    log.info("experiment %s is %s", exp.id, final.value)


def trial_canceled(s: Session, ctx: MasterContext, exp: ExperimentRow, trial: TrialRow) -> None:
    """A trial ends CANCELED; the searcher hears of it unless the whole experiment is
    stopping (which then may end)."""
    set_trial_state(ctx, trial, State.CANCELED)
    if State(exp.state) in STOPPING:
        maybe_finish_experiment(s, ctx, exp)
        return
    searcher = searcher_for(ctx, exp)
    ops = searcher.on_trial_exited_early(trial.request_id, ExitedReason.USER_CANCELED)
    ops += searcher.on_trial_closed(trial.request_id)
    apply(s, ctx, exp, searcher, ops)


def complete_operation(
    s: Session, ctx: MasterContext, trial_id: int, length: int, metric: float
) -> dict[str, Any]:
    """Record that a trial validated at ``length`` batches with the searcher metric.

    Returns:
        The trial's next searcher operation as ``GET /trials/{id}/searcher/operation``
        answers it after the completion (the trial need not ask; issue 19).

    Raises:
        NotFound: no such trial.
        BadRequest: ``length`` is not the operation the trial was given.
    """
    trial, exp = trials.get_trial(s, trial_id)
    done = trial.searcher_completed_length
    if done is not None and length <= done:
        return trials.searcher_operation(s, trial_id)  # a retried report
    if trial.searcher_op_length is None or length != trial.searcher_op_length:
        raise BadRequest(
            f"trial {trial_id} was asked to train to {trial.searcher_op_length} "
            f"batches, not {length}",
            [("op.length", f"expected {trial.searcher_op_length}")],
        )
    trial.searcher_completed_length = length
    searcher = searcher_for(ctx, exp)
    metrics = None
    if searcher.wants_validation_metrics:  # several objectives: the whole validation
        metrics = trials.validation_metrics_at(s, trial_id, length)
    ops = searcher.on_validation_completed(trial.request_id, float(metric), length, metrics)
    apply(s, ctx, exp, searcher, ops, known=(trial,))
    return trials.searcher_operation(s, trial_id)
