"""``dauntless.core.init()``: the Core API entry point, on a cluster or off it."""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from dauntless.storage import DirectoryStorageManager, StorageManager, build_storage

from ._backend import LocalBackend
from ._cluster_info import TASK_TYPE_TRIAL, ClusterInfo, TrialInfo
from ._context import Context
from ._distributed import DistributedContext
from ._preempt import PreemptMode

#: Where checkpoints go off-cluster when no ``checkpoint_storage`` is given.
DEFAULT_LOCAL_CHECKPOINT_DIR = os.path.join(tempfile.gettempdir(), "dauntless-checkpoints")


class TensorboardMode(enum.Enum):
    """Who writes TensorBoard files: ``AUTO`` (the platform, from reported metrics) or
    ``MANUAL`` (the user's code, under ``get_tensorboard_path()``)."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


def storage_from(checkpoint_storage: Any) -> StorageManager:
    """The checkpoint storage a ``checkpoint_storage`` argument names.

    Args:
        checkpoint_storage: a :class:`~dauntless.storage.StorageManager`; a directory
            path (str or path-like, made absolute; ``file:///p`` too); ``s3://bucket/prefix``
            or ``gs://bucket/prefix`` (default credentials); a ``checkpoint_storage`` config
            mapping (``{"type": "shared_fs", "host_path": ...}``; a relative
            ``directory`` path is taken from the working directory); or None for
            :data:`DEFAULT_LOCAL_CHECKPOINT_DIR`.

    Returns:
        The storage manager.

    Raises:
        ValueError: for an invalid config mapping or an unsupported storage type.
        TypeError: for anything else.
    """
    if checkpoint_storage is None:
        return DirectoryStorageManager(DEFAULT_LOCAL_CHECKPOINT_DIR)
    if isinstance(checkpoint_storage, StorageManager):
        return checkpoint_storage
    if isinstance(checkpoint_storage, str) and checkpoint_storage.startswith(("s3://", "gs://")):
        scheme, rest = checkpoint_storage.split("://", 1)
        bucket, _, prefix = rest.partition("/")
        return storage_from(
            {"type": "s3" if scheme == "s3" else "gcs", "bucket": bucket, "prefix": prefix or None}
        )
    if isinstance(checkpoint_storage, str) and checkpoint_storage.startswith("file://"):
        checkpoint_storage = checkpoint_storage[len("file://") :]
    if isinstance(checkpoint_storage, (str, os.PathLike)):
        return DirectoryStorageManager(os.path.abspath(os.fspath(checkpoint_storage)))
    if isinstance(checkpoint_storage, Mapping):
        raw = dict(checkpoint_storage)
        path = raw.get("container_path")
        if raw.get("type") == "directory" and isinstance(path, str) and path:
            raw["container_path"] = os.path.abspath(path)  # relative to the working dir
        from pydantic import TypeAdapter, ValidationError

        from dauntless.config import CheckpointStorageConfig

        try:
            config = TypeAdapter(CheckpointStorageConfig).validate_python(raw)
        except ValidationError as exc:
            raise ValueError(
                f"invalid checkpoint_storage {dict(checkpoint_storage)}: {exc}"
            ) from None
        return build_storage(config)
    raise TypeError(
        "checkpoint_storage must be a StorageManager, a directory path or a "
        f"checkpoint_storage config mapping, got {type(checkpoint_storage).__name__}"
    )


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: Any = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """Open the Core API: ``with dauntless.core.init() as core_context: ...``.

    On a cluster (the ``DET_*`` environment of a trial task) the context reports to the
    master, checkpoints to the experiment's ``checkpoint_storage``, follows the
    searcher's operations and watches the preemption signal. Off the cluster it runs in
    local mode: metrics are logged and kept in memory, checkpoints go to
    ``checkpoint_storage`` (a local directory by default), the searcher yields one
    operation of length 1, and preemption never comes.

    Args:
        distributed: the process layout of a multi-process task (for example
            ``DistributedContext.from_torch_distributed()``); one process when None.
        checkpoint_storage: where checkpoints go; see :func:`storage_from`. On a
            cluster None means the experiment's ``checkpoint_storage``.
        preempt_mode: who asks for the preemption signal (see :class:`PreemptMode`).
        tensorboard_mode: see :class:`TensorboardMode` (TensorBoard files are written
            straight to ``checkpoint_storage``, so both modes need no upload step).

    Returns:
        The :class:`Context`; leave its ``with`` block (or call ``close()``) at the end.

    Raises:
        TypeError: for arguments of the wrong type.
        ValueError: on a cluster, when the experiment asks for more than one slot but no
            ``distributed`` context is given, or the config or environment is invalid.
    """
    if not isinstance(preempt_mode, PreemptMode):
        raise TypeError(f"preempt_mode must be a PreemptMode, got {preempt_mode!r}")
    if not isinstance(tensorboard_mode, TensorboardMode):
        raise TypeError(f"tensorboard_mode must be a TensorboardMode, got {tensorboard_mode!r}")
    info = ClusterInfo.from_env()
    if info is None or info.task_type != TASK_TYPE_TRIAL or info.trial is None:
        return _local_context(distributed, checkpoint_storage, preempt_mode)
    from dauntless.config import parse_experiment_config

    config = parse_experiment_config(info.trial.config)
    slots = config.resources.slots_per_trial
    if distributed is None and slots > 1:
        raise ValueError(
            f"the experiment asks for {slots} slots per trial but core.init() got no "
            "distributed context: pass distributed=DistributedContext.from_torch_distributed()"
            " from a process started by a distributed launcher"
        )
    storage = None if checkpoint_storage is None else storage_from(checkpoint_storage)
    return Context.from_cluster_info(
        info,
        storage=storage,
        distributed=distributed,
        preempt_mode=preempt_mode,
        experiment_config=config,
    )


def _local_context(
    distributed: DistributedContext | None, checkpoint_storage: Any, preempt_mode: PreemptMode
) -> Context:
    trial = TrialInfo(trial_id=0, experiment_id=0, trial_seed=0, hparams={}, config={})
    return Context(
        trial,
        backend=LocalBackend([1], log_reports=True),
        storage=storage_from(checkpoint_storage),
        distributed=distributed,
        preempt_mode=preempt_mode,
    )
