"""Checks of an uploaded context directory (a gzipped tar) before it is stored: at
create, ``POST /experiments`` and ``POST /commands|notebooks|shells|tensorboards``
refuse what an agent would refuse to unpack (its ``tarfile`` ``data`` filter) or what
could harm it, so a bad archive fails at once with 400 instead of failing every run of
the trial on its agent, and an oversize one with 413.

Refused with 400 (:class:`~dauntless.master.errors.BadRequest`, field ``context``):
an entry with an absolute path or a ``..`` component, a symbolic or hard link whose
target is absolute or leaves the directory, a device file or FIFO, and bytes that are not
a (gzipped) tar archive. Refused with 413 (:class:`~dauntless.master.errors.TooLarge`):
more than :data:`MAX_CONTEXT_BYTES` compressed, more than
:data:`MAX_CONTEXT_UNPACKED_BYTES` unpacked or :data:`MAX_CONTEXT_ENTRIES` entries.

The archive is read as a stream (``tarfile`` mode ``r|*``): headers are checked, and
the data is decompressed only as far as the unpacked limit allows, so a gzip bomb costs
at most that many bytes of decompression and no memory beyond a block.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from typing import Any

from .errors import MAX_CONTEXT_BYTES, BadRequest, TooLarge

MAX_CONTEXT_UNPACKED_BYTES = 1024**3
"""The most bytes a context directory may hold unpacked (1 GiB): what an agent writes to
disk for each task of it."""

MAX_CONTEXT_ENTRIES = 100_000
"""The most files, directories and links a context directory may hold."""


async def read_upload(upload: Any, limit: int | None = None) -> bytes:
    """The bytes of an uploaded context directory (a multipart file), read in 1 MiB
    chunks up to ``limit`` bytes (default :data:`MAX_CONTEXT_BYTES`, 95 MiB).

    Raises:
        TooLarge: over ``limit`` (413), found without reading the rest.
    """
    if limit is None:
        limit = MAX_CONTEXT_BYTES
    chunks, total = [], 0
    while chunk := await upload.read(1 << 20):
        total += len(chunk)
        if total > limit:
            raise TooLarge(
                f"the context directory is over the {limit}-byte (95 MiB) limit; keep "
                "data sets out of it (.detignore)",
                [("context", f"at most {limit} bytes")],
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _refuse(name: str, why: str) -> BadRequest:
    return BadRequest(
        f"the context directory holds {name!r}: {why}; such an archive cannot be unpacked safely",
        [("context", f"{name!r}: {why}")],
    )


def _leaves(path: str) -> bool:
    """Whether a relative POSIX path, normalized, leaves its directory."""
    norm = posixpath.normpath(path)
    return norm == ".." or norm.startswith("../")


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse one tar entry that could write outside the directory it is unpacked in.

    Raises:
        BadRequest: an absolute or ``..`` path, a link whose target is absolute or
            outside the directory, or a device file or FIFO.
    """
    name = member.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(name, "an absolute path")
    if ".." in name.replace("\\", "/").split("/"):
        raise _refuse(name, "a path with '..' that leaves the directory")
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            raise _refuse(name, f"a symbolic link to the absolute path {target!r}")
        if _leaves(posixpath.join(posixpath.dirname(name), target)):
            raise _refuse(name, f"a symbolic link to {target!r}, outside the directory")
    elif member.islnk():
        target = member.linkname
        if target.startswith("/") or _leaves(target):
            raise _refuse(name, f"a hard link to {target!r}, outside the directory")
    elif member.ischr() or member.isblk():
        raise _refuse(name, "a device file")
    elif member.isfifo():
        raise _refuse(name, "a FIFO")


def check_context_archive(data: bytes) -> None:
    """Check a context directory upload (a tar, normally gzipped) before it is stored.

    Args:
        data: the uploaded bytes.

    Raises:
        TooLarge: over :data:`MAX_CONTEXT_BYTES` compressed, over
            :data:`MAX_CONTEXT_UNPACKED_BYTES` unpacked, or over
            :data:`MAX_CONTEXT_ENTRIES` entries (413).
        BadRequest: not a tar archive, or an entry :func:`check_member` refuses (400).
    """
    if len(data) > MAX_CONTEXT_BYTES:
        raise TooLarge(
            f"the context directory is {len(data)} bytes compressed; the limit is "
            f"{MAX_CONTEXT_BYTES} bytes (95 MiB): keep data sets out of it (.detignore)",
            [("context", f"at most {MAX_CONTEXT_BYTES} bytes")],
        )
    unpacked = entries = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
            for member in tar:
                check_member(member)
                entries += 1
                unpacked += max(member.size, 0)
                if entries > MAX_CONTEXT_ENTRIES:
                    raise TooLarge(
                        f"the context directory holds more than {MAX_CONTEXT_ENTRIES} entries",
                        [("context", f"at most {MAX_CONTEXT_ENTRIES} entries")],
                    )
                if unpacked > MAX_CONTEXT_UNPACKED_BYTES:
                    raise TooLarge(
                        "the context directory is over "
                        f"{MAX_CONTEXT_UNPACKED_BYTES} bytes (1 GiB) unpacked",
                        [("context", f"at most {MAX_CONTEXT_UNPACKED_BYTES} bytes unpacked")],
                    )
    except BadRequest:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise BadRequest(
            f"the context directory is not a readable (gzipped) tar archive: {exc}",
            [("context", "expected a gzipped tar archive")],
        ) from None


__all__ = [
    "read_upload",
    "MAX_CONTEXT_ENTRIES",
    "MAX_CONTEXT_UNPACKED_BYTES",
    "check_context_archive",
    "check_member",
]
