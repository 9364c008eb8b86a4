"""The experiment manager: turns searcher operations into trials, trials into
allocations on agents, and trial exits back into searcher events.

Every method runs one database transaction under the write lock
(:meth:`Database.write`), so the searcher snapshot, trials and allocations always change
together; nothing lives only in memory except caches of parsed configs, which are rebuilt
from the database after a restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import (
    ConfigError,
    ExperimentConfig,
    MasterConfig,
    SharedFSStorage,
    parse_experiment_config,
    searcher_length,
)
from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    SearcherConfigError,
    Shutdown,
    ValidateAfter,
    make_searcher,
    restore_searcher,
)
from dauntless.storage import build_storage

from . import scheduling
from .auth import hash_token, new_token
from .checkpoint_gc import CheckpointDeletionMixin
from .cluster import ClusterMixin
from .compat038 import Compat038Mixin, prepare_raw_config
from .db import (
    AgentRow,
    AllocationRow,
    CheckpointRow,
    Database,
    ExperimentRow,
    MetricRow,
    ModelDefinitionRow,
    TaskLogRow,
    TaskRow,
    TrialRow,
    UserRow,
)
from .environments import check_pool_can_run, task_environment
from .errors import MAX_CONTEXT_BYTES, BadRequest, NotFound  # re-exported: routes import them here
from .group_commit import GroupCommit
from .lifecycle import LifecycleMixin
from .metric_store import finite_json, store_training_rows, training_rows
from .models import allocations, trials
from .progress import experiment_progress
from .states import STOPPING, State, check_transition, is_terminal
from .task_policies import (
    LogPolicyMatcher,
    enforce_preemption_timeouts,
    record_failure,
    retries_canceled,
)
from .tasks import TaskService

log = logging.getLogger("dauntless.master")

LOST_ALLOCATION_GRACE = 5.0
MAINTENANCE_SECONDS = 1.0
"""How often the loop reaps lost agents, enforces timeouts and deletes checkpoint files."""
PLACEMENT_FALLBACK_SECONDS = 5.0
"""A scheduling pass places pending work only when rows it depends on changed, or when
this long has passed since it last did (changes the ORM cannot see)."""
_PLACEMENT_IGNORES: dict[type, frozenset[str]] = {
    AgentRow: frozenset({"last_heartbeat"}),
    TrialRow: frozenset(
        {
            "total_batches",
            "searcher_op_length",
            "searcher_completed_length",
            "best_validation",
            "latest_checkpoint",
            "latest_validation",
            "searcher_closed",
            "progress",
        }
    ),
    # Every searcher call rewrites these; a placement reads an experiment's state and
    # config only.
    ExperimentRow: frozenset({"searcher_state", "searcher_shutdown", "progress"}),
    # Handing a part to its agent (heartbeat) and recording its exit details.
    AllocationRow: frozenset({"started_at", "token_hash", "exit_code", "exit_message"}),
}
"""Attributes that a placement does not read: their changes (every heartbeat, every
metric report, every searcher call) do not call for a new one."""

_PLACEMENT_COARSE: dict[type, dict[str, Callable[[Any], Hashable]]] = {
    AllocationRow: {"state": lambda state: state == "TERMINATED"},
}
"""A placement sees only whether an allocation is live: ASSIGNED -> RUNNING (the
hand-over at a heartbeat) does not call for a new one, an end does."""
"""Seconds after hand-over during which an agent may not yet list a new allocation."""


class MetricsIn(NamedTuple):
    """One metrics report of a trial, as the harness sends it (``POST
    /trials/{id}/metrics``): ``group`` is ``training`` or ``validation``,
    ``steps_completed`` the batches trained when it was taken, ``batch_metrics`` the
    per-batch values of a training report (or None)."""

    group: str
    steps_completed: int
    trial_run_id: int
    metrics: dict[str, Any]
    batch_metrics: list[Any] | None


class ExperimentManager(LifecycleMixin, ClusterMixin, Compat038Mixin, CheckpointDeletionMixin):
    """Drives experiments, trials, searchers and scheduling against the database.

    Args:
        db: the master database (migrated).
        config: the master config (default checkpoint storage, pools, agent timeout).
        clock: returns seconds since the epoch; tests may pass their own.
    """

    def __init__(self, db: Database, config: MasterConfig, clock=time.time) -> None:
        self.db = db
        self.config = config
        self.clock = clock
        self.wake = threading.Event()
        # Concurrent trials' training reports share transactions (issue 19).
        self.metric_commits = GroupCommit(db)
        self._configs: dict[int, ExperimentConfig] = {}
        # experiment id -> SHA-256 (hex) of its stored context, "" for none (immutable).
        self._context_digests: dict[int, str] = {}
        self._alloc_trial: dict[str, int | None] = {}
        self._gc_due: set[int] = set()
        # Called after each scheduling pass (the pools' provisioners, resource managers).
        self.loop_hooks: list[Callable[[], None]] = []
        self.log_policies = LogPolicyMatcher(self)
        # Bumped when an allocation's rows change: the preemption long poll re-reads
        # them only then (and now and then, see routes_cluster.preemption_signal).
        self.allocation_versions = db.row_versions(AllocationRow, lambda row: row.group_id)
        # Set when rows a placement reads change: an idle pass skips the placement,
        # which decodes every running trial's config (issue 19).
        self.placement_changes = db.change_flag(
            (AgentRow, AllocationRow, TrialRow, ExperimentRow, TaskRow),
            _PLACEMENT_IGNORES,
            _PLACEMENT_COARSE,
        )
        self._placed_at = 0.0
        # Advanced when rows of experiment bodies change (experiments, trials, their
        # reports and checkpoints): the WebUI's experiment streams rebuild only then (and
        # now and then, see routes_stream.STALE_SECONDS), issue 22.
        self.experiment_changes = db.change_flag(
            (ExperimentRow, TrialRow, MetricRow, CheckpointRow)
        )
        #: Commands, notebooks, shells and TensorBoards (dauntless.master.tasks).
        self.tasks = TaskService(self)

    # ------------------------------------------------------------------ experiments

    def default_storage(self) -> dict[str, Any]:
        """The checkpoint storage used by experiments that name none (JSON form)."""
        if self.config.checkpoint_storage is not None:
            return self.config.checkpoint_storage.model_dump(mode="json")
        return SharedFSStorage(
            type="shared_fs", host_path=self.config.data_dir, storage_path="checkpoints"
        ).model_dump(mode="json")

    def create_experiment(
        self,
        config_text: str,
        context: bytes | None,
        activate: bool = True,
        owner: str = "determined",
        parent_id: int | None = None,
    ) -> int:
        """Validate a config, store the experiment and run its searcher's first operations.

        Args:
            config_text: the experiment config as YAML text.
            context: the context directory as a gzipped tar (bytes), or None (with
                ``parent_id``: the parent's context is used).
            activate: start ACTIVE (else PAUSED).
            owner: the username of the user who owns it (may pause, kill, edit and
                delete it); the built-in ``determined`` by default.
            parent_id: fork: the experiment this one is forked from (its model
                definition is copied when ``context`` is None).

        Returns:
            The new experiment's id.

        Raises:
            BadRequest: an invalid config (``errors`` names each field), a field this
                master cannot honour (named, with the reason), an unknown warm-start
                source, an unsupported checkpoint storage, an unknown resource pool, or a
                context over 95 MiB.
            NotFound: ``parent_id`` names no experiment.
        """
        if parent_id is not None:
            parent_context = self._model_definition(parent_id)  # NotFound if none
            if context is None:
                context = parent_context
        try:
            raw = prepare_raw_config(config_text, self.default_storage())
            cfg = parse_experiment_config(raw)
        except ConfigError as exc:
            raise BadRequest("invalid experiment config", exc.errors) from None
        if context is not None and len(context) > MAX_CONTEXT_BYTES:
            raise BadRequest(
                f"the context directory is {len(context)} bytes compressed; the limit is "
                f"{MAX_CONTEXT_BYTES} bytes (95 MiB)"
            )
        if cfg.entrypoint is None:
            raise BadRequest(
                "invalid experiment config",
                [("entrypoint", "required: 'module:TrialClass' or a command to run")],
            )
        pools = [p.pool_name for p in self.config.resource_pools]
        pool = cfg.resources.resource_pool or "default"
        if pool not in pools:
            raise BadRequest(
                "invalid experiment config",
                [("resources.resource_pool", f"unknown pool {pool!r}; pools: {pools}")],
            )
        self._refuse_unsupported(raw, cfg)
        with self.db.read() as s:  # issue 23: some agent of the pool can run it
            known = [(a.id, a.resource_pool, a.runtime) for a in s.scalars(select(AgentRow))]
        env_errors = check_pool_can_run(cfg, pool, known)
        if env_errors:
            raise BadRequest("invalid experiment config", env_errors)
        seed = cfg.reproducibility.experiment_seed
        if seed is None:
            seed = secrets.randbelow(2**31)
        raw = cfg.to_json()
        self._resolve_warm_start(raw)
        raw["reproducibility"]["experiment_seed"] = seed
        if raw.get("checkpoint_storage") is None:
            raw["checkpoint_storage"] = self.default_storage()
        resolved = parse_experiment_config(raw)
        try:
            # The master deletes checkpoints (GC) and serves downloads: it needs the
            # store's client library too. This does not contact the store.
            build_storage(resolved.checkpoint_storage)
        except (ImportError, ValueError) as exc:
            raise BadRequest(
                "invalid experiment config", [("checkpoint_storage.type", str(exc))]
            ) from None
        try:
            searcher = make_searcher(resolved, seed)
        except SearcherConfigError as exc:
            raise BadRequest("invalid experiment config", [("searcher", str(exc))]) from None
        now = self.clock()
        with self.db.write() as s:
            exp = ExperimentRow(
                name=resolved.name or "",
                description=resolved.description,
                state=(State.ACTIVE if activate else State.PAUSED).value,
                archived=False,
                owner=owner,
                owner_id=s.scalar(select(UserRow.id).where(UserRow.username == owner)),
                config=resolved.to_json(),
                original_config=config_text,
                seed=seed,
                searcher_state=None,
                searcher_shutdown=False,
                progress=0.0,
                start_time=now,
            )
            s.add(exp)
            s.flush()
            if not exp.name:
                exp.name = f"Experiment {exp.id}"
            self._configs[exp.id] = resolved
            if context is not None:
                s.add(ModelDefinitionRow(experiment_id=exp.id, content=context, size=len(context)))
            self._apply(s, exp, searcher, searcher.initial_operations())
            exp_id = exp.id
        self.wake.set()
        log.info("created experiment %s (%s)", exp_id, resolved.searcher.name)
        return exp_id

    def experiment_config(self, exp: ExperimentRow) -> ExperimentConfig:
        """The parsed config of a stored experiment (cached)."""
        cfg = self._configs.get(exp.id)
        if cfg is None:
            cfg = parse_experiment_config(exp.config)
            self._configs[exp.id] = cfg
        return cfg

    def context_digest(self, s: Session, exp_id: int) -> str:
        """The SHA-256 (hex) of an experiment's stored context, "" when it has none
        (computed once per experiment: a context never changes once stored)."""
        digest = self._context_digests.get(exp_id)
        if digest is None:
            content = s.scalar(
                select(ModelDefinitionRow.content).where(ModelDefinitionRow.experiment_id == exp_id)
            )
            digest = hashlib.sha256(content).hexdigest() if content is not None else ""
            if len(self._context_digests) >= 10_000:
                self._context_digests.clear()
            self._context_digests[exp_id] = digest
        return digest

    def _searcher(self, exp: ExperimentRow):
        return restore_searcher(self.experiment_config(exp), exp.searcher_state)

    def _apply(self, s: Session, exp: ExperimentRow, searcher, ops: Iterable[Operation]) -> None:
        """Apply searcher operations in order, feeding follow-up events back in."""
        queue: deque[Operation] = deque(ops)
        while queue:
            op = queue.popleft()
            if isinstance(op, Create):
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
                    start_time=self.clock(),
                )
                s.add(trial)
                s.flush()
                queue.extend(searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                trial = self._trial_by_request(s, exp.id, op.request_id)
                trial.searcher_op_length = op.length
            elif isinstance(op, Close):
                trial = self._trial_by_request(s, exp.id, op.request_id)
                trial.searcher_closed = True
                alloc = None if is_terminal(trial.state) else self._live_allocation(s, trial.id)
                if not is_terminal(trial.state) and alloc is None:
                    self._set_trial_state(trial, State.COMPLETED)
                    queue.extend(searcher.on_trial_closed(op.request_id))
                elif alloc is not None and searcher_length(self.experiment_config(exp)) is None:
                    # 0.38: the trial is not polling searcher operations; stop it through
                    # the preemption path (it checkpoints and exits; then COMPLETED).
                    self._signal_stop(s, alloc)
            elif isinstance(op, Shutdown):
                exp.searcher_shutdown = True
            else:
                raise TypeError(f"unknown searcher operation {op!r}")
        exp.searcher_state = searcher.snapshot()
        exp.progress = experiment_progress(s, exp, searcher)
        self._maybe_finish_experiment(s, exp)

    def _maybe_finish_experiment(self, s: Session, exp: ExperimentRow) -> None:
        stopping = State(exp.state) in STOPPING
        if is_terminal(exp.state) or not (exp.searcher_shutdown or stopping):
            return
        states = [
            t.state for t in s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp.id))
        ]
        if not all(is_terminal(st) for st in states):
            return
        final = {
            State.STOPPING_CANCELED: State.CANCELED,
            State.STOPPING_KILLED: State.CANCELED,
            State.STOPPING_ERROR: State.ERROR,
        }.get(State(exp.state), State.COMPLETED)
        if final is State.COMPLETED and states and all(st == State.ERROR.value for st in states):
            final = State.ERROR
        if final is State.COMPLETED and State(exp.state) is State.PAUSED:
            # Paused after its last trials had done their work (the pause reached them
            # as they finished): nothing is left to resume, so it completes.
            self._set_experiment_state(exp, State.STOPPING_COMPLETED)
        self._set_experiment_state(exp, final)
        exp.progress = 1.0 if final is State.COMPLETED else exp.progress
        log.info("experiment %s is %s", exp.id, final.value)

    def _set_experiment_state(self, exp: ExperimentRow, state: State) -> None:
        check_transition("experiment", exp.state, state)
        exp.state = state.value
        if is_terminal(state):
            exp.end_time = self.clock()

    def _set_trial_state(self, trial: TrialRow, state: State) -> None:
        check_transition("trial", trial.state, state)
        trial.state = state.value
        if is_terminal(state):
            trial.end_time = self.clock()
            self._gc_due.add(trial.experiment_id)

    @staticmethod
    def _trial_by_request(s: Session, exp_id: int, request_id: str) -> TrialRow:
        trial = s.scalar(
            select(TrialRow).where(
                TrialRow.experiment_id == exp_id, TrialRow.request_id == request_id
            )
        )
        if trial is None:
            raise RuntimeError(f"searcher named unknown trial request {request_id}")
        return trial

    @staticmethod
    def _live_allocation(s: Session, trial_id: int) -> AllocationRow | None:
        return s.scalar(
            select(AllocationRow).where(
                AllocationRow.trial_id == trial_id, AllocationRow.state != "TERMINATED"
            )
        )

    # ------------------------------------------------------------------ harness events

    def _get_trial(self, s: Session, trial_id: int) -> tuple[TrialRow, ExperimentRow]:
        trial = s.get(TrialRow, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        exp = s.get(ExperimentRow, trial.experiment_id)
        assert exp is not None  # FK guarantees it
        return trial, exp

    def complete_operation(self, trial_id: int, length: int, metric: float) -> dict[str, Any]:
        """Record that a trial validated at ``length`` batches with the searcher metric.

        Returns:
            The trial's next searcher operation as ``GET /trials/{id}/searcher/operation``
            answers it after the completion (the trial need not ask; issue 19).

        Raises:
            NotFound: no such trial.
            BadRequest: ``length`` is not the operation the trial was given.
        """
        with self.db.write() as s:
            trial, exp = self._get_trial(s, trial_id)
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
            searcher = self._searcher(exp)
            ops = searcher.on_validation_completed(trial.request_id, float(metric), length)
            self._apply(s, exp, searcher, ops)
            return trials.searcher_operation(s, trial_id)

    def report_metrics(
        self,
        trial_id: int,
        group: str,
        steps_completed: int,
        trial_run_id: int,
        metrics: dict[str, Any],
        batch_metrics: list[Any] | None,
    ) -> bool:
        """Store one metrics report; a second report at the same batch count is ignored.

        Returns:
            True if stored, False if it was a duplicate.

        Raises:
            NotFound: no such trial.
        """
        report = MetricsIn(group, steps_completed, trial_run_id, metrics, batch_metrics)
        return self.report_metrics_batch(trial_id, [report])[0]

    def report_metrics_batch(self, trial_id: int, reports: Sequence[MetricsIn]) -> list[bool]:
        """Store several metrics reports of one trial in one transaction.

        Each report is stored as :meth:`report_metrics` would store it alone: a report
        whose ``(group, steps_completed)`` is already stored, or comes earlier in
        ``reports``, is ignored. A trial's harness sends its training reports this way,
        gathered over about a second, so that a trial reporting every few milliseconds
        costs the master one request and one transaction per second, not one per report.
        Training-only reports of concurrent requests (other trials') may share that
        transaction (:class:`~dauntless.master.group_commit.GroupCommit`); either way
        this returns once it has committed, so what it acknowledges is durable.

        Args:
            trial_id: the reporting trial.
            reports: the reports, in the order they were made.

        Returns:
            One flag per report: True if stored, False if it was a duplicate.

        Raises:
            NotFound: no such trial.
        """
        if not reports:
            return []
        if all(r.group == "training" for r in reports):
            # Training reports of concurrent requests share a transaction (and its
            # commit); a validation report feeds the searcher, whose in-memory state a
            # shared transaction's rollback and rerun could not undo: alone. The rows are
            # made here, without the lock; the transaction's jobs store theirs together.
            rows = training_rows(trial_id, reports, self.clock())
            return self.metric_commits.run_batched(store_training_rows, (trial_id, rows))
        with self.db.write() as s:
            return self._store_metrics(s, trial_id, reports)

    def _store_metrics(self, s: Session, trial_id: int, reports: Sequence[MetricsIn]) -> list[bool]:
        """:meth:`report_metrics_batch` in the write session ``s``."""
        if all(r.group == "training" for r in reports):  # no searcher: the trial only
            trial = s.get(TrialRow, trial_id)
            if trial is None:
                raise NotFound(f"trial {trial_id} not found")
            exp = None
        else:
            trial, exp = self._get_trial(s, trial_id)
        keys = {(r.group, r.steps_completed) for r in reports}
        stored_keys = {
            (kind, batches)
            for kind, batches in s.execute(
                select(MetricRow.kind, MetricRow.total_batches).where(
                    MetricRow.trial_id == trial_id,
                    MetricRow.total_batches.in_({k[1] for k in keys}),
                )
            )
        }
        now = self.clock()
        flags: list[bool] = []
        rows: list[dict[str, Any]] = []
        for r in reports:
            key = (r.group, r.steps_completed)
            if key in stored_keys:
                flags.append(False)
                continue
            stored_keys.add(key)
            flags.append(True)
            metrics = finite_json(r.metrics)
            epoch = metrics.get("epochs")
            rows.append(
                {
                    "trial_id": trial_id,
                    "kind": r.group,
                    "total_batches": r.steps_completed,
                    "epoch": float(epoch) if isinstance(epoch, (int, float)) else None,
                    "trial_run_id": r.trial_run_id,
                    "values": metrics,
                    "batch_metrics": finite_json(r.batch_metrics),
                    "reported_at": now,
                }
            )
            trial.total_batches = max(trial.total_batches, r.steps_completed)
            if r.group == "validation":
                assert exp is not None  # read above whenever a report is a validation
                self._note_validation(trial, exp, metrics)
                self._searcher_sees_validation(s, trial, exp, metrics)
        if not rows:
            return flags
        from .metric_series import store_metric_rows  # here: it imports this module

        # Plain rows (no ORM objects) and the reports queued for the lazy fold, in the
        # same transaction: committed means durable and eventually charted
        # (metric_series.MetricFolder; readers fold first).
        store_metric_rows(s, rows)
        return flags

    def _note_validation(self, trial: Any, exp: Any, metrics: dict[str, Any]) -> None:
        """Keep ``trial.best_validation`` the best searcher-metric value validated."""
        cfg = self.experiment_config(exp)
        value = metrics.get(cfg.searcher.metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            best = trial.best_validation
            if best is None or (value < best if cfg.searcher.smaller_is_better else value > best):
                trial.best_validation = float(value)

    def report_progress(self, trial_id: int, progress: float) -> None:
        """Record the fraction (0..1) of its training a running trial has done, and count
        it into its experiment's progress (:func:`experiment_progress`).

        Raises:
            NotFound: no such trial.
        """
        with self.db.write() as s:
            trial, exp = self._get_trial(s, trial_id)
            trial.progress = min(max(float(progress), 0.0), 1.0)
            if not is_terminal(exp.state):
                exp.progress = experiment_progress(s, exp, self._searcher(exp))

    def report_early_exit(self, trial_id: int, reason: str) -> None:
        """Mark that the trial will exit early (``INVALID_HP``); applied at its exit."""
        if reason not in ("INVALID_HP", "EXITED_REASON_INVALID_HP"):
            raise BadRequest(f"unknown early-exit reason {reason!r}", [("reason", "INVALID_HP")])
        with self.db.write() as s:
            trial, _ = self._get_trial(s, trial_id)
            trial.early_exit_reason = "INVALID_HP"

    def report_checkpoint(
        self,
        uuid_: str,
        trial_id: int,
        allocation_id: str | None,
        steps_completed: int,
        resources: dict[str, int],
        metadata: dict[str, Any],
        state: str = "COMPLETED",
    ) -> None:
        """Record a checkpoint; a COMPLETED one becomes the trial's latest.

        ``state`` ``UPLOADING`` records a checkpoint whose files are going up to an
        object store (GC deletes it if its trial ends before it is COMPLETED); a later
        ``COMPLETED`` report of the same uuid completes it. Reports are idempotent.
        """
        with self.db.write() as s:
            trial, exp = self._get_trial(s, trial_id)
            row = s.get(CheckpointRow, uuid_)
            if row is not None:
                if row.state != "UPLOADING" or state != "COMPLETED":
                    return
                row.state = "COMPLETED"
                row.resources = resources
                row.meta = metadata
                row.report_time = self.clock()
            else:
                s.add(
                    CheckpointRow(
                        uuid=uuid_,
                        trial_id=trial_id,
                        experiment_id=exp.id,
                        allocation_id=allocation_id,
                        total_batches=steps_completed,
                        state=state,
                        resources=resources,
                        meta=metadata,
                        report_time=self.clock(),
                    )
                )
            if state != "COMPLETED":
                return
            latest = (
                s.get(CheckpointRow, trial.latest_checkpoint) if trial.latest_checkpoint else None
            )
            if latest is None or steps_completed >= latest.total_batches:
                trial.latest_checkpoint = uuid_
            trial.total_batches = max(trial.total_batches, steps_completed)

    def set_rendezvous(self, allocation_id: str, addr: str, port: int) -> None:
        """Record where the chief of a distributed allocation listens (torch.distributed).

        Raises:
            NotFound: no such allocation.
        """
        with self.db.write() as s:
            chief = s.get(AllocationRow, allocation_id)
            if chief is None or chief.part_index != 0:
                raise NotFound(f"allocation {allocation_id} not found")
            chief.rendezvous_addr, chief.rendezvous_port = addr, port

    # ------------------------------------------------------------------ agents

    def register_agent(
        self,
        agent_id: str,
        resource_pool: str,
        hostname: str,
        slots: list[dict[str, Any]],
        running: list[str] | None = None,
        runtime: dict[str, Any] | None = None,
    ) -> AgentRow:
        """Add or replace an agent and reconcile what it runs.

        Allocation parts of this agent that it lists in ``running`` are adopted (they kept
        running while the master or the connection was away); its other live parts that
        had been started are treated as lost (the agent restarted) and end as failed.
        Parts handed to it but not yet started stay assigned. Ids in ``running`` the
        master does not know, or knows as ended, are killed at the next heartbeat.

        Args:
            agent_id: the agent's id.
            resource_pool: its pool, one the master declares.
            hostname: its host name.
            slots: ``[{id, type, device}]``.
            running: allocation part ids the agent still runs (None: none).

        ``runtime`` is what the agent reported of its task runtime (``{name,
        containers, mount_namespace}``; :mod:`dauntless.master.environments`).

        Raises:
            BadRequest: an unknown resource pool, or duplicate slot ids.
        """
        pools = [p.pool_name for p in self.config.resource_pools]
        if resource_pool not in pools:
            raise BadRequest(
                f"unknown resource pool {resource_pool!r}; the master declares {pools}",
                [("resource_pool", f"one of {pools}")],
            )
        ids = [str(sl["id"]) for sl in slots]
        if len(set(ids)) != len(ids):
            raise BadRequest("slot ids must be unique", [("slots", f"duplicates in {ids}")])
        now = self.clock()
        with self.db.write() as s:
            agent = s.get(AgentRow, agent_id)
            clean = [
                {
                    "id": str(sl["id"]),
                    "type": sl.get("type", "cpu"),
                    "device": sl.get("device", ""),
                    "enabled": True,
                }
                for sl in slots
            ]
            if agent is None:
                agent = AgentRow(
                    id=agent_id,
                    resource_pool=resource_pool,
                    hostname=hostname,
                    state="ACTIVE",
                    enabled=True,
                    draining=False,
                    slots=clean,
                    registered_at=now,
                    last_heartbeat=now,
                    runtime=runtime,
                )
                s.add(agent)
            else:
                old = {sl["id"]: sl.get("enabled", True) for sl in agent.slots}
                for sl in clean:
                    sl["enabled"] = old.get(sl["id"], True)
                agent.resource_pool, agent.hostname, agent.slots = resource_pool, hostname, clean
                agent.runtime = runtime
                agent.state, agent.registered_at, agent.last_heartbeat = "ACTIVE", now, now
                still = set(running or [])
                for alloc in s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.agent_id == agent_id, AllocationRow.state != "TERMINATED"
                    )
                ).all():
                    if alloc.id in still or alloc.state == "ASSIGNED":
                        if alloc.id in still:
                            log.info("agent %s still runs %s: adopted", agent_id, alloc.id)
                        continue
                    self._terminate(s, alloc, None, "the agent restarted")
        self.wake.set()
        log.info(
            "agent %s registered with %d slots in pool %s", agent_id, len(slots), resource_pool
        )
        return agent

    def heartbeat(self, agent_id: str, running: list[str]) -> dict[str, Any]:
        """Record an agent's heartbeat; hand it new tasks and kill orders.

        Raises:
            NotFound: the agent is not registered (it must register again).
        """
        now = self.clock()
        with self.db.write() as s:
            agent = s.get(AgentRow, agent_id)
            if agent is None:
                raise NotFound(f"agent {agent_id} is not registered")
            agent.last_heartbeat = now
            if agent.state != "ACTIVE":
                agent.state = "ACTIVE"
                self.wake.set()
            running_set = set(running)
            start, kill = [], []
            allocs = s.scalars(
                select(AllocationRow).where(AllocationRow.agent_id == agent_id)
            ).all()
            by_id = {a.id: a for a in allocs}
            for alloc in allocs:
                if alloc.state == "ASSIGNED":
                    spec = self._task_spec(s, alloc)
                    # The part's session token: handed over once, stored only hashed.
                    token = new_token()
                    alloc.token_hash = hash_token(token)
                    spec["env"]["DET_SESSION_TOKEN"] = token
                    start.append(spec)
                    alloc.state, alloc.started_at = "RUNNING", now
                elif alloc.state == "RUNNING":
                    if alloc.kill_requested:
                        kill.append(alloc.id)
                    if (
                        alloc.id not in running_set
                        and alloc.started_at is not None
                        and now - alloc.started_at > LOST_ALLOCATION_GRACE
                    ):
                        self._terminate(s, alloc, None, "the agent no longer runs this task")
            for alloc_id in running_set:
                known = by_id.get(alloc_id)
                if known is None or known.state == "TERMINATED":
                    kill.append(alloc_id)
            return {"start": start, "kill": sorted(set(kill))}

    def _task_spec(self, s: Session, alloc: AllocationRow) -> dict[str, Any]:
        if alloc.task_id is not None:
            return self.tasks.task_spec(s, alloc)
        trial = s.get(TrialRow, alloc.trial_id)
        assert trial is not None
        exp = s.get(ExperimentRow, trial.experiment_id)
        assert exp is not None
        cfg = self.experiment_config(exp)
        latest = s.get(CheckpointRow, trial.latest_checkpoint) if trial.latest_checkpoint else None
        # The config's variables for the type of the part's slots (a per-device map).
        agent = s.get(AgentRow, alloc.agent_id)
        types = {str(sl["id"]): sl.get("type", "cpu") for sl in (agent.slots if agent else [])}
        slot_type = types.get(str(alloc.slot_ids[0]), "cpu") if alloc.slot_ids else "cpu"
        env = dict(cfg.environment.variables_for(slot_type))
        env.update(
            {
                "DET_MASTER": self.public_url(),
                "DET_TASK_TYPE": "TRIAL",
                "DET_EXPERIMENT_ID": str(exp.id),
                "DET_TRIAL_ID": str(trial.id),
                "DET_TRIAL_RUN_ID": str(alloc.run_id),
                "DET_ALLOCATION_ID": alloc.group_id,
                "DET_AGENT_ID": alloc.agent_id,
                "DET_PART_INDEX": str(alloc.part_index),
                "DET_NUM_PARTS": str(alloc.num_parts),
                "DET_RANK_OFFSET": str(alloc.rank_offset),
                "DET_WORLD_SIZE": str(alloc.world_size),
                "DET_TASK_ID": f"{exp.id}.{trial.id}",
                "DET_TRIAL_SEED": str(trial.seed),
                "DET_HPARAMS": json.dumps(trial.hparams),
                "DET_EXPERIMENT_CONFIG": json.dumps(exp.config),
                # Warm start: a trial without a checkpoint of its own starts from the
                # searcher's source checkpoint (its batch counters start at 0).
                "DET_LATEST_CHECKPOINT": latest.uuid
                if latest
                else (cfg.searcher.source_checkpoint_uuid or ""),
                "DET_STEPS_COMPLETED": str(latest.total_batches if latest else 0),
                "DET_SLOT_IDS": ",".join(str(x) for x in alloc.slot_ids),
                "DET_CONTAINER_RANK": str(alloc.part_index),
            }
        )
        # A port offset unique among the allocations on the chief's agent: the index of
        # the chief part's first slot there (DistributedContext's rendezvous port).
        chief = alloc
        if alloc.part_index != 0:
            chief = (
                s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.group_id == alloc.group_id, AllocationRow.part_index == 0
                    )
                ).first()
                or alloc
            )
        chief_agent = s.get(AgentRow, chief.agent_id)
        slot_order = [str(x.get("id")) for x in (chief_agent.slots if chief_agent else [])]
        first = str(chief.slot_ids[0]) if chief.slot_ids else ""
        env["DET_UNIQUE_PORT_OFFSET"] = str(slot_order.index(first) if first in slot_order else 0)
        if alloc.num_parts > 1:  # every node's host, in part order (ClusterInfo)
            parts = s.scalars(
                select(AllocationRow)
                .where(AllocationRow.group_id == alloc.group_id)
                .order_by(AllocationRow.part_index)
            ).all()
            addrs = []
            for part in parts:
                agent = s.get(AgentRow, part.agent_id)
                addrs.append(agent.hostname if agent and agent.hostname else part.agent_id)
            env["DET_CONTAINER_ADDRS"] = ",".join(addrs)
        return {
            "allocation_id": alloc.id,
            "task_id": f"{exp.id}.{trial.id}",
            "trial_id": trial.id,
            "experiment_id": exp.id,
            "slot_ids": list(alloc.slot_ids),
            "entrypoint": cfg.entrypoint,
            "env": env,
            "context_url": f"/api/v1/experiments/{exp.id}/model_def",
            "context_sha256": self.context_digest(s, exp.id),
            "environment": task_environment(
                cfg.environment, cfg.bind_mounts, cfg.resources, cfg.checkpoint_storage
            ),
        }

    def public_url(self) -> str:
        """The URL tasks use to reach this master."""
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        scheme = "https" if self.config.security.tls.enabled else "http"
        return f"{scheme}://{host}:{self.port}"

    port: int = 8080

    def allocation_exited(
        self,
        allocation_id: str,
        exit_code: int | None,
        message: str | None,
        fatal: bool = False,
    ) -> None:
        """Handle a task's exit as reported by its agent (idempotent).

        ``fatal``: the agent found the task cannot run in its environment (a Python
        environment that does not build); the trial ends in ERROR without a restart.

        Raises:
            NotFound: no such allocation.
        """
        with self.db.write() as s:
            alloc = s.get(AllocationRow, allocation_id)
            if alloc is None:
                raise NotFound(f"allocation {allocation_id} not found")
            if alloc.state == "TERMINATED":
                return
            alloc.exit_fatal = bool(fatal) and exit_code != 0
            self._terminate(s, alloc, exit_code, message)
        # Place what waits on the freed slots now, before answering: the agent heartbeats
        # right after reporting an exit and so gets the next task without waiting for the
        # loop (the slot gap of issue 19). The loop's own pass follows as before.
        try:
            self.schedule_pass(maintenance=False)
        except Exception:  # the exit is recorded; the loop's pass retries the placement
            log.exception("scheduling pass after an exit failed")
        self.wake.set()

    def _terminate(
        self, s: Session, alloc: AllocationRow, exit_code: int | None, message: str | None
    ) -> None:
        """End one part of an allocation; when it was the last, move the trial on
        (restart, complete or fail).

        A part that fails (non-zero or unknown exit, not a kill the master ordered) gets
        its sibling parts killed: one lost rank stops the whole trial run.
        """
        alloc.state, alloc.exit_code, alloc.exit_message = "TERMINATED", exit_code, message
        alloc.ended_at = self.clock()
        if alloc.task_id is not None:
            self.tasks.on_exit(s, alloc)
            return
        parts = allocations.parts(s, alloc.group_id)
        live = [p for p in parts if p.state != "TERMINATED"]
        if live:
            if exit_code != 0 and not alloc.kill_requested:
                for p in live:
                    p.kill_requested = True
                    if p.state == "ASSIGNED":
                        p.state, p.exit_message = "TERMINATED", "a sibling part failed"
                        p.ended_at = self.clock()
                if any(p.state != "TERMINATED" for p in live):
                    return
            else:
                return
        failed = [p for p in parts if p.exit_code != 0 and not p.kill_requested]
        exit_code = failed[0].exit_code if failed else 0
        message = failed[0].exit_message if failed else None
        fatal = any(p.exit_fatal for p in failed)
        preempted = any(p.preempt_requested for p in parts)
        assert alloc.trial_id is not None  # a task's allocation returned above
        trial, exp = self._get_trial(s, alloc.trial_id)
        if is_terminal(trial.state):
            return
        if failed:
            s.flush()  # the run's last log lines, if just added, are queried
            record_failure(s, trial, failed[0], exit_code, message)
        if State(trial.state) in STOPPING:
            if State(trial.state) is State.STOPPING_ERROR:  # e.g. a searcher error
                self._set_trial_state(trial, State.ERROR)
                self._maybe_finish_experiment(s, exp)
                return
            if State(trial.state) is State.STOPPING_KILLED or exit_code == 0:
                self._trial_canceled(s, exp, trial)
            else:
                self._set_trial_state(trial, State.ERROR)
                self._maybe_finish_experiment(s, exp)
            return
        searcher = self._searcher(exp)
        ops: list[Operation] = []
        rid = trial.request_id
        if trial.early_exit_reason == "INVALID_HP" and exit_code == 0:
            self._set_trial_state(trial, State.COMPLETED)
            ops += searcher.on_trial_exited_early(rid, ExitedReason.INVALID_HP)
            ops += searcher.on_trial_closed(rid)
        elif exit_code == 0 and (not preempted or trial.searcher_closed):
            self._set_trial_state(trial, State.COMPLETED)
            ops += searcher.on_trial_closed(rid)
        elif exit_code == 0:
            log.info("trial %s stopped for preemption; it resumes later", trial.id)
        else:
            cfg = self.experiment_config(exp)
            why = message or f"exit code {exit_code}"
            if fatal:  # a restart cannot help (issue 23): not counted as one
                log.warning("trial %s cannot run in its environment: %s", trial.id, why)
                self._set_trial_state(trial, State.ERROR)
                ops += searcher.on_trial_exited_early(rid, ExitedReason.ERRORED)
                ops += searcher.on_trial_closed(rid)
                self._apply(s, exp, searcher, ops)
                return
            trial.restarts += 1
            if trial.restarts > cfg.max_restarts or retries_canceled(trial):
                log.warning(
                    "trial %s failed (%s); %s",
                    trial.id,
                    why,
                    "a cancel_retries log policy matched"
                    if retries_canceled(trial)
                    else f"max_restarts {cfg.max_restarts} reached",
                )
                self._set_trial_state(trial, State.ERROR)
                ops += searcher.on_trial_exited_early(rid, ExitedReason.ERRORED)
                ops += searcher.on_trial_closed(rid)
            else:
                log.warning(
                    "trial %s failed (%s); restart %d of %d",
                    trial.id,
                    why,
                    trial.restarts,
                    cfg.max_restarts,
                )
        self._apply(s, exp, searcher, ops)

    # ------------------------------------------------------------------ logs

    def ingest_logs(self, lines: list[dict[str, Any]]) -> int:
        """Store task log lines shipped by agents; returns how many were new.

        Lines carrying a ``seq`` already stored for their allocation (a batch re-sent after
        a lost answer) are skipped, so each line is kept once.

        Raises:
            NotFound: a line names an unknown allocation.
        """
        if not lines:
            return 0
        with self.db.write() as s:
            rows = []
            seqs: dict[str, list[int]] = {}
            for line in lines:
                alloc_id = str(line["allocation_id"])
                trial_id = self._alloc_trial.get(alloc_id)
                if trial_id is None:
                    alloc = s.get(AllocationRow, alloc_id)
                    if alloc is None:
                        raise NotFound(f"allocation {alloc_id} not found")
                    trial_id = self._alloc_trial[alloc_id] = alloc.trial_id
                if line.get("seq") is not None:
                    seqs.setdefault(alloc_id, []).append(int(line["seq"]))
                rows.append(
                    TaskLogRow(
                        trial_id=trial_id,
                        allocation_id=alloc_id,
                        seq=line.get("seq"),
                        timestamp=float(line.get("timestamp") or self.clock()),
                        stdtype=str(line.get("stdtype", "stdout")),
                        rank_id=line.get("rank_id"),
                        log=str(line.get("log", "")),
                    )
                )
            seen: set[tuple[str, int | None]] = set()
            for alloc_id, numbers in seqs.items():
                seen.update(
                    (alloc_id, n)
                    for n in s.scalars(
                        select(TaskLogRow.seq).where(
                            TaskLogRow.allocation_id == alloc_id, TaskLogRow.seq.in_(numbers)
                        )
                    )
                )
            fresh = []
            for row in rows:
                key = (row.allocation_id, row.seq)
                if row.seq is not None and key in seen:
                    continue
                seen.add(key)  # type: ignore[arg-type]
                fresh.append(row)
            s.add_all(fresh)
            self.log_policies.apply(s, fresh)
            return len(fresh)

    # ------------------------------------------------------------------ scheduling

    def schedule_pass(self, maintenance: bool = True, lazy: bool = False) -> int:
        """Reap lost agents, enforce timeouts and place pending trials on free slots.

        Args:
            maintenance: reap agents whose heartbeats stopped, enforce preemption
                timeouts and idle timeouts of tasks (time-driven work the loop does
                every :data:`MAINTENANCE_SECONDS`).
            lazy: place only when rows a placement reads changed since the last one
                (:attr:`placement_changes`), or :data:`PLACEMENT_FALLBACK_SECONDS`
                passed; the loop's passes are lazy, other callers' are not.

        Returns:
            The number of allocations created.
        """
        now = self.clock()
        with self.db.write() as s:
            if maintenance:
                self._reap_lost_agents(s, now)
                enforce_preemption_timeouts(s, self, now)
                self.tasks.idle_check(s, now)
            # Under the write lock: no commit comes between take() and the reads.
            changed = self.placement_changes.take()
            if lazy and not changed and now - self._placed_at < PLACEMENT_FALLBACK_SECONDS:
                return 0
            self._placed_at = now
            created = scheduling.place_pending(s, self, now)
            # The placement read every change flushed before it; what it wrote itself
            # (new allocations, preemption flags) needs no second placement, so its
            # commit does not set the flag (a change committed later still does).
            self.placement_changes.forget(s)
            return created

    def _reap_lost_agents(self, s: Session, now: float) -> None:
        for agent in s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")).all():
            if now - agent.last_heartbeat > self.config.agent_timeout:
                log.warning(
                    "agent %s missed heartbeats for %.0f s: lost",
                    agent.id,
                    now - agent.last_heartbeat,
                )
                agent.state = "LOST"
                for alloc in s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.agent_id == agent.id,
                        AllocationRow.state != "TERMINATED",
                    )
                ).all():
                    self._terminate(s, alloc, None, f"agent {agent.id} was lost")

    def new_allocation(
        self, s: Session, trial: TrialRow, parts: list[tuple[str, list[str]]]
    ) -> str:
        """Create an ASSIGNED allocation of ``trial``: one part per ``(agent_id, slot_ids)``,
        the first being the chief (ranks from 0). Returns the allocation (group) id.

        The run has one rank per slot, or one rank for a zero-slot trial.
        """
        if not parts:
            raise ValueError("an allocation needs at least one part")
        trial.run_id += 1
        group = uuid.uuid4().hex
        world = max(sum(len(slots) for _, slots in parts), 1)
        offset = 0
        for index, (agent_id, slot_ids) in enumerate(parts):
            s.add(
                AllocationRow(
                    id=group if index == 0 else f"{group}-{index}",
                    group_id=group,
                    part_index=index,
                    num_parts=len(parts),
                    rank_offset=offset,
                    world_size=world,
                    trial_id=trial.id,
                    agent_id=agent_id,
                    slot_ids=list(slot_ids),
                    state="ASSIGNED",
                    run_id=trial.run_id,
                    kill_requested=False,
                    preempt_requested=False,
                    created_at=self.clock(),
                )
            )
            offset += len(slot_ids)
        return group

    def run_gc(self, deletions: bool = True) -> bool:
        """Apply the GC policy of every experiment one of whose trials ended since the
        last call (marking checkpoints DELETING), then delete the files of DELETING
        checkpoints whose retry time has come (checkpoint_gc); storage is touched after
        the decision commits.

        Returns:
            Whether the policy marked any checkpoint DELETING.
        """
        marked = False
        while self._gc_due:
            exp_id = self._gc_due.pop()
            with self.db.write() as s:
                exp = s.get(ExperimentRow, exp_id)
                doomed = self._collect(s, exp) if exp is not None else []
            if doomed:
                marked = True
                log.info(
                    "checkpoint GC of experiment %s deletes %d checkpoint(s)", exp_id, len(doomed)
                )
        if deletions:
            self.process_deletions()
        return marked

    def on_start(self) -> None:
        """At master start: give agents a fresh heartbeat deadline (they were not lost,
        the master was away) and collect checkpoints of experiments that ended."""
        now = self.clock()
        with self.db.write() as s:
            for agent in s.scalars(select(AgentRow).where(AgentRow.state == "ACTIVE")):
                agent.last_heartbeat = now
        self.schedule_gc_after_start()

    def run_loop(self, stop: threading.Event) -> None:
        """The background loop: a scheduling pass every ``scheduler_interval`` seconds, or
        sooner when an event sets :attr:`wake`. Returns when ``stop`` is set."""
        maintained_at = -MAINTENANCE_SECONDS
        while not stop.is_set():
            try:
                now = time.monotonic()
                # Time-driven work (lost agents, timeouts, file deletions) once a second;
                # placement whenever something it reads changed (issue 19: an idle
                # master with many running trials costs little CPU).
                maintenance = now - maintained_at >= MAINTENANCE_SECONDS
                # A deletion pass when GC just marked checkpoints (their files go at
                # once) and with the time-driven work (retries); not after every trial
                # end that marked nothing (a thread start and a query per trial).
                marked = self.run_gc(deletions=False)
                if maintenance or marked:
                    # Deleting files may wait on a slow store: off the scheduling path.
                    self.start_deletions(wait=2.0)
                self.schedule_pass(maintenance=maintenance, lazy=True)
                if maintenance:
                    maintained_at = now
                for hook in self.loop_hooks:
                    hook()
            except Exception:  # keep the master alive; the next pass retries
                log.exception("scheduling pass failed")
            self.wake.wait(self.config.scheduler_interval)
            self.wake.clear()
