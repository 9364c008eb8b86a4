"""User actions on experiments and trials: pause, activate, cancel, kill, archive,
unarchive, delete, edits, and checkpoint garbage collection (seed 001, reference §7.3-7.4).

These are methods of :class:`~dauntless.master.manager.ExperimentManager` (mixed in), each
one transaction under the write lock. Storage is touched only after the transaction that
decided it commits.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from dauntless.config import parse_experiment_config
from dauntless.storage import build_storage

from .db import (
    AllocationRow,
    CheckpointRow,
    ExperimentRow,
    MetricRow,
    TaskLogRow,
    TrialRow,
)
from .errors import Conflict  # re-exported: routes import it here
from .gc import CheckpointFacts, GCPolicy, checkpoints_to_delete
from .models import allocations
from .states import STOPPING, State, is_terminal

if TYPE_CHECKING:
    from .manager import ExperimentManager

log = logging.getLogger("dauntless.master")


class LifecycleMixin:
    """Experiment and trial actions; see the module docstring."""

    # ------------------------------------------------------------------ helpers

    def _exp(self: ExperimentManager, s: Session, exp_id: int) -> ExperimentRow:
        from .errors import NotFound

        exp = s.get(ExperimentRow, exp_id)
        if exp is None or exp.state == State.DELETED.value:
            raise NotFound(f"experiment {exp_id} not found")
        return exp

    def _live_trials(self: ExperimentManager, s: Session, exp_id: int) -> list[TrialRow]:
        return [
            t
            for t in s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id))
            if not is_terminal(t.state)
        ]

    def _stop_allocation(
        self: ExperimentManager, s: Session, trial: TrialRow, *, kill: bool
    ) -> bool:
        """Ask every part of the trial's allocation to stop; True if one still runs.

        Parts not yet handed to their agent end at once (exit 0, as if preempted).
        """
        alloc = self._live_allocation(s, trial.id)
        if alloc is None:
            return False
        live = [p for p in allocations.parts(s, alloc.group_id) if p.state != "TERMINATED"]
        for part in live:
            if kill:
                part.kill_requested = True
            else:
                part.preempt_requested = True
        for part in live:
            if part.state == "ASSIGNED":
                part.preempt_requested = True
                self._terminate(s, part, 0, "stopped before it started")
        return any(p.state != "TERMINATED" for p in live)

    # ------------------------------------------------------------------ experiment actions

    def pause_experiment(self: ExperimentManager, exp_id: int) -> None:
        """ACTIVE -> PAUSED: running trials checkpoint at their next chance and exit."""
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            self._set_experiment_state(exp, State.PAUSED)
            for trial in self._live_trials(s, exp_id):
                self._stop_allocation(s, trial, kill=False)
        self.wake.set()

    def activate_experiment(self: ExperimentManager, exp_id: int) -> None:
        """PAUSED -> ACTIVE: trials are scheduled again and resume from their latest
        checkpoint."""
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            self._set_experiment_state(exp, State.ACTIVE)
        self.wake.set()

    def cancel_experiment(self: ExperimentManager, exp_id: int, kill: bool = False) -> None:
        """Stop every trial: gracefully (checkpoint, exit) or, with ``kill``, at once.

        The experiment is STOPPING_CANCELED / STOPPING_KILLED until its last trial exits,
        then CANCELED.
        """
        stopping = State.STOPPING_KILLED if kill else State.STOPPING_CANCELED
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            if State(exp.state) in (State.STOPPING_KILLED, State.STOPPING_CANCELED) and not kill:
                return
            self._set_experiment_state(exp, stopping)
            for trial in self._live_trials(s, exp_id):
                if self._stop_allocation(s, trial, kill=kill):
                    if State(trial.state) not in STOPPING or kill:
                        self._set_trial_state(trial, stopping)
                elif not is_terminal(trial.state):
                    # Nothing runs: it passes through the stopping state at once.
                    self._set_trial_state(trial, stopping)
                    self._set_trial_state(trial, State.CANCELED)
            self._maybe_finish_experiment(s, exp)
        self.wake.set()

    def archive_experiment(self: ExperimentManager, exp_id: int, archived: bool) -> None:
        """Hide (or show again) a finished experiment; every record is kept.

        Raises:
            Conflict: the experiment is not COMPLETED, CANCELED or ERROR.
        """
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            if State(exp.state) not in (State.COMPLETED, State.CANCELED, State.ERROR):
                verb = "archived" if archived else "unarchived"
                raise Conflict(
                    f"experiment {exp_id} is {exp.state}; only COMPLETED, CANCELED or ERROR "
                    f"experiments can be {verb}"
                )
            exp.archived = archived

    def patch_experiment(
        self: ExperimentManager,
        exp_id: int,
        name: str | None = None,
        description: str | None = None,
        gc_policy: dict[str, int] | None = None,
        resources: dict[str, Any] | None = None,
    ) -> None:
        """Edit name / description / scheduling resources (priority, weight, max_slots),
        or change the GC policy and collect at once.

        Raises:
            BadRequest: an empty name or a negative GC count.
        """
        from .errors import BadRequest

        if name is not None and not name.strip():
            raise BadRequest("name must not be empty", [("name", "a non-empty string")])
        policy = None
        if gc_policy is not None:
            try:
                policy = GCPolicy(**gc_policy)
            except (TypeError, ValueError) as exc:
                raise BadRequest(str(exc), [("checkpoint_storage", str(exc))]) from None
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            if name is not None:
                exp.name = name
            if description is not None:
                exp.description = description
            if resources:
                config = dict(exp.config)
                config["resources"] = {**config["resources"], **resources}
                try:
                    self._configs[exp.id] = parse_experiment_config(config)
                except ValueError as exc:
                    raise BadRequest(str(exc), [("resources", str(exc))]) from None
                exp.config = config
                self.wake.set()
            if policy is not None:
                config = dict(exp.config)
                storage = dict(config["checkpoint_storage"])
                storage.update(gc_policy or {})
                config["checkpoint_storage"] = storage
                exp.config = config
                self._configs[exp.id] = parse_experiment_config(config)
                doomed = self._collect(s, exp)
        if policy is not None:
            self._delete_from_storage(exp_id, doomed)

    def delete_experiment(self: ExperimentManager, exp_id: int) -> None:
        """Delete a finished experiment: its checkpoints from storage, then its rows.

        A checkpoint that cannot be removed from storage is logged and does not stop the
        deletion (seed 001: GC never blocks deleting an experiment).

        Raises:
            IllegalTransition: the experiment is not in a terminal state.
        """
        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            self._set_experiment_state(exp, State.DELETING)
            config = dict(exp.config)
            uuids = [
                c.uuid
                for c in s.scalars(
                    select(CheckpointRow).where(
                        CheckpointRow.experiment_id == exp_id, CheckpointRow.state != "DELETED"
                    )
                )
            ]
        self._remove_checkpoints(config, uuids)
        try:
            with self.db.write() as s:
                trial_ids = list(
                    s.scalars(select(TrialRow.id).where(TrialRow.experiment_id == exp_id))
                )
                if trial_ids:
                    s.execute(delete(TaskLogRow).where(TaskLogRow.trial_id.in_(trial_ids)))
                    s.execute(delete(MetricRow).where(MetricRow.trial_id.in_(trial_ids)))
                    s.execute(delete(AllocationRow).where(AllocationRow.trial_id.in_(trial_ids)))
                s.execute(delete(CheckpointRow).where(CheckpointRow.experiment_id == exp_id))
                s.execute(delete(TrialRow).where(TrialRow.experiment_id == exp_id))
                gone = s.get(ExperimentRow, exp_id)
                if gone is not None:
                    s.delete(gone)
            self._configs.pop(exp_id, None)
            log.info("deleted experiment %s", exp_id)
        except Exception:
            log.exception("deleting the rows of experiment %s failed", exp_id)
            with self.db.write() as s:
                failed = s.get(ExperimentRow, exp_id)
                if failed is not None:
                    self._set_experiment_state(failed, State.DELETE_FAILED)
            raise

    # ------------------------------------------------------------------ trial actions

    def kill_trial(self: ExperimentManager, trial_id: int) -> None:
        """Kill one trial now; it ends CANCELED and the searcher hears of it.

        Raises:
            IllegalTransition: the trial already ended.
        """
        with self.db.write() as s:
            trial, exp = self._get_trial(s, trial_id)
            self._set_trial_state(trial, State.STOPPING_KILLED)
            if not self._stop_allocation(s, trial, kill=True) and not is_terminal(trial.state):
                self._trial_canceled(s, exp, trial)
        self.wake.set()

    def _trial_canceled(
        self: ExperimentManager, s: Session, exp: ExperimentRow, trial: TrialRow
    ) -> None:
        from dauntless.searcher import ExitedReason

        self._set_trial_state(trial, State.CANCELED)
        if State(exp.state) in STOPPING:
            self._maybe_finish_experiment(s, exp)
            return
        searcher = self._searcher(exp)
        ops = searcher.on_trial_exited_early(trial.request_id, ExitedReason.USER_CANCELED)
        ops += searcher.on_trial_closed(trial.request_id)
        self._apply(s, exp, searcher, ops)

    # ------------------------------------------------------------------ checkpoint GC

    def _collect(self: ExperimentManager, s: Session, exp: ExperimentRow) -> list[str]:
        """Mark the checkpoints the GC policy drops, and uploads that died with their
        trial, as DELETING; returns their uuids.

        Only checkpoints of finished trials are considered, so a running trial never loses
        the checkpoint it would resume from.
        """
        cfg = self.experiment_config(exp)
        storage = cfg.checkpoint_storage
        if storage is None:
            return []
        live_ckpts = s.scalars(
            select(CheckpointRow).where(
                CheckpointRow.experiment_id == exp.id,
                CheckpointRow.state.in_(("COMPLETED", "UPLOADING")),
            )
        ).all()
        if not live_ckpts:  # nothing to collect: the trials need not be read
            return []
        # States only: every trial ended calls this, so whole rows (JSON columns) of a
        # long search would be decoded again and again (issue 19).
        finished = {
            trial_id
            for trial_id, state in s.execute(
                select(TrialRow.id, TrialRow.state).where(TrialRow.experiment_id == exp.id)
            )
            if is_terminal(state)
        }
        if not finished:
            return []
        ckpts: list[CheckpointRow] = []
        orphans: list[CheckpointRow] = []
        for c in live_ckpts:
            if c.trial_id not in finished:
                continue
            # An upload its trial never finished (the process died): its objects go.
            (orphans if c.state == "UPLOADING" else ckpts).append(c)
        for c in orphans:
            c.state = "DELETING"
        self.note_orphaned_uploads([c.uuid for c in orphans])
        if not ckpts:
            return sorted(c.uuid for c in orphans)
        metric = cfg.searcher.metric
        vals: dict[tuple[int, int], float] = {}
        for m in s.scalars(
            select(MetricRow).where(
                MetricRow.trial_id.in_(finished), MetricRow.kind == "validation"
            )
        ):
            v = m.values.get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                vals[(m.trial_id, m.total_batches)] = float(v)
        facts = [
            CheckpointFacts(
                c.uuid, c.trial_id, c.total_batches, vals.get((c.trial_id, c.total_batches))
            )
            for c in ckpts
        ]
        policy = GCPolicy(
            storage.save_experiment_best, storage.save_trial_best, storage.save_trial_latest
        )
        doomed = checkpoints_to_delete(facts, policy, cfg.searcher.smaller_is_better)
        doomed -= self._warm_start_sources(s)
        for c in ckpts:
            if c.uuid in doomed:
                # DELETED once the files are gone (checkpoint_gc.process_deletions).
                c.state = "DELETING"
        return sorted(set(doomed) | {c.uuid for c in orphans})

    def _delete_from_storage(self: ExperimentManager, exp_id: int, uuids: list[str]) -> None:
        """Try to delete these DELETING checkpoints now; failures are retried by the
        master's loop (checkpoint_gc)."""
        if uuids:
            self.process_deletions(experiment_id=exp_id)

    @staticmethod
    def _remove_checkpoints(config: dict[str, Any], uuids: list[str]) -> None:
        if not uuids:
            return
        try:
            storage = build_storage(parse_experiment_config(config).checkpoint_storage)
        except Exception:
            log.exception("cannot open checkpoint storage to delete %d checkpoints", len(uuids))
            return
        for uuid in uuids:
            try:
                storage.delete(uuid)
            except Exception:
                log.exception("could not delete checkpoint %s from storage", uuid)
