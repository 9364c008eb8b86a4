"""Writing what the master sends: checkpoint archives unpacked safely."""

from __future__ import annotations

import tarfile

from dauntless.client import (
    extract_archive,
)

from ._util import (
    exit_with_error,
    note,
)


def unpack(data: bytes, dest: str) -> None:
    """Unpack a checkpoint archive into ``dest``, never outside it; entries left out
    (links leaving the directory, absolute paths, device files) are reported on stderr.
    An unreadable archive or a failed write ends the command with ``Error: ...``."""
    try:
        skipped = extract_archive(data, dest)
    except tarfile.TarError as exc:
        exit_with_error(f"the master's archive could not be read: {exc}")
    except OSError as exc:
        exit_with_error(f"cannot write into {dest}: {exc.strerror or exc}")
    for entry in skipped:
        note(f"Skipped {entry.name!r} of the checkpoint (not written): {entry.reason}")


__all__ = ["unpack"]
