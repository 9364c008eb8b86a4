"""Unpacking a downloaded checkpoint (or context) archive without writing outside the
target directory: ``det checkpoint download``, ``det trial download``, ``det experiment
download`` and :meth:`dauntless.client.Session.download_checkpoint_to`.

Each entry passes Python's ``tarfile`` ``data`` filter (PEP 706), which refuses
absolute paths and ``..``, links whose target is absolute or outside the directory,
and device files, and clears set-user-id bits. Where :meth:`tarfile.TarFile.extractall`
with ``filter="data"`` stops at the first such entry, here the entry is skipped and
reported, so the checkpoint's regular files still arrive: a checkpoint holding a
symbolic link to ``/etc/passwd`` downloads everything else and says which link it left
out.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass


@dataclass(frozen=True)
class SkippedEntry:
    """An archive entry that was not written.

    Attributes:
        name: the entry's path in the archive.
        reason: why (the ``data`` filter's refusal).
    """

    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


def extract_archive(data: bytes, dest: str | os.PathLike[str]) -> list[SkippedEntry]:
    """Unpack a (gzipped) tar archive into ``dest`` (created if missing), never outside
    it, skipping the entries Python's ``data`` filter refuses.

    Args:
        data: the archive's bytes.
        dest: the target directory.

    Returns:
        The entries left out, in archive order (empty when every entry was written).

    Raises:
        tarfile.TarError: the bytes are not a tar archive (or are cut short).
        OSError: a file cannot be written (no space, no permission).
    """
    target = os.fspath(dest)
    os.makedirs(target, exist_ok=True)
    skipped: list[SkippedEntry] = []

    def keep_safe(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError as exc:
            skipped.append(SkippedEntry(member.name, str(exc)))
            return None

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        tar.extractall(target, filter=keep_safe)
    return skipped


__all__ = ["SkippedEntry", "extract_archive"]
