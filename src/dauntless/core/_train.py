"""``TrainContext``: report metrics, progress and early exits."""

from __future__ import annotations

import enum
import logging
import math
import numbers
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._backend import METRIC_GROUPS, Backend, MetricReport

logger = logging.getLogger("dauntless.core")


class EarlyExitReason(str, enum.Enum):
    """Why a trial ends before its searcher closes it."""

    INVALID_HP = "INVALID_HP"


_PLAIN = (float, int, bool, str)


def to_json_value(value: Any) -> Any:
    """Convert a metric value to plain JSON data.

    Python numbers, bools, strings and None pass through; numpy scalars and one-element
    tensors/arrays become Python numbers; larger tensors and arrays become nested lists;
    lists, tuples and dicts are converted element-wise.

    Args:
        value: a metric value.

    Returns:
        The JSON-ready value.

    Raises:
        TypeError: for anything else (an object with no JSON form).
    """
    if value is None or type(value) in _PLAIN:  # the common case, without ABC checks
        return value
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    tolist = getattr(value, "tolist", None)  # torch.Tensor, numpy arrays and scalars
    if callable(tolist):
        if hasattr(value, "detach"):
            value = value.detach().cpu()
        return to_json_value(tolist())
    raise TypeError(f"a metric value of type {type(value).__name__} has no JSON form")


def _clean_metrics(metrics: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{what} must be a dict of name -> value, got {type(metrics).__name__}")
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"{what} names must be str, got {name!r}")
        try:
            out[name] = to_json_value(value)
        except TypeError as exc:
            logger.warning("dropping %s %r: %s", what, name, exc)
    return out


class TrainContext:
    """Report a trial's training and validation metrics, progress and early exit.

    Only the chief (rank 0) reports.

    Args:
        backend: where reports go.
        trial_id: the trial reported on.
        trial_run_id: the current run of the trial (counts from 1).
        experiment_id: the trial's experiment (for
            :meth:`get_experiment_best_validation`).
        storage: the checkpoint storage TensorBoard files are uploaded to (None: no
            upload, see :meth:`upload_tensorboard_files`).
        rank: this process's rank (passed to the mangler of uploaded files).
    """

    def __init__(
        self,
        backend: Backend,
        trial_id: int,
        trial_run_id: int = 1,
        experiment_id: int = 0,
        *,
        storage: Any = None,
        rank: int = 0,
    ) -> None:
        self._backend = backend
        self.trial_id = trial_id
        self.trial_run_id = trial_run_id
        self.experiment_id = experiment_id
        self._storage = storage
        self._rank = rank

    # ------------------------------------------------------------------ TensorBoard

    def _tensorboard_rel(self) -> Path:
        return Path("experiment", str(self.experiment_id), "trial", str(self.trial_id))

    def get_tensorboard_path(self) -> Path:
        """A local directory (created) for this trial's TensorBoard event files; they
        reach the cluster's TensorBoards through :meth:`upload_tensorboard_files`.

        It is ``<temp dir>/dauntless-tensorboard-<uid>/experiment/<E>/trial/<T>/``.
        """
        path = Path(
            tempfile.gettempdir(), f"dauntless-tensorboard-{os.getuid()}", self._tensorboard_rel()
        )
        path.mkdir(parents=True, exist_ok=True)
        return path

    def upload_tensorboard_files(
        self,
        selector: Callable[[Path], bool] = lambda _p: True,
        mangler: Callable[[Path, int], Path] = lambda p, _rank: p,
    ) -> list[Path]:
        """Copy files under :meth:`get_tensorboard_path` into the checkpoint storage's
        ``tensorboard/experiment/<E>/trial/<T>/``, where ``det tensorboard start`` reads
        them (Determined's Core API call). Files already uploaded with the same size and
        modification time are skipped.

        Args:
            selector: gets each file's path relative to the TensorBoard directory;
                True uploads it.
            mangler: maps a relative path and this process's rank to the name it is
                stored under (e.g. to keep ranks apart).

        Returns:
            The stored relative paths that were copied now.

        Raises:
            RuntimeError: the context has no file-system checkpoint storage (object
                stores are not supported by this call yet), naming the storage.
        """
        from dauntless.storage import FileSystemStorageManager

        if not isinstance(self._storage, FileSystemStorageManager):
            raise RuntimeError(
                "upload_tensorboard_files needs a file-system checkpoint storage (shared_fs "
                f"or directory); this context has {type(self._storage).__name__}"
            )
        src = self.get_tensorboard_path()
        dest_root = Path(self._storage.base_path, "tensorboard", self._tensorboard_rel())
        copied = []
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            rel = path.relative_to(src)
            if not selector(rel):
                continue
            target_rel = Path(mangler(rel, self._rank))
            target = dest_root / target_rel
            st = path.stat()
            if target.exists():
                tt = target.stat()
                if tt.st_size == st.st_size and int(tt.st_mtime) == int(st.st_mtime):
                    continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(target_rel)
        return copied

    def report_metrics(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report one set of metrics.

        Args:
            group: ``training`` or ``validation``.
            steps_completed: batches trained when the metrics were taken (>= 0).
            metrics: name -> value; values are converted by :func:`to_json_value` and
                ones without a JSON form are dropped with a warning.
            batch_metrics: optional per-batch metrics of a training report.

        Raises:
            ValueError: for an unknown group or a negative ``steps_completed``.
            TypeError: if ``metrics`` is not a mapping with str keys.
        """
        if group not in METRIC_GROUPS:
            raise ValueError(f"group must be one of {METRIC_GROUPS}, got {group!r}")
        if not isinstance(steps_completed, int) or steps_completed < 0:
            raise ValueError(f"steps_completed must be an int >= 0, got {steps_completed!r}")
        clean_batches = None
        if batch_metrics is not None:
            clean_batches = [_clean_metrics(m, "batch metrics") for m in batch_metrics]
        self._backend.report_metrics(
            MetricReport(
                trial_id=self.trial_id,
                group=group,
                steps_completed=steps_completed,
                trial_run_id=self.trial_run_id,
                metrics=_clean_metrics(metrics, f"{group} metrics"),
                batch_metrics=clean_batches,
            )
        )

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report training metrics (averaged over a reporting period); see
        :meth:`report_metrics`."""
        self.report_metrics("training", steps_completed, metrics, batch_metrics)

    def _report_float_training_metrics(
        self,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, float | None]],
    ) -> None:
        """:meth:`report_training_metrics` for the PyTorch harness, whose per-batch
        metrics are already dicts of str -> float or None: they are copied (the report
        is sent later, from another thread) instead of converted value by value, which
        costs about a fifth as much for the 100 batches of a reporting period."""
        if not isinstance(steps_completed, int) or steps_completed < 0:
            raise ValueError(f"steps_completed must be an int >= 0, got {steps_completed!r}")
        self._backend.report_metrics(
            MetricReport(
                trial_id=self.trial_id,
                group="training",
                steps_completed=steps_completed,
                trial_run_id=self.trial_run_id,
                metrics=_clean_metrics(metrics, "training metrics"),
                batch_metrics=[dict(m) for m in batch_metrics],
            )
        )

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report the metrics of one validation; see :meth:`report_metrics`."""
        self.report_metrics("validation", steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        """Report the trial's progress.

        Args:
            progress: a fraction in [0, 1].

        Raises:
            ValueError: if ``progress`` is not a finite number in [0, 1].
        """
        if not isinstance(progress, numbers.Real) or not (
            math.isfinite(progress) and 0 <= progress <= 1
        ):
            raise ValueError(f"progress must be a number in [0, 1], got {progress!r}")
        self._backend.report_progress(self.trial_id, float(progress))

    def set_status(self, status: str) -> None:
        """Report what the trial is doing now (``"validating"``, ``"checkpointing"``);
        the CLI (``det trial describe``) and the WebUI show it beside the trial's state.

        Args:
            status: at most 256 characters.

        Raises:
            TypeError: ``status`` is not a str. ValueError: it is too long.
        """
        if not isinstance(status, str):
            raise TypeError(f"status must be a str, got {type(status).__name__}")
        if len(status) > 256:
            raise ValueError(f"status must be at most 256 characters, got {len(status)}")
        self._backend.set_status(self.trial_id, status)

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` into the trial's metadata, kept by the master and shown by
        the CLI and WebUI: objects present in both are merged key by key (recursively),
        other values replaced.

        Args:
            metadata: a JSON object (values as :func:`to_json_value` converts them).

        Raises:
            TypeError: ``metadata`` is not a mapping with str keys, or a value has no
                JSON form.
            APIError, MasterUnreachableError: when the master cannot store it.
        """
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
            raise TypeError("metadata must be a dict with str keys")
        self._backend.merge_metadata(self.trial_id, to_json_value(metadata))

    def get_metadata(self) -> dict[str, Any]:
        """The trial's metadata (``{}`` before any :meth:`set_metadata`).

        Raises:
            APIError, MasterUnreachableError: when the master cannot answer.
        """
        return self._backend.get_metadata(self.trial_id)

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher-metric value validated so far by any trial of the experiment.

        Returns:
            The value, or None when there is none yet.

        Raises:
            APIError, MasterUnreachableError: when the master cannot answer.
        """
        return self._backend.get_experiment_best_validation(self.experiment_id)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Report that the trial is ending early, e.g. for invalid hyperparameters.

        Raises:
            ValueError: if ``reason`` is not an :class:`EarlyExitReason`.
        """
        try:
            reason = EarlyExitReason(reason)
        except ValueError:
            raise ValueError(
                f"reason must be one of {[r.value for r in EarlyExitReason]}, got {reason!r}"
            ) from None
        self._backend.report_early_exit(self.trial_id, reason.value)
