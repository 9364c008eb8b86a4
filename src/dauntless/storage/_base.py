"""The checkpoint storage interface.

A checkpoint is a directory of files named by a uuid. A :class:`StorageManager` turns a
uuid into a place to write that directory (:meth:`StorageManager.store_path`), a place to
read it from (:meth:`StorageManager.restore_path`), and deletes it. Writers see a
checkpoint only when it is whole: implementations publish it atomically when the
``store_path`` block ends without an error.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import re
import shutil
import tempfile
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

_UUID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_storage_id(storage_id: str) -> str:
    """Validate a checkpoint id (a uuid) before it becomes part of a path.

    Args:
        storage_id: the checkpoint's uuid, for example ``"0c6b...-..."``.

    Returns:
        ``storage_id`` unchanged.

    Raises:
        TypeError: if it is not a ``str``.
        ValueError: if it is empty, longer than 128 characters, or holds characters other
            than letters, digits, ``_``, ``.`` and ``-`` (a ``/`` or ``..`` could escape the
            storage directory), or ends in a temporary-directory suffix.
    """
    if not isinstance(storage_id, str):
        raise TypeError(f"storage_id must be a str (a uuid), got {type(storage_id).__name__}")
    if not _UUID_RE.match(storage_id) or storage_id in (".", "..") or ".tmp-" in storage_id:
        raise ValueError(
            f"storage_id {storage_id!r} is not a valid checkpoint id: expected 1-128 "
            "letters, digits, '_', '.' or '-' (a uuid), starting with a letter or digit"
        )
    return storage_id


def directory_resources(path: str | os.PathLike[str]) -> dict[str, int]:
    """List the files under a directory with their sizes.

    Args:
        path: a checkpoint directory.

    Returns:
        ``{relative_path: size_in_bytes}`` for every regular file below ``path``, with
        ``/`` as separator, sorted by path. Directories themselves are not listed.

    Raises:
        FileNotFoundError: if ``path`` is not a directory.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint directory {str(root)!r} does not exist")
    out: dict[str, int] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            full = Path(dirpath, name)
            if full.is_file():
                out[full.relative_to(root).as_posix()] = full.stat().st_size
    return dict(sorted(out.items()))


#: Below this many free bytes a failed write is taken to be a full disk.
_FULL_DISK_BYTES = 1 << 20


def full_disk_error(exc: BaseException, path: Path) -> OSError | None:
    """Say "no space left on device at PATH" when a checkpoint write failed on a full disk.

    A full disk surfaces from ``torch.save`` as a serialisation ``RuntimeError`` and from
    file writes as ``OSError(ENOSPC)``; for either, when the disk of ``path`` is full
    (ENOSPC, or under 1 MiB free), this returns ``OSError(ENOSPC, "no space left on
    device at PATH")`` to raise in its place (``raise err from exc``).

    Args:
        exc: the error a write under ``path`` raised.
        path: the directory being written.

    Returns:
        The error to raise instead, or None when the disk is not full (raise ``exc``).
    """
    full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    if not full and isinstance(exc, (OSError, RuntimeError)):
        try:
            full = shutil.disk_usage(path if path.exists() else path.parent).free < _FULL_DISK_BYTES
        except OSError:
            full = False
    if not full:
        return None
    return OSError(errno.ENOSPC, f"no space left on device at {path}")


class StorageManager(abc.ABC):
    """Where checkpoints live: one directory per checkpoint uuid.

    Implementations: :class:`~dauntless.storage.SharedFSStorageManager` and
    :class:`~dauntless.storage.DirectoryStorageManager` (a local or shared file system).
    Build one from an experiment's ``checkpoint_storage`` with
    :func:`~dauntless.storage.build_storage`.
    """

    @abc.abstractmethod
    def store_path(self, storage_id: str) -> contextlib.AbstractContextManager[Path]:
        """Open a directory to write a new checkpoint into.

        Use as ``with manager.store_path(uuid) as path: ...``; write the checkpoint's
        files under ``path``. The checkpoint becomes visible (to
        :meth:`restore_path`, :meth:`resources`, other processes) only when the block
        exits without an exception; on an exception everything written is removed.

        Args:
            storage_id: the new checkpoint's uuid.

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
            FileExistsError: if a checkpoint with this id already exists.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def restore_path(self, storage_id: str) -> contextlib.AbstractContextManager[Path]:
        """Open a stored checkpoint for reading.

        Use as ``with manager.restore_path(uuid) as path: ...``; ``path`` holds the
        checkpoint's files for the duration of the block (a remote implementation
        downloads them there and removes them afterwards). Do not write under ``path``.

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
            FileNotFoundError: if no complete checkpoint has this id.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def delete(self, storage_id: str) -> bool:
        """Delete a checkpoint and all its files.

        Returns:
            True if something was deleted, False if no checkpoint had this id (deleting
            twice is not an error).

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def resources(self, storage_id: str) -> dict[str, int]:
        """The files of a stored checkpoint.

        Returns:
            ``{relative_path: size_in_bytes}``, sorted by path.

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
            FileNotFoundError: if no complete checkpoint has this id.
        """
        raise NotImplementedError  # abstract

    # Paths below the storage root that are not checkpoints (TensorBoard event files).

    @abc.abstractmethod
    def list_prefix(self, rel: str) -> dict[str, int]:
        """The files under ``rel``, a ``/``-separated path relative to the storage root
        (for example ``"tensorboard/experiment/3/trial/7"``).

        Returns:
            ``{path relative to rel: size_in_bytes}``, sorted; empty when none.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def download_prefix(self, rel: str, dst: str | os.PathLike[str]) -> dict[str, int]:
        """Copy the files under ``rel`` into the local directory ``dst`` (created).

        Returns:
            ``{relative path: size_in_bytes}`` of the files copied.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def upload_prefix(self, src: str | os.PathLike[str], rel: str) -> dict[str, int]:
        """Copy the files under the local directory ``src`` to ``rel`` (overwriting).

        Returns:
            ``{relative path: size_in_bytes}`` of the files copied.
        """
        raise NotImplementedError  # abstract


class FileSystemStorageManager(StorageManager):
    """Checkpoints as directories ``<base_path>/<uuid>/`` on a (local or shared) file system.

    ``store_path`` writes into ``<base_path>/<uuid>.tmp-<random>/`` beside the final
    place and renames it to ``<uuid>`` when complete. A rename within one directory is
    atomic on POSIX file systems, so readers never see a half-written checkpoint.

    Args:
        base_path: the directory holding one sub-directory per checkpoint; created on the
            first write if missing.

    Raises:
        TypeError: if ``base_path`` is not a str or path.
        ValueError: if ``base_path`` is empty or relative.
    """

    def __init__(self, base_path: str | os.PathLike[str]) -> None:
        if not isinstance(base_path, (str, os.PathLike)):
            raise TypeError(f"base_path must be a str or path, got {type(base_path).__name__}")
        path = Path(base_path)
        if not str(base_path) or not path.is_absolute():
            raise ValueError(f"base_path must be an absolute directory path, got {base_path!r}")
        self.base_path = path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.base_path)!r})"

    def _final(self, storage_id: str) -> Path:
        return self.base_path / check_storage_id(storage_id)

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[Path]:
        tmp = self.open_staging(storage_id)
        try:
            yield tmp
        except BaseException as exc:
            self.abandon(tmp)
            full = full_disk_error(exc, tmp) if isinstance(exc, (OSError, RuntimeError)) else None
            if full is None:
                raise
            raise full from exc
        self.publish(tmp, storage_id)

    def open_staging(self, storage_id: str) -> Path:
        """Make the directory a new checkpoint is written into before it is published:
        ``<base_path>/<uuid>.tmp-<random>/``, beside its final place (one file system,
        so :meth:`publish` renames it and copies nothing).

        :meth:`store_path` is this, the caller's writes, then :meth:`publish` (or
        :meth:`abandon` on an error); the steps are apart so that a caller can publish
        on another thread while its own goes on (``CheckpointContext.store_path`` with
        ``background=True``).

        Args:
            storage_id: the new checkpoint's uuid.

        Returns:
            The staging directory (empty).

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
            FileExistsError: if a checkpoint with this id already exists.
        """
        final = self._final(storage_id)
        if final.exists():
            raise FileExistsError(f"checkpoint {storage_id} already exists at {final}")
        self.base_path.mkdir(parents=True, exist_ok=True)
        return Path(_make_temp_dir(self.base_path, f"{storage_id}.tmp-"))

    def publish(self, tmp: Path, storage_id: str) -> None:
        """Make the staging directory ``tmp`` (from :meth:`open_staging`) checkpoint
        ``storage_id``: flush its files to disk (fsync), rename it into place (atomic)
        and flush the rename. On an error ``tmp`` is removed.

        Raises:
            OSError: ``no space left on device at PATH`` when the disk is full; another
                ``OSError`` of the flush or the rename.
        """
        try:
            _fsync_tree(tmp)
            os.rename(tmp, self._final(storage_id))
        except BaseException as exc:
            self.abandon(tmp)
            full = full_disk_error(exc, tmp) if isinstance(exc, (OSError, RuntimeError)) else None
            if full is None:
                raise
            raise full from exc
        _fsync_dir(self.base_path)

    def abandon(self, tmp: Path) -> None:
        """Remove a staging directory that will not be published (best effort)."""
        _remove_tree(tmp)

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        final = self._final(storage_id)
        if not final.is_dir():
            raise FileNotFoundError(f"no checkpoint {storage_id} under {self.base_path}")
        yield final

    def delete(self, storage_id: str) -> bool:
        """Delete the checkpoint, and any staging directory of it that a writer which
        died before publishing left behind (``<uuid>.tmp-<random>``: a trial killed
        during a background flush; its row is an orphan UPLOADING one that GC deletes).

        Returns:
            Whether anything was there to delete.
        """
        final = self._final(storage_id)  # also checks storage_id: no glob characters
        stale = [
            p
            for p in self.base_path.glob(f"{storage_id}.tmp-*")
            if not p.name.startswith(f"{storage_id}.tmp-deleting-")
        ]
        for path in stale:
            _remove_tree(path)
        if not final.exists():
            return bool(stale)
        # Rename first so that a crash half-way through never leaves a partial checkpoint
        # under its real name.
        doomed = self.base_path / f"{storage_id}.tmp-deleting-{uuidlib.uuid4().hex}"
        os.rename(final, doomed)
        _remove_tree(doomed)
        return True

    def resources(self, storage_id: str) -> dict[str, int]:
        final = self._final(storage_id)
        if not final.is_dir():
            raise FileNotFoundError(f"no checkpoint {storage_id} under {self.base_path}")
        return directory_resources(final)

    def _under(self, rel: str) -> Path:
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"path {rel!r} must not contain '..'")
        return self.base_path.joinpath(*parts)

    def list_prefix(self, rel: str) -> dict[str, int]:
        root = self._under(rel)
        return directory_resources(root) if root.is_dir() else {}

    def download_prefix(self, rel: str, dst: str | os.PathLike[str]) -> dict[str, int]:
        files = self.list_prefix(rel)
        src = self._under(rel)
        for name in files:
            target = Path(dst, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, target)
        Path(dst).mkdir(parents=True, exist_ok=True)
        return files

    def upload_prefix(self, src: str | os.PathLike[str], rel: str) -> dict[str, int]:
        files = directory_resources(src)
        root = self._under(rel)
        for name in files:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if Path(src, name).resolve() != target.resolve():
                shutil.copy2(Path(src, name), target)
        return files


def _make_temp_dir(parent: Path, prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` to disk so the rename publishes durable bytes."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                fd = os.open(full, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some file systems (and platforms) do not support fsync on directories.
        pass
    finally:
        os.close(fd)
