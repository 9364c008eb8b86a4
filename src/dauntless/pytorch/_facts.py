"""The getters of a PyTorchTrialContext: the trial's facts and where training stands."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dauntless.config import ExperimentConfig, const_values, parse_experiment_config
from dauntless.core import Context, DistributedContext, TrialInfo
from dauntless.storage import FileSystemStorageManager

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class _TrialFacts:
    """Hyperparameters, config, ids, batch sizes and the training position (base class of
    :class:`~dauntless.pytorch.PyTorchTrialContext`)."""

    def __init__(
        self,
        trial: TrialInfo,
        core: Context | None,
        distributed: DistributedContext,
        enable_tensorboard_logging: bool,
    ) -> None:
        if not isinstance(trial, TrialInfo):
            raise TypeError(f"trial must be a dauntless.core.TrialInfo, got {type(trial).__name__}")
        if not isinstance(distributed, DistributedContext):
            raise TypeError(
                f"distributed must be a DistributedContext, got {type(distributed).__name__}"
            )
        self._trial = trial
        self._core = core
        self._config: ExperimentConfig = parse_experiment_config(trial.config)
        self.distributed = distributed
        self._current_batch = trial.steps_completed
        self._initial_batch = trial.steps_completed
        self._epoch_len: int | None = None
        self._stop_requested = False
        self._tensorboard_logging = bool(enable_tensorboard_logging)
        self._tensorboard_path: Path | None = None
        # The checkpoint-time TensorBoard upload in flight (see _sync_tensorboard).
        self._tensorboard_sync: threading.Thread | None = None
        self._tensorboard_writer: SummaryWriter | None = None

    # ----------------------------------------------------------------- the trial

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter value of this trial.

        Raises:
            KeyError: if the trial has no hyperparameter ``name`` (the message lists the
                ones it has).
        """
        if name not in self._trial.hparams:
            raise KeyError(
                f"hyperparameter {name!r} is not defined; this trial has "
                f"{sorted(self._trial.hparams)}"
            )
        return self._trial.hparams[name]

    def get_hparams(self) -> dict[str, Any]:
        """All hyperparameter values of this trial (a copy)."""
        return dict(self._trial.hparams)

    def get_data_config(self) -> dict[str, Any]:
        """The experiment config's ``data`` section (a copy)."""
        return dict(self._config.data)

    def get_experiment_config(self) -> dict[str, Any]:
        """The resolved experiment config, as JSON data."""
        return dict(self._trial.config)

    def get_experiment_id(self) -> int:
        """The experiment's id (0 in local training)."""
        return self._trial.experiment_id

    def get_trial_id(self) -> int:
        """The trial's id (0 in local training)."""
        return self._trial.trial_id

    def get_trial_seed(self) -> int:
        """The trial seed (0..2**31-1) that seeded ``random``, ``numpy`` and ``torch``."""
        return self._trial.trial_seed

    @property
    def experiment_config(self) -> ExperimentConfig:
        """The parsed, validated experiment config."""
        return self._config

    # ----------------------------------------------------------------- batch sizes

    def get_global_batch_size(self) -> int:
        """Records per batch summed over all processes: per-slot size x processes.

        Raises:
            ValueError: see :meth:`get_per_slot_batch_size`.
        """
        return self.get_per_slot_batch_size() * self.distributed.size

    def get_per_slot_batch_size(self) -> int:
        """Records per batch in this process: ``global_batch_size / processes``.

        The processes are ``resources.slots_per_trial`` ranks in a distributed trial.

        Raises:
            ValueError: if the trial has no int ``global_batch_size`` hyperparameter, or
                it is smaller than the number of processes or not divisible by it.
        """
        gbs = self._trial.hparams.get("global_batch_size")
        if gbs is None:
            consts = const_values(self._config.hyperparameters) or {}
            gbs = consts.get("global_batch_size")
        if not isinstance(gbs, int) or isinstance(gbs, bool) or gbs < 1:
            raise ValueError(
                "hyperparameter global_batch_size must be a positive int (records per batch "
                f"over all slots), got {gbs!r}: add it to the config's hyperparameters"
            )
        if gbs < self.distributed.size:
            raise ValueError(
                f"hyperparameter global_batch_size ({gbs}) is smaller than the number of "
                f"processes ({self.distributed.size}, resources.slots_per_trial): raise "
                "global_batch_size to at least slots_per_trial"
            )
        if gbs % self.distributed.size:
            raise ValueError(
                f"hyperparameter global_batch_size ({gbs}) is not divisible by the number of "
                f"processes ({self.distributed.size}, resources.slots_per_trial): every slot "
                "trains the same number of records per batch"
            )
        return gbs // self.distributed.size

    # ----------------------------------------------------------------- position

    def get_initial_batch(self) -> int:
        """Batches already trained when this process started (0 unless resuming)."""
        return self._initial_batch

    def current_train_batch(self) -> int:
        """The index of the batch being trained (or next to be), since the trial began."""
        return self._current_batch

    def current_train_epoch(self) -> int:
        """The epoch of :meth:`current_train_batch` (``batch // batches_per_epoch``).

        Raises:
            RuntimeError: before the harness has built the training data.
        """
        return self._current_batch // self._require_epoch_len()

    def is_epoch_start(self) -> bool:
        """True if the current batch is the first of an epoch.

        Raises:
            RuntimeError: before the harness has built the training data.
        """
        return self._current_batch % self._require_epoch_len() == 0

    def is_epoch_end(self) -> bool:
        """True if the current batch is the last of an epoch.

        Raises:
            RuntimeError: before the harness has built the training data.
        """
        n = self._require_epoch_len()
        return self._current_batch % n == n - 1

    def _require_epoch_len(self) -> int:
        if self._epoch_len is None:
            raise RuntimeError(
                "the epoch length is known only once the harness has built the training "
                "data loader (call this from train_batch, evaluate_batch or a callback)"
            )
        return self._epoch_len

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the harness to checkpoint and stop after the batch in progress.

        The trial then exits as if preempted and resumes when rescheduled. With several
        ranks, asked on any rank, every rank stops after the same batch: the batch in
        progress when it ends a reporting, validation or checkpoint period or the
        searcher operation, else the one after it (the per-batch vote between those
        boundaries is read one batch later, so it does not hold up training).

        Raises:
            TypeError: if ``stop_requested`` is not a bool.
        """
        if not isinstance(stop_requested, bool):
            raise TypeError(f"stop_requested must be a bool, got {type(stop_requested).__name__}")
        self._stop_requested = stop_requested

    def get_stop_requested(self) -> bool:
        """Whether :meth:`set_stop_requested` asked the trial to stop."""
        return self._stop_requested

    # ----------------------------------------------------------------- TensorBoard

    def get_tensorboard_path(self) -> Path:
        """The directory for this trial's TensorBoard event files (created).

        With a file-system checkpoint storage it is
        ``<storage>/tensorboard/experiment/<experiment id>/trial/<trial id>/`` (beside
        the checkpoints, visible to every agent); otherwise a directory under the
        system's temporary directory, whose files are uploaded to the same relative path
        of the object store after each checkpoint and when training ends.
        """
        if self._tensorboard_path is None:
            rel = Path(
                "experiment", str(self.get_experiment_id()), "trial", str(self.get_trial_id())
            )
            storage = self._core.checkpoint.storage if self._core is not None else None
            if isinstance(storage, FileSystemStorageManager):
                base = storage.base_path / "tensorboard"
            else:
                base = Path(tempfile.gettempdir(), f"dauntless-tensorboard-{os.getuid()}")
            self._tensorboard_path = base / rel
        self._tensorboard_path.mkdir(parents=True, exist_ok=True)
        return self._tensorboard_path

    def _tensorboard_rel(self) -> str:
        return f"tensorboard/experiment/{self.get_experiment_id()}/trial/{self.get_trial_id()}"

    def _sync_tensorboard(self, wait: bool = False) -> None:
        """Upload this trial's TensorBoard files to an object store (chief only; a file
        system storage needs nothing). A failure is logged: event files must not end a
        trial.

        After a checkpoint (``wait`` False) the upload runs on a thread of its own, so a
        slow or unreachable store never holds up training (nor the next checkpoint's
        report); while one is in flight the next is skipped (each uploads the whole
        directory). At the end of training (``wait`` True) it waits for the one in
        flight, then uploads the final files before returning.
        """
        storage = self._core.checkpoint.storage if self._core is not None else None
        path = self._tensorboard_path
        if (
            storage is None
            or self._core is None
            or isinstance(storage, FileSystemStorageManager)
            or path is None
            or not path.is_dir()
            or not self._core.distributed.is_chief
        ):
            return
        writer = self._tensorboard_writer
        if writer is not None:
            writer.flush()
        rel = self._tensorboard_rel()

        def upload() -> None:
            try:
                storage.upload_prefix(path, rel)
            except Exception as exc:
                logging.getLogger("dauntless.pytorch").warning(
                    "uploading TensorBoard files to checkpoint storage failed: %s", exc
                )

        in_flight = self._tensorboard_sync
        if wait:
            if in_flight is not None:
                in_flight.join()
            self._tensorboard_sync = None
            upload()
            return
        if in_flight is not None and in_flight.is_alive():
            return
        self._tensorboard_sync = threading.Thread(
            target=upload, name="tensorboard-sync", daemon=True
        )
        self._tensorboard_sync.start()

    def get_tensorboard_writer(self) -> SummaryWriter:
        """A ``torch.utils.tensorboard.SummaryWriter`` writing under
        :meth:`get_tensorboard_path` (the same one on every call).

        Raises:
            ImportError: if the ``tensorboard`` package is not installed (torch's writer
                needs it): ``pip install tensorboard``.
        """
        if self._tensorboard_writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ImportError(
                    "get_tensorboard_writer() needs the 'tensorboard' package, which is not "
                    "installed: pip install tensorboard"
                ) from exc
            self._tensorboard_writer = SummaryWriter(str(self.get_tensorboard_path()))
        return self._tensorboard_writer

    def set_enable_tensorboard_logging(self, enable: bool) -> None:
        """Turn the harness's TensorBoard logging of reported metrics on or off."""
        self._tensorboard_logging = bool(enable)

    def get_enable_tensorboard_logging(self) -> bool:
        """Whether the harness writes reported metrics to TensorBoard (when a writer was
        created with :meth:`get_tensorboard_writer`)."""
        return self._tensorboard_logging
