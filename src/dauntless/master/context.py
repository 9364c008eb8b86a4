"""The master's shared state: what the model functions, the control loop and the routes
share (issue 18 scope 4).

:class:`MasterContext` holds the database, the master config, the clock, the loop's wake
event, the group commit of training reports, caches of parsed configs, the change flags
the loop and the streams poll, the loop hooks, the log-policy matcher, the checkpoint
deletions, the proxy's task activity and the webhook queue. It holds no domain logic:
experiments, trials, tasks, allocations, agents, checkpoints, metrics and logs are changed
by the session-first functions of :mod:`dauntless.master.models`, and the control loop is
:mod:`dauntless.master.loop`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from dauntless.config import (
    ExperimentConfig,
    MasterConfig,
    SharedFSStorage,
    parse_experiment_config,
)

from .checkpoint_gc import CheckpointDeletions
from .db import (
    AgentRow,
    AllocationRow,
    CheckpointRow,
    Database,
    ExperimentRow,
    MetricRow,
    ModelDefinitionRow,
    TaskRow,
    TrialRow,
)
from .group_commit import GroupCommit
from .heartbeats import Heartbeats
from .task_policies import LogPolicyMatcher
from .webhooks import Webhooks

P = ParamSpec("P")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")


class BoundedDict(OrderedDict[K, V]):
    """A dict of at most ``max_items`` entries: storing one more drops the oldest stored
    (issue 37: the master's caches of per-allocation and per-experiment facts stay of
    fixed size however many trials have run; a dropped entry is read again from the
    database when next needed).

    Args:
        max_items: the bound (>= 1).

    Raises:
        ValueError: ``max_items`` below 1.
    """

    def __init__(self, max_items: int) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        super().__init__()
        self.max_items = max_items
        self._bound_lock = threading.Lock()

    def __setitem__(self, key: K, value: V) -> None:
        with self._bound_lock:
            super().__setitem__(key, value)
            self.move_to_end(key)
            while len(self) > self.max_items:
                self.popitem(last=False)


#: Entries of each per-allocation cache of the context (ids to trials and agents), and
#: allocation groups whose change counts are kept. Only live allocations are looked up
#: often, and a cluster runs fewer than this at once (the 1,000-agent heartbeat
#: benchmark included); issue 37: at 16,384 the caches held every trial of a
#: 10,000-trial search (about 2.4 KB of the master's memory per finished trial with the
#: other per-trial caches), and at 4,096 they still held about 10 MB once full. A
#: dropped entry is read again.
ALLOCATION_CACHE_ITEMS = 2_048
#: Parsed configs of experiments kept (a parse is a few ms; active ones stay in).
CONFIG_CACHE_ITEMS = 1_024

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
    ExperimentRow: frozenset(
        {"searcher_state", "searcher_seq", "searcher_snapshot_seq", "searcher_shutdown", "progress"}
    ),
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


if TYPE_CHECKING:
    from .prom import MasterMetrics


class MasterContext:
    """The state one master's model functions, loop and routes share.

    Args:
        db: the master database (migrated).
        config: the master config (default checkpoint storage, pools, agent timeout).
        clock: returns seconds since the epoch; tests may pass (or assign) their own.
    """

    #: The port tasks reach this master on (set by the app from its config).
    port: int = 8080

    def __init__(self, db: Database, config: MasterConfig, clock=time.time) -> None:
        self.db = db
        self.config = config
        self.clock = clock
        #: The Prometheus instruments (dauntless.master.prom); None when
        #: ``observability.enable_prometheus`` is off.
        self.prom: MasterMetrics | None = None
        #: Set to run the control loop's next pass now (dauntless.master.loop).
        self.wake = threading.Event()
        # Concurrent trials' training reports share transactions (issue 19).
        self.metric_commits = GroupCommit(db)
        #: experiment id -> its parsed config (a cache; rebuilt from the rows after a
        #: restart).
        self.configs: BoundedDict[int, ExperimentConfig] = BoundedDict(CONFIG_CACHE_ITEMS)
        # experiment id -> SHA-256 (hex) of its stored context, "" for none (immutable).
        self._context_digests: dict[int, str] = {}
        #: allocation id -> its trial id (None: a task), for log ingestion.
        self.alloc_trial: BoundedDict[str, int | None] = BoundedDict(ALLOCATION_CACHE_ITEMS)
        #: allocation part id -> the agent it was placed on (parts never move): whose
        #: reports about it the master accepts (issue 29).
        self.alloc_agent: BoundedDict[str, str] = BoundedDict(ALLOCATION_CACHE_ITEMS)
        #: Experiments one of whose trials ended since the last checkpoint GC.
        self.gc_due: set[int] = set()
        #: Called after each scheduling pass (the pools' provisioners, resource managers).
        self.loop_hooks: list[Callable[[], None]] = []
        self.log_policies = LogPolicyMatcher(self)
        # Bumped when an allocation's rows change: the preemption long poll re-reads
        # them only then (and now and then, see routes_cluster.preemption_signal).
        self.allocation_versions = db.row_versions(
            AllocationRow, lambda row: row.group_id, max_keys=ALLOCATION_CACHE_ITEMS
        )
        # Set when rows a placement reads change: an idle pass skips the placement,
        # which decodes every running trial's config (issue 19).
        self.placement_changes = db.change_flag(
            (AgentRow, AllocationRow, TrialRow, ExperimentRow, TaskRow),
            _PLACEMENT_IGNORES,
            _PLACEMENT_COARSE,
        )
        #: When the loop last placed pending work (see loop.PLACEMENT_FALLBACK_SECONDS).
        self.placed_at = 0.0
        # Advanced when rows of experiment bodies change (experiments, trials, their
        # reports and checkpoints): the WebUI's experiment streams rebuild only then (and
        # now and then, see routes_stream.STALE_SECONDS), issue 22.
        self.experiment_changes = db.change_flag(
            (ExperimentRow, TrialRow, MetricRow, CheckpointRow)
        )
        #: Durable deletion of DELETING checkpoints' files (dauntless.master.checkpoint_gc).
        self.deletions = CheckpointDeletions(db, lambda: self.clock())
        #: Task id -> last time (seconds since the epoch) the proxy forwarded a request
        #: to its service: a TensorBoard's activity for its idle timeout
        #: (:func:`dauntless.master.models.task_runs.kill_idle_tensorboards`; memory
        #: only, a restart counts as activity).
        self.task_activity: dict[str, float] = {}
        #: Agents' liveness in memory and the answers of quiet heartbeats (issue 37,
        #: dauntless.master.heartbeats).
        self.heartbeats = Heartbeats(db)
        #: Webhook triggers and their event queue (dauntless.master.webhooks).
        self.webhooks = Webhooks(db, config, lambda: self.clock())

    # ------------------------------------------------------------------ transactions

    def write(
        self, fn: Callable[Concatenate[Session, MasterContext, P], R], *args: P.args, **kw: P.kwargs
    ) -> R:
        """Run the model function ``fn(session, self, *args, **kw)`` in one write
        transaction (committed when it returns, rolled back when it raises) and return
        what it returns."""
        with self.db.write() as s:
            return fn(s, self, *args, **kw)

    def wake_after_commit(self, s: Session) -> None:
        """Wake the control loop once the write session ``s`` commits (not if it rolls
        back): a model function that made work for the loop calls this."""
        event.listen(s, "after_commit", lambda _session: self.wake.set(), once=True)

    # ------------------------------------------------------------------ caches

    def experiment_config(self, exp: ExperimentRow) -> ExperimentConfig:
        """The parsed config of a stored experiment (cached)."""
        cfg = self.configs.get(exp.id)
        if cfg is None:
            cfg = parse_experiment_config(exp.config)
            self.configs[exp.id] = cfg
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

    # ------------------------------------------------------------------ config views

    def default_storage(self) -> dict[str, Any]:
        """The checkpoint storage used by experiments that name none (JSON form)."""
        if self.config.checkpoint_storage is not None:
            return self.config.checkpoint_storage.model_dump(mode="json")
        return SharedFSStorage(
            type="shared_fs", host_path=self.config.data_dir, storage_path="checkpoints"
        ).model_dump(mode="json")

    def public_url(self) -> str:
        """The URL tasks use to reach this master."""
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        scheme = "https" if self.config.security.tls.enabled else "http"
        return f"{scheme}://{host}:{self.port}"
