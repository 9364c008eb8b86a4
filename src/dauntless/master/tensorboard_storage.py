"""Where a trial's TensorBoard event files are, for the TensorBoards the master starts.

The harness writes them under ``<storage>/tensorboard/experiment/<E>/trial/<T>/``
(:meth:`dauntless.pytorch.PyTorchTrialContext.get_tensorboard_path`) in a file-system
checkpoint storage, which every agent sees at the same path, so a TensorBoard reads them
in place. Object stores need their files fetched first; a reader for a new storage type
is one more entry in :data:`LOGDIR_RESOLVERS` (and, on the agent, a fetch step).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dauntless.config import DirectoryStorage, SharedFSStorage
from dauntless.storage._fs import DirectoryStorageManager, SharedFSStorageManager


def _fs_base(storage: dict[str, Any]) -> str:
    if storage.get("type") == "shared_fs":
        cfg = SharedFSStorage.model_validate(storage)
        return str(SharedFSStorageManager.from_config(cfg).base_path)
    cfg2 = DirectoryStorage.model_validate(storage)
    return str(DirectoryStorageManager.from_config(cfg2).base_path)


LOGDIR_RESOLVERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "shared_fs": _fs_base,
    "directory": _fs_base,
}
"""Checkpoint storage type -> the storage's base directory on agents."""


def trial_logdir(storage: dict[str, Any], experiment_id: int, trial_id: int) -> str:
    """The directory holding one trial's event files.

    Args:
        storage: the experiment's resolved ``checkpoint_storage`` (JSON form).
        experiment_id, trial_id: the trial.

    Raises:
        ValueError: a storage type TensorBoards cannot read from yet (naming it).
    """
    kind = storage.get("type")
    resolver = LOGDIR_RESOLVERS.get(str(kind))
    if resolver is None:
        raise ValueError(
            f"TensorBoards read event files from {sorted(LOGDIR_RESOLVERS)} checkpoint "
            f"storage; this experiment's is {kind!r}"
        )
    return os.path.join(
        resolver(storage),
        "tensorboard",
        "experiment",
        str(experiment_id),
        "trial",
        str(trial_id),
    )
