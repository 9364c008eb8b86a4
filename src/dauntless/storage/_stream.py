"""Uploading a checkpoint's files to an object store while it is still being written.

``CheckpointContext.store_path`` writes an object-store checkpoint into a local staging
directory. A :class:`StreamingUpload` watches that directory with Linux's inotify
(through ``inotify_simple``) and, on a thread of its own, uploads each file as soon as
the writer closes it (``IN_CLOSE_WRITE``, or ``IN_MOVED_TO`` for a file renamed into
place): the upload of the first file overlaps the writing of the rest, and once the
writer is done (:meth:`StreamingUpload.finish`) the rest overlaps the training that
follows (issue 37).

The directory as the writer leaves it is what the checkpoint holds; the events only
start work early. When the writer is done the thread drains the events the kernel
queued before that moment and reconciles: files not uploaded yet, or written again
after their upload began (an ``IN_MODIFY``, ``IN_CLOSE_WRITE`` or ``IN_MOVED_TO`` seen
later, or an overflow of the event queue, which marks every file), go up; the objects
of files removed or renamed away are deleted; ``metadata.json`` goes up last, so a
checkpoint whose metadata is in the store is whole.

Memory stays bounded: nothing is copied; each file is read from the staging disk by the
store's client as it sends it (boto3: parts of 8 MiB, a few at a time). Without inotify
(not Linux, ``inotify_simple`` not installed, or no watch left) every file goes up when
the writer is done, as before. Not seen: writes through a shared memory map of a file
already uploaded (they raise no inotify event).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._object import METADATA_FILE, ObjectStorageManager, _local_files

logger = logging.getLogger("dauntless.storage")


def _open_inotify() -> tuple[Any, Any] | None:
    """``(INotify(), flags)`` or None where inotify cannot be used here."""
    try:
        import inotify_simple  # Linux-only (ctypes over libc's inotify_* calls)

        return inotify_simple.INotify(), inotify_simple.flags
    except (ImportError, OSError, AttributeError) as exc:
        logger.debug("no inotify (%s): checkpoint files go up when the writer is done", exc)
        return None


class StreamingUpload:
    """Upload the files of a checkpoint being written into ``staging``, each as it is
    closed; the thread body is :meth:`run`.

    Args:
        storage: the object store.
        staging: the local directory the checkpoint's files are written into (it
            exists, and is empty).
        storage_id: the checkpoint's uuid (objects ``<prefix>/<uuid>/<relative path>``).
        before_first_put: called once, on the upload thread, before the first byte goes
            up (the ``UPLOADING`` report: checkpoint GC then knows of the objects if the
            process dies). An error it raises ends the upload with that error.
    """

    def __init__(
        self,
        storage: ObjectStorageManager,
        staging: Path,
        storage_id: str,
        before_first_put: Callable[[], None],
    ) -> None:
        self.storage = storage
        self.staging = staging
        self.storage_id = storage_id
        self._before_first_put: Callable[[], None] | None = before_first_put
        self._done = threading.Event()
        self._aborted = False
        self._wake_r, self._wake_w = os.pipe()
        self._dirs: dict[int, str] = {}  # inotify watch descriptor -> relative directory
        self._pending: dict[str, None] = {}  # closed files not uploaded yet, in order
        self._started: set[str] = set()  # files whose upload began
        self._dirty: set[str] = set()  # ...and that were written again after it began
        self._overflow = False
        self._put_keys: list[str] = []
        self._mask = 0
        self._inotify: Any = None
        self._flags: Any = None
        opened = _open_inotify()
        if opened is not None:
            self._inotify, f = opened
            self._flags = f
            self._mask = f.CLOSE_WRITE | f.MOVED_TO | f.MODIFY | f.CREATE
            if not self._watch(staging, ""):
                self._close_inotify()

    # ------------------------------------------------------------------ the writer's side

    def finish(self) -> None:
        """The writer is done (every file, ``metadata.json`` included, is closed): the
        thread uploads what is left and returns."""
        self._signal()

    def abort(self) -> None:
        """The writer failed: the thread stops after the file it is sending and deletes
        the objects it wrote."""
        self._aborted = True
        self._signal()

    def _signal(self) -> None:
        self._done.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called."""
        return self._aborted

    # ------------------------------------------------------------------ the thread

    def run(self) -> dict[str, int] | None:
        """Upload files as they are closed until :meth:`finish`, then the rest and
        ``metadata.json`` last.

        Returns:
            ``{relative path: size in bytes}`` of the checkpoint's files (its
            resources), or None after :meth:`abort`.

        Raises:
            StoreError: the store refused an upload or could not be reached (the objects
                already written are deleted, best effort).
            OSError: the staging directory could not be read.
        """
        try:
            while not self._done.is_set():
                self._wait_for_events()
                self._upload_pending()
            if self._aborted:
                self._delete_put()
                return None
            self._read_events(block=False)  # all queued before finish() was called
            self._close_inotify()
            return self._reconcile()
        except BaseException:
            self._delete_put()
            raise
        finally:
            self._close_inotify()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _wait_for_events(self) -> None:
        if self._inotify is None:
            self._done.wait()
            return
        poller = select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        poller.poll()
        self._read_events(block=False)

    def _upload_pending(self) -> None:
        while self._pending and not self._aborted:
            rel = next(iter(self._pending))
            del self._pending[rel]
            if (self.staging / rel).is_file():
                self._put(rel)
            self._read_events(block=False)  # marks files written during that upload

    def _reconcile(self) -> dict[str, int]:
        files = _local_files(self.staging)
        if self._overflow:
            self._dirty |= self._started
        gone = sorted(self._started - files.keys())
        if gone:
            keys = [self._key(rel) for rel in gone]
            self.storage._call("delete", keys[0], self.storage._delete_keys, keys)
        for rel in files:
            if rel != METADATA_FILE and (rel not in self._started or rel in self._dirty):
                self._put(rel)
        self._put(METADATA_FILE)
        return files

    def _put(self, rel: str) -> None:
        if self._before_first_put is not None:
            first, self._before_first_put = self._before_first_put, None
            first()
        key = self._key(rel)
        self._started.add(rel)
        self._dirty.discard(rel)
        self._put_keys.append(key)
        self.storage._call("upload", key, self.storage._put, self.staging / rel, key)

    def _key(self, rel: str) -> str:
        return self.storage.key(f"{self.storage_id}/{rel}")

    def _delete_put(self) -> None:
        if self._put_keys:
            with contextlib.suppress(Exception):
                self.storage._delete_keys(sorted(set(self._put_keys)))

    # ------------------------------------------------------------------ inotify

    def _watch(self, path: Path, rel: str) -> bool:
        try:
            self._dirs[self._inotify.add_watch(path, self._mask)] = rel
            return True
        except OSError as exc:  # no watch left (fs.inotify.max_user_watches), or gone
            logger.debug("cannot watch %s (%s): its files go up at the end", path, exc)
            return False

    def _read_events(self, block: bool) -> None:
        if self._inotify is None:
            return
        f = self._flags
        for event in self._inotify.read(timeout=None if block else 0):
            if event.mask & f.Q_OVERFLOW:
                self._overflow = True
                continue
            base = self._dirs.get(event.wd)
            if base is None or not event.name:
                continue
            rel = f"{base}/{event.name}" if base else event.name
            if event.mask & f.ISDIR:
                if event.mask & (f.CREATE | f.MOVED_TO):
                    # Files closed in it before the watch was added go up at the end.
                    self._watch(self.staging / rel, rel)
                continue
            if rel in self._started:
                if event.mask & (f.MODIFY | f.CLOSE_WRITE | f.MOVED_TO):
                    self._dirty.add(rel)
            elif event.mask & (f.CLOSE_WRITE | f.MOVED_TO) and rel != METADATA_FILE:
                self._pending[rel] = None

    def _close_inotify(self) -> None:
        if self._inotify is not None:
            with contextlib.suppress(OSError):
                self._inotify.close()
            self._inotify = None
