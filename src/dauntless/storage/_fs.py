"""The file-system storage managers: ``shared_fs`` and ``directory``."""

from __future__ import annotations

import os
from pathlib import Path

from dauntless.config import DirectoryStorage, S3Storage, SharedFSStorage

from ._base import FileSystemStorageManager, StorageManager


class SharedFSStorageManager(FileSystemStorageManager):
    """``checkpoint_storage.type: shared_fs``: ``<host_path>/<storage_path>/<uuid>/``.

    Trials run as plain processes on the agents' hosts, so ``host_path`` is used as is
    (Determined mounts it into containers; there is no container here).

    Args:
        host_path: absolute directory shared by the master and every agent.
        storage_path: sub-directory of ``host_path`` (relative), or an absolute path that
            lies under ``host_path``; None or ``""`` means ``host_path`` itself.

    Raises:
        ValueError: if ``host_path`` is not absolute, or ``storage_path`` leads outside
            ``host_path`` (for example ``../elsewhere`` or ``/other``).
    """

    def __init__(self, host_path: str, storage_path: str | None = None) -> None:
        if not isinstance(host_path, str) or not os.path.isabs(host_path):
            raise ValueError(
                f"checkpoint_storage.host_path must be an absolute path, got {host_path!r}"
            )
        host = Path(os.path.normpath(host_path))
        if storage_path:
            base = Path(os.path.normpath(host / storage_path))
            if base != host and host not in base.parents:
                raise ValueError(
                    f"checkpoint_storage.storage_path {storage_path!r} must lie under "
                    f"host_path {host_path!r}: give a relative path, or an absolute one "
                    "inside host_path"
                )
        else:
            base = host
        super().__init__(base)
        self.host_path = host
        self.storage_path = storage_path or ""

    @classmethod
    def from_config(cls, config: SharedFSStorage) -> SharedFSStorageManager:
        """Build from a validated ``shared_fs`` config (see the class for the rules)."""
        return cls(config.host_path, config.storage_path)


class DirectoryStorageManager(FileSystemStorageManager):
    """``checkpoint_storage.type: directory``: ``<container_path>/<uuid>/``.

    Args:
        container_path: absolute directory that every task can already see.

    Raises:
        ValueError: if ``container_path`` is not absolute.
    """

    def __init__(self, container_path: str | os.PathLike[str]) -> None:
        super().__init__(container_path)

    @classmethod
    def from_config(cls, config: DirectoryStorage) -> DirectoryStorageManager:
        """Build from a validated ``directory`` config."""
        return cls(config.container_path)


def build_storage(config: SharedFSStorage | DirectoryStorage | S3Storage) -> StorageManager:
    """Build the storage manager an experiment's ``checkpoint_storage`` asks for.

    Args:
        config: a validated ``checkpoint_storage`` model (``dauntless.config``).

    Returns:
        A :class:`SharedFSStorageManager` or :class:`DirectoryStorageManager`.

    Raises:
        ValueError: for ``type: s3`` (not supported yet), or a path rule broken (see the
            managers).
        TypeError: if ``config`` is not a checkpoint storage config.
    """
    if isinstance(config, SharedFSStorage):
        return SharedFSStorageManager.from_config(config)
    if isinstance(config, DirectoryStorage):
        return DirectoryStorageManager.from_config(config)
    if isinstance(config, S3Storage):
        raise ValueError("checkpoint_storage.type 's3' is not supported yet")
    raise TypeError(
        "config must be a checkpoint storage config (SharedFSStorage, DirectoryStorage or "
        f"S3Storage), got {type(config).__name__}"
    )
