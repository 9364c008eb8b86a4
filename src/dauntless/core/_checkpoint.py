"""``CheckpointContext``: store, restore, upload, download and delete checkpoints."""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import shutil
import tempfile
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dauntless
from dauntless.storage import (
    FileSystemStorageManager,
    ObjectStorageManager,
    StorageManager,
    StreamingUpload,
    check_storage_id,
    directory_resources,
    full_disk_error,
)

from ._backend import Backend, CheckpointReport
from ._distributed import DistributedContext
from ._train import to_json_value

METADATA_FILE = "metadata.json"

logger = logging.getLogger("dauntless.core")

Selector = Callable[[str], bool]
"""A filter on a checkpoint file's relative path (``/`` separators): keep it if True."""


class DownloadMode(enum.Enum):
    """How the processes of a task share a checkpoint they read.

    ``LocalWorkersShareDownload``: one copy per machine, made by its local chief; every
    process of the machine must call (a collective). ``NoSharedDownload``: each caller
    gets its own copy, no collective.
    """

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    """Write checkpoints to storage and report each one to the backend (chief only).

    A checkpoint is a directory named by a new uuid (its *storage id*). It becomes
    visible and is reported (with ``metadata.json`` written beside its files) only when
    complete. ``metadata`` must hold ``steps_completed`` (batches trained).

    Args:
        storage: where checkpoint directories live.
        backend: where completed checkpoints are reported.
        trial_id: the trial the checkpoints belong to.
        allocation_id: the allocation writing them.
        distributed: the process layout; one process when None.

    Raises:
        TypeError: if ``storage`` is not a StorageManager.
    """

    def __init__(
        self,
        storage: StorageManager,
        backend: Backend,
        trial_id: int,
        allocation_id: str,
        distributed: DistributedContext | None = None,
    ) -> None:
        if not isinstance(storage, StorageManager):
            raise TypeError(f"storage must be a StorageManager, got {type(storage).__name__}")
        self.storage = storage
        self._backend = backend
        self.trial_id = trial_id
        self.allocation_id = allocation_id
        self._dist = distributed or DistributedContext()
        # The background upload in flight (at most one): its thread and its outcome.
        self._upload_thread: threading.Thread | None = None
        self._upload_error: BaseException | None = None

    # ------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def store_path(
        self,
        metadata: Mapping[str, Any] | None = None,
        *,
        shard: bool = False,
        background: bool = False,
    ) -> Iterator[tuple[Path, str]]:
        """Write a new checkpoint.

        Use as ``with ctx.store_path({"steps_completed": n}) as (path, storage_id):`` and
        write files under ``path``. When the block ends without an error,
        ``metadata.json`` is written beside them (``metadata`` plus
        ``dauntless_version``), the directory is published atomically, and the
        checkpoint is reported with its ``resources`` (file sizes in bytes). On an error
        nothing is published or reported.

        Without ``shard`` only the chief may call it. With ``shard=True`` every process
        calls it (a collective): all write into the same directory (which must be on a
        file system they share), their metadata dicts are merged (the chief's wins on a
        conflict) and the chief publishes and reports.

        With an object store (``s3``, ``gcs``, ``azure``) the files are written to a
        local staging directory and each is uploaded, on a thread, as soon as it is
        closed (:class:`~dauntless.storage.StreamingUpload`; what is left when the block
        ends, ``metadata.json`` last); the checkpoint is reported as ``UPLOADING``
        before the first byte goes up (so that checkpoint GC knows of the objects if the
        process dies) and as ``COMPLETED`` once every file is in the store. If the block
        raises, what was sent is deleted. Without ``background`` the block's end waits
        for the upload. With ``background=True`` the block returns at once; at most one upload is in flight (the next
        checkpoint, :meth:`wait_for_uploads` and closing the context wait for it, and
        raise its error). On a file system ``background=True`` does the same with the
        flush to disk (fsync) and the rename that publish the checkpoint: the block
        returns once the files are written (as fast as ``torch.save`` alone) and the
        checkpoint is reported ``UPLOADING``, then ``COMPLETED`` once it is durable and
        in place.

        Args:
            metadata: JSON-ready data; must hold ``steps_completed`` (batches, int >= 0).
            shard: whether every process writes part of the checkpoint.
            background: upload on a background thread (chief-only, non-sharded).

        Yields:
            ``(path, storage_id)``: the directory to write into and the new uuid.

        Raises:
            ValueError: if ``steps_completed`` is missing or not an int >= 0, or a sharded
                checkpoint is asked of a storage that is not a file system.
            TypeError: if ``metadata`` is not a mapping or has no JSON form.
            RuntimeError: if a non-chief process calls it without ``shard``.
            StoreError: the object store refused the upload or could not be reached
                (with ``background``, raised by the next call that waits for it).
            OSError: ``no space left on device at PATH`` when the disk is full.
        """
        meta = _check_metadata({} if metadata is None else metadata)
        self.wait_for_uploads()
        if self._dist.size > 1 and shard:
            with self._store_sharded(meta) as out:
                yield out
            return
        if not self._dist.is_chief:
            raise RuntimeError(
                "store_path() without shard=True is chief-only: write the checkpoint on "
                "rank 0, or pass shard=True on every rank"
            )
        storage_id = str(uuidlib.uuid4())
        if isinstance(self.storage, ObjectStorageManager):
            with self._store_object(storage_id, meta, background) as path:
                yield path, storage_id
            return
        if background and isinstance(self.storage, FileSystemStorageManager):
            with self._store_file_system_background(storage_id, meta) as path:
                yield path, storage_id
            return
        with self.storage.store_path(storage_id) as path:
            yield path, storage_id
            _write_metadata(path, meta)
        self._report(storage_id, meta)

    @contextlib.contextmanager
    def _store_file_system_background(
        self, storage_id: str, meta: dict[str, Any]
    ) -> Iterator[Path]:
        """Write into a staging directory beside the final place; report ``UPLOADING``
        and return, then flush (fsync), rename and report ``COMPLETED`` on the upload
        thread, as an object store's upload is (issue 37: the flush cost the training
        loop as much as the ``torch.save`` it followed)."""
        storage = self.storage
        assert isinstance(storage, FileSystemStorageManager)
        staging = storage.open_staging(storage_id)
        try:
            try:
                yield staging
                _write_metadata(staging, meta)
                resources = directory_resources(staging)
            except (OSError, RuntimeError) as exc:
                full = full_disk_error(exc, staging)
                if full is None:
                    raise
                raise full from exc
            self._report(storage_id, meta, resources, state="UPLOADING")
        except BaseException:
            storage.abandon(staging)
            raise

        def run() -> None:
            try:
                storage.publish(staging, storage_id)
                self._report(storage_id, meta, resources)
            except BaseException as exc:
                self._upload_error = exc

        self._upload_thread = threading.Thread(
            target=run, name=f"checkpoint-publish-{storage_id[:8]}", daemon=True
        )
        self._upload_thread.start()

    @contextlib.contextmanager
    def _store_object(
        self, storage_id: str, meta: dict[str, Any], background: bool
    ) -> Iterator[Path]:
        """Write into a local staging directory whose files a :class:`StreamingUpload`
        sends up as each is closed (issue 37); ``UPLOADING`` is reported from its thread
        before the first byte goes up, ``COMPLETED`` once ``metadata.json`` (last) is in
        the store. Without ``background`` the block's end waits for that."""
        storage = self.storage
        assert isinstance(storage, ObjectStorageManager)
        staging = Path(tempfile.mkdtemp(prefix=f"dauntless-{storage_id}-", dir=storage.staging_dir))
        upload = StreamingUpload(
            storage,
            staging,
            storage_id,
            before_first_put=lambda: self._report(storage_id, meta, {}, state="UPLOADING"),
        )

        def run() -> None:
            try:
                resources = upload.run()
                if resources is not None:
                    self._report(storage_id, meta, resources)
                    logger.info("checkpoint %s uploaded to %s", storage_id, storage.url(storage_id))
            except BaseException as exc:
                if not upload.aborted:  # the writer's own error is the one raised
                    self._upload_error = exc
            finally:
                shutil.rmtree(staging, ignore_errors=True)

        thread = threading.Thread(
            target=run, name=f"checkpoint-upload-{storage_id[:8]}", daemon=True
        )
        thread.start()
        self._upload_thread = thread
        try:
            yield staging
            _write_metadata(staging, meta)
        except BaseException as exc:
            upload.abort()  # its thread deletes what it sent and the staging directory
            full = (
                full_disk_error(exc, staging) if isinstance(exc, (OSError, RuntimeError)) else None
            )
            if full is None:
                raise
            raise full from exc
        upload.finish()
        if not background:
            self.wait_for_uploads()

    def wait_for_uploads(self) -> None:
        """Wait until the background upload in flight (if any) is in the store and
        reported.

        Raises:
            StoreError, OSError: the error that ended that upload (the checkpoint was not
                reported as completed; its objects are removed).
        """
        thread, self._upload_thread = self._upload_thread, None
        if thread is not None:
            thread.join()
        error, self._upload_error = self._upload_error, None
        if error is not None:
            raise error

    @property
    def upload_in_flight(self) -> bool:
        """Whether a background upload is still running."""
        return self._upload_thread is not None and self._upload_thread.is_alive()

    @contextlib.contextmanager
    def _store_sharded(self, meta: dict[str, Any]) -> Iterator[tuple[Path, str]]:
        if isinstance(self.storage, ObjectStorageManager):
            with self._store_sharded_object(meta) as out:
                yield out
            return
        if not isinstance(self.storage, FileSystemStorageManager):
            raise ValueError(
                "a sharded checkpoint over several processes needs a file-system or object "
                f"storage, got {type(self.storage).__name__}"
            )
        if not self._dist.is_chief:
            path, storage_id = self._dist.broadcast(None)
            failed = False
            try:
                yield Path(path), storage_id
            except BaseException:
                failed = True
                raise
            finally:
                self._dist.gather((failed, meta))
            return
        storage_id = str(uuidlib.uuid4())
        with self.storage.store_path(storage_id) as path:
            self._dist.broadcast((str(path), storage_id))
            try:
                yield path, storage_id
            finally:
                parts = self._dist.gather((False, meta)) or []
            if any(failed for failed, _ in parts):
                raise RuntimeError(f"another process failed to write its part of {storage_id}")
            merged: dict[str, Any] = {}
            for _, part in reversed(parts):
                merged.update(part)
            _write_metadata(path, merged)
        self._report(storage_id, merged)

    @contextlib.contextmanager
    def _store_sharded_object(self, meta: dict[str, Any]) -> Iterator[tuple[Path, str]]:
        """Every rank writes its part into a staging directory of its own and uploads it;
        the chief then uploads the merged ``metadata.json`` last and reports."""
        storage = self.storage
        assert isinstance(storage, ObjectStorageManager)
        if self._dist.is_chief:
            storage_id = str(uuidlib.uuid4())
            self._report(storage_id, meta, {}, state="UPLOADING")
            self._dist.broadcast(storage_id)
        else:
            storage_id = str(self._dist.broadcast(None))
        staging = Path(tempfile.mkdtemp(prefix=f"dauntless-{storage_id}-", dir=storage.staging_dir))
        failed: BaseException | None = None
        files: dict[str, int] = {}
        try:
            try:
                yield staging, storage_id
                (staging / METADATA_FILE).unlink(missing_ok=True)
                files = storage.upload_prefix(staging, storage_id)
            except (OSError, RuntimeError) as exc:
                failed = full_disk_error(exc, staging) or exc
            except BaseException as exc:
                failed = exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            parts = self._dist.gather((failed is not None, meta, files))
        if failed is not None:
            if self._dist.is_chief:
                with contextlib.suppress(Exception):
                    storage.delete(storage_id)
            raise failed
        if not self._dist.is_chief:
            return
        assert parts is not None
        if any(bad for bad, _, _ in parts):
            with contextlib.suppress(Exception):
                storage.delete(storage_id)
            raise RuntimeError(f"another process failed to write its part of {storage_id}")
        merged: dict[str, Any] = {}
        resources: dict[str, int] = {}
        for _, part, part_files in reversed(parts):
            merged.update(part)
            resources.update(part_files)
        with _temp_dir(f"dauntless-{storage_id}-meta-") as tmp:
            _write_metadata(tmp, merged)
            resources.update(storage.upload_checkpoint(tmp, storage_id))
        self._report(storage_id, merged, dict(sorted(resources.items())))

    def _report(
        self,
        storage_id: str,
        meta: dict[str, Any],
        resources: dict[str, int] | None = None,
        state: str = "COMPLETED",
    ) -> None:
        self._backend.report_checkpoint(
            CheckpointReport(
                uuid=storage_id,
                trial_id=self.trial_id,
                allocation_id=self.allocation_id,
                steps_completed=meta["steps_completed"],
                resources=self.storage.resources(storage_id) if resources is None else resources,
                metadata=meta,
                state=state,
            )
        )

    def upload(
        self,
        ckpt_dir: str | os.PathLike[str],
        metadata: Mapping[str, Any] | None = None,
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store the files of a local directory as a new checkpoint.

        Args:
            ckpt_dir: the directory to copy (its files, recursively).
            metadata: as for :meth:`store_path` (``steps_completed`` required).
            shard: as for :meth:`store_path`.
            selector: keep only the files whose relative path it accepts.

        Returns:
            The new checkpoint's storage id.

        Raises:
            FileNotFoundError: if ``ckpt_dir`` is not a directory.
            ValueError, TypeError, RuntimeError: see :meth:`store_path`.
        """
        src = Path(ckpt_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"ckpt_dir {str(src)!r} is not a directory")
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            _copy_tree(src, path, selector)
        return storage_id

    # ------------------------------------------------------------------ reading

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[Path]:
        """Open a stored checkpoint for reading: ``with ctx.restore_path(id) as path``.

        On a file-system storage ``path`` is the checkpoint directory itself (do not
        write under it); with a ``selector`` the accepted files are copied to a
        temporary directory first, removed when the block ends.

        Args:
            storage_id: the checkpoint's uuid.
            download_mode: see :class:`DownloadMode` (file-system storage needs no
                download, so both modes read in place).
            selector: keep only the files whose relative path it accepts.

        Raises:
            ValueError: if ``storage_id`` is not a valid id.
            TypeError: if ``download_mode`` is not a :class:`DownloadMode`.
            FileNotFoundError: if no complete checkpoint has this id.
        """
        if not isinstance(download_mode, DownloadMode):
            raise TypeError(f"download_mode must be a DownloadMode, got {download_mode!r}")
        with self.storage.restore_path(check_storage_id(storage_id)) as path:
            if selector is None:
                yield path
                return
            with _temp_dir(f"dauntless-restore-{storage_id}-") as tmp:
                _copy_tree(path, tmp, selector)
                yield tmp

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy a stored checkpoint's files into a local directory (created if missing).

        Raises:
            ValueError, TypeError, FileNotFoundError: see :meth:`restore_path`.
            FileExistsError: if ``ckpt_dir`` exists and is not a directory.
        """
        dst = Path(ckpt_dir)
        if dst.exists() and not dst.is_dir():
            raise FileExistsError(f"ckpt_dir {str(dst)!r} exists and is not a directory")
        with self.restore_path(storage_id, download_mode) as path:
            _copy_tree(path, dst, selector)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """Read a stored checkpoint's ``metadata.json``.

        Raises:
            FileNotFoundError: if the checkpoint or its metadata file is missing.
        """
        with self.restore_path(storage_id) as path:
            return json.loads((path / METADATA_FILE).read_text())

    def delete(self, storage_id: str) -> bool:
        """Delete a stored checkpoint's files; False if there was none with this id.

        The master's record of it is left as is (its garbage collection then finds
        nothing to delete).
        """
        return self.storage.delete(storage_id)


def _check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
    steps = metadata.get("steps_completed")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(
            "checkpoint metadata must hold steps_completed (batches trained, an int >= 0), "
            f"got {steps!r}"
        )
    meta = {str(k): to_json_value(v) for k, v in metadata.items()}
    meta.setdefault("dauntless_version", dauntless.__version__)
    return meta


def _write_metadata(path: Path, meta: Mapping[str, Any]) -> None:
    (path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))


def _copy_tree(src: Path, dst: Path, selector: Selector | None) -> None:
    """Copy the regular files under ``src`` into ``dst`` (kept relative paths)."""
    dst.mkdir(parents=True, exist_ok=True)
    for dirpath, _dirnames, filenames in os.walk(src):
        for name in filenames:
            full = Path(dirpath, name)
            rel = full.relative_to(src).as_posix()
            if not full.is_file() or (selector is not None and not selector(rel)):
                continue
            target = dst / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(full, target)


@contextlib.contextmanager
def _temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
