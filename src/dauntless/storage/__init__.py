"""Checkpoint storage managers: where checkpoint directories are written and read.

Layout (docs/protocol.md, "Checkpoint layout"): one directory per checkpoint uuid,
written to ``<uuid>.tmp-<random>`` beside its final place and renamed when complete.
"""

from ._base import (
    FileSystemStorageManager,
    StorageManager,
    check_storage_id,
    directory_resources,
    full_disk_error,
)
from ._fs import DirectoryStorageManager, SharedFSStorageManager, build_storage
from ._object import (
    AzureStorageManager,
    GCSStorageManager,
    ObjectStorageManager,
    S3StorageManager,
    StoreError,
)
from ._stream import StreamingUpload

__all__ = [
    "AzureStorageManager",
    "GCSStorageManager",
    "ObjectStorageManager",
    "S3StorageManager",
    "StoreError",
    "StreamingUpload",
    "full_disk_error",
    "DirectoryStorageManager",
    "FileSystemStorageManager",
    "SharedFSStorageManager",
    "StorageManager",
    "build_storage",
    "check_storage_id",
    "directory_resources",
]
