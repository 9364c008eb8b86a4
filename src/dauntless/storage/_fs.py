"""The file-system storage managers: ``shared_fs`` and ``directory``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the pydantic config models load only when a store is built
    from dauntless.config import DirectoryStorage, SharedFSStorage

from ._base import FileSystemStorageManager, StorageManager
from ._object import AzureStorageManager, GCSStorageManager, S3StorageManager


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


def build_storage(config: Any) -> StorageManager:
    """Build the storage manager an experiment's ``checkpoint_storage`` asks for.

    Building one checks that the store's client library is installed but does not
    contact the store.

    Args:
        config: a validated ``checkpoint_storage`` model (``dauntless.config``).

    Returns:
        A :class:`SharedFSStorageManager`, :class:`DirectoryStorageManager`,
        :class:`S3StorageManager`, :class:`GCSStorageManager` or
        :class:`AzureStorageManager`.

    Raises:
        ImportError: the store's client library is missing; the message names the extra
            that installs it (``pip install 'dauntless[s3]'``).
        ValueError: a path rule is broken (see the managers).
        TypeError: if ``config`` is not a checkpoint storage config.
    """
    from dauntless.config import (
        AzureStorage,
        DirectoryStorage,
        GCSStorage,
        S3Storage,
        SharedFSStorage,
    )

    if isinstance(config, SharedFSStorage):
        return SharedFSStorageManager.from_config(config)
    if isinstance(config, DirectoryStorage):
        return DirectoryStorageManager.from_config(config)
    if isinstance(config, S3Storage):
        return S3StorageManager.from_config(config)
    if isinstance(config, GCSStorage):
        return GCSStorageManager.from_config(config)
    if isinstance(config, AzureStorage):
        return AzureStorageManager.from_config(config)
    raise TypeError(
        "config must be a checkpoint storage config (SharedFSStorage, DirectoryStorage, "
        f"S3Storage, GCSStorage or AzureStorage), got {type(config).__name__}"
    )
