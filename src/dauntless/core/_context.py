"""``Context``: the Core API handle a task uses (train, checkpoint, searcher, preempt)."""

from __future__ import annotations

import logging
import types
from typing import TYPE_CHECKING, Any

import dauntless
from dauntless.storage import StorageManager, build_storage

from ._backend import Backend, MasterBackend
from ._checkpoint import CheckpointContext
from ._cluster_info import ClusterInfo, TrialInfo
from ._distributed import DistributedContext
from ._preempt import DEFAULT_POLL_SECONDS, PreemptContext, PreemptMode
from ._profiler import ProfilerContext
from ._searcher import SearcherContext
from ._session import Session
from ._train import EarlyExitReason, TrainContext

if TYPE_CHECKING:
    from dauntless.config import ExperimentConfig

logger = logging.getLogger("dauntless.core")

TRIAL_MASTER_ATTEMPTS = 30
"""Attempts per request of a trial on a cluster. With the session's backoff (full jitter,
caps doubling from 0.5 s to 20 s) 30 attempts wait about 250 s in all (rarely under
150 s): a trial keeps training through a master restart or outage of that length, its
reports held and retried, instead of failing and spending one of its restarts."""


def _profiling_config(config: dict[str, Any]) -> dict[str, Any]:
    section = config.get("profiling") if isinstance(config, dict) else None
    return section if isinstance(section, dict) else {}


def _profiler_for(
    backend: Backend, trial: TrialInfo, info: ClusterInfo | None, dist: DistributedContext
) -> ProfilerContext:
    """The profiler: reporting to the master on a cluster's chief-local processes, a
    no-op elsewhere; its batch range and GPU sync from the config's ``profiling``."""
    sink = None
    if isinstance(backend, MasterBackend) and info is not None and dist.local_rank == 0:
        sink = backend.profiler_sink(trial.trial_id)
    profiler = ProfilerContext(
        sink,
        agent_id=info.agent_id if info is not None else "",
        gpu_uuids=tuple(info.gpu_uuids) if info is not None else (),
    )
    section = _profiling_config(trial.config)
    begin, end = section.get("begin_on_batch"), section.get("end_after_batch")
    if isinstance(begin, int) and not isinstance(begin, bool):
        profiler.begin_on_batch = begin
    if isinstance(end, int) and not isinstance(end, bool):
        profiler.end_after_batch = end
    if isinstance(section.get("sync_timings"), bool):
        profiler.sync_timings = section["sync_timings"]
    return profiler


def _own_length(
    config: dict[str, Any], parsed: ExperimentConfig | None = None
) -> int | None | bool:
    """For :class:`SearcherContext`: ``False`` when the master hands out searcher
    operations (≤0.37: ``searcher.max_length`` drives the search); else the one
    operation's length in batches from a deprecated ``max_length`` (0.38's shim), or None
    when the config has no length at all. ``parsed`` is ``config`` parsed already (it is
    parsed here when None)."""
    from dauntless.config import parse_experiment_config, searcher_length

    try:
        cfg = parse_experiment_config(config) if parsed is None else parsed
    except ValueError:
        return False  # not a full config (tests build partial ones): ask the master
    if searcher_length(cfg) is not None:
        return False
    length = getattr(cfg.searcher, "max_length", None)
    if length is None:
        return None
    gbs = cfg.hyperparameters.get("global_batch_size")
    value = getattr(gbs, "val", None)
    try:
        return length.to_batches(value, cfg.records_per_epoch)
    except (TypeError, ValueError):
        return length.value


class Context:
    """Everything a trial process reports through, bound to one trial.

    Build it with :func:`dauntless.core.init` (or :meth:`from_cluster_info`) on a
    cluster, or directly with a :class:`~dauntless.core.LocalBackend` to train without a
    master. Use it as a context manager (or call :meth:`close`): leaving the ``with``
    block stops the preemption watcher and releases the backend's connections, and a
    :class:`dauntless.InvalidHP` raised inside it is reported as an early exit, after
    which the process exits with status 0 (the trial ends without counting as failed).

    Args:
        trial: the trial being trained.
        backend: where reports go (the master, or an in-memory record).
        storage: where checkpoints are written.
        allocation_id: this process's allocation (``"local"`` off-cluster).
        distributed: the process layout; one process when None.
        searcher_poll_interval: seconds between searcher asks while no operation is ready.
        preempt_mode: who asks for the preemption signal (see :class:`PreemptMode`).
        preempt_poll_seconds: seconds each preemption long poll waits, in (0, 60].
        info: the task's cluster info; None off-cluster.
        experiment_config: ``trial.config`` already parsed by the caller
            (:func:`~dauntless.config.parse_experiment_config`), so that it is not parsed
            again (about 0.5 ms of CPU each time); parsed here when None.

    Attributes:
        trial, info, distributed, train, checkpoint, searcher, preempt, profiler: the
            parts (``profiler`` samples system metrics only on a cluster, on each node's
            chief-local process; it starts at once when the config's
            ``profiling.enabled`` is true).

    Raises:
        TypeError: if ``trial`` or ``backend`` has the wrong type.
    """

    def __init__(
        self,
        trial: TrialInfo,
        *,
        backend: Backend,
        storage: StorageManager,
        allocation_id: str = "local",
        distributed: DistributedContext | None = None,
        searcher_poll_interval: float = 1.0,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        preempt_poll_seconds: float = DEFAULT_POLL_SECONDS,
        info: ClusterInfo | None = None,
        experiment_config: ExperimentConfig | None = None,
    ) -> None:
        if not isinstance(trial, TrialInfo):
            raise TypeError(f"trial must be a TrialInfo, got {type(trial).__name__}")
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be a Backend, got {type(backend).__name__}")
        if distributed is not None and not isinstance(distributed, DistributedContext):
            raise TypeError(
                f"distributed must be a DistributedContext, got {type(distributed).__name__}"
            )
        self.trial = trial
        self.info = info
        self.backend = backend
        self.distributed = distributed or DistributedContext()
        self.train = TrainContext(
            backend,
            trial.trial_id,
            trial.trial_run_id,
            experiment_id=trial.experiment_id,
            storage=storage,
            rank=self.distributed.rank,
        )
        self.checkpoint = CheckpointContext(
            storage, backend, trial.trial_id, allocation_id, self.distributed
        )
        if trial.config.get("debug") is True:
            # The experiment's ``debug: true``: Dauntless's own loggers in the task log
            # at DEBUG level (Determined: debug logs for the trial).
            logging.getLogger("dauntless").setLevel(logging.DEBUG)
        self.searcher = SearcherContext(
            backend,
            trial.trial_id,
            poll_interval=searcher_poll_interval,
            distributed=self.distributed,
            own_length=_own_length(trial.config, experiment_config),
        )
        self.preempt = PreemptContext(
            backend,
            allocation_id,
            distributed=self.distributed,
            mode=preempt_mode,
            poll_seconds=preempt_poll_seconds,
        )
        self.profiler = _profiler_for(backend, trial, info, self.distributed)
        self._closed = False
        if _profiling_config(trial.config).get("enabled") is True:
            # The experiment's ``profiling.enabled`` (Determined's legacy switch) turns
            # the profiler on for every kind of trial: Core API, Trainer, PyTorchTrial.
            self.profiler.on()

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if isinstance(value, dauntless.InvalidHP):
            logger.info("the trial raised InvalidHP (%s): ending it early", value)
            if self.distributed.is_chief:
                self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            self.close()
            raise SystemExit(0) from value
        if value is not None:
            try:
                self.close()
            except Exception as exc:  # do not mask the error that ended the block
                logger.error("closing the context after an error: %s", exc)
            return
        self.close()

    def start_background(self) -> None:
        """Start the background work now rather than at its first use: the preemption
        watcher (on the ranks that watch) and, on the chief, which is the rank that
        reports, the backend's report sender and its connection.

        The training harness calls this just before the first batch, so that starting
        threads and opening connections does not stall the first batches. Never raises:
        what cannot start now starts at its first use.
        """
        self.preempt.start()
        if self.distributed.is_chief:
            self.backend.start_background()

    def alert(
        self, title: str | None = None, description: str | None = None, level: str = "info"
    ) -> None:
        """Send a custom alert to the webhooks with a custom trigger that the
        experiment's config names (``integrations.webhooks``; Determined's
        ``core_context.alert``).

        Args:
            title: a short title (None: none).
            description: more text (None: none).
            level: ``info``, ``warn``, ``debug`` or ``error``.

        Raises:
            ValueError: ``level`` is not one of those, or the trial does not run on a
                cluster (only the master delivers webhooks).
            APIError, MasterUnreachableError: when the master cannot answer.
        """
        if level not in ("info", "warn", "debug", "error"):
            raise ValueError(f"level must be one of info, warn, debug, error; got {level!r}")
        if not isinstance(self.backend, MasterBackend):
            raise ValueError("alerts can be sent only by a trial running on a cluster")
        data = {"title": title or "", "description": description or "", "level": level}
        self.backend.send_alert(self.trial.experiment_id, self.trial.trial_id, data)

    def close(self) -> None:
        """Wait for a background checkpoint upload in flight, stop the preemption
        watcher and release the backend's resources.

        Raises:
            StoreError, OSError: the error of a background checkpoint upload (raised
                after everything is released).
        """
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        self.profiler.off()  # its last report goes before the backend closes
        try:
            self.checkpoint.wait_for_uploads()
        except Exception as exc:
            error = exc
        self.preempt.stop()
        self.backend.close()  # also ends the watcher's long poll in flight
        self.preempt.close()
        if getattr(self.distributed, "_started_group", False):
            # A process group the context started itself (a hand-built or launcher
            # context): end it here, as gloo aborts a process that exits with it alive.
            self.distributed.close()
        if error is not None:
            raise error

    @classmethod
    def from_cluster_info(
        cls,
        info: ClusterInfo,
        *,
        session: Session | None = None,
        storage: StorageManager | None = None,
        distributed: DistributedContext | None = None,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        preempt_poll_seconds: float = DEFAULT_POLL_SECONDS,
        experiment_config: ExperimentConfig | None = None,
    ) -> Context:
        """Build the context of a trial task from its cluster info.

        Args:
            info: from :meth:`ClusterInfo.from_env`; must describe a trial.
            session: the master session; a new one to ``info.master_url`` when None.
            storage: the checkpoint storage; built from the experiment config's
                ``checkpoint_storage`` when None.
            distributed: the process layout; one process when None.
            preempt_mode: who asks for the preemption signal.
            preempt_poll_seconds: seconds each preemption long poll waits.
            experiment_config: ``info.trial.config`` already parsed by the caller; it is
                parsed here when None (and needed).

        Raises:
            ValueError: if ``info`` has no trial, the experiment config is invalid or
                names no ``checkpoint_storage``, or the storage type is unsupported.
        """
        if info.trial is None:
            raise ValueError(f"task type {info.task_type} is not a trial: no trial info")
        if storage is None:
            from dauntless.config import parse_experiment_config

            if experiment_config is None:
                experiment_config = parse_experiment_config(info.trial.config)
            config = experiment_config
            if config.checkpoint_storage is None:
                raise ValueError(
                    "the experiment config has no checkpoint_storage; the master fills it "
                    "in, so DET_EXPERIMENT_CONFIG should hold the resolved config"
                )
            storage = build_storage(config.checkpoint_storage)
        backend = MasterBackend(
            session or Session(info.master_url, max_attempts=TRIAL_MASTER_ATTEMPTS)
        )
        return cls(
            info.trial,
            backend=backend,
            storage=storage,
            allocation_id=info.allocation_id,
            distributed=distributed,
            preempt_mode=preempt_mode,
            preempt_poll_seconds=preempt_poll_seconds,
            info=info,
            experiment_config=experiment_config,
        )
