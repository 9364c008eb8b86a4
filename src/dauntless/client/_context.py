"""Packing a context directory into the gzipped tar the master takes.

What is left out follows gitignore rules (https://git-scm.com/docs/gitignore): the
built-in patterns below, then the lines of ``.detignore`` at the top of the directory,
so a ``!pattern`` in ``.detignore`` can bring back a built-in exclusion. As in git, a file
inside an excluded directory cannot be re-included (exclude ``data/*`` rather than
``data/`` to keep ``!data/small.csv``).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ._errors import ContextError, ContextTooLargeError

#: The largest context the master accepts, in bytes: (128 MiB // 8) * 6 - 1 MiB = 95 MiB.
MAX_CONTEXT_BYTES = 95 * 1024 * 1024
#: The ignore file read from the top of the context directory.
IGNORE_FILE = ".detignore"
#: Patterns always left out (reference §5, "Context directory").
BUILTIN_IGNORES = (
    "__pycache__/",
    "*.py[co]",
    "*$py.class",
    "terraform*",
    ".git/",
    ".vscode/",
    ".idea/",
    ".mypy_cache/",
    "/shared_fs",
)


@dataclass(frozen=True)
class ContextEntry:
    """One path that goes into the context archive.

    Attributes:
        relpath: the path relative to the context directory, with ``/`` separators.
        kind: ``"file"``, ``"dir"`` or ``"symlink"``.
        size: bytes of a regular file; 0 for the others.
    """

    relpath: str
    kind: str
    size: int


def _ignore_spec(root: Path) -> pathspec.PathSpec:
    lines = list(BUILTIN_IGNORES)
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_file():
        try:
            lines.extend(ignore_file.read_text(encoding="utf-8").splitlines())
        except (OSError, UnicodeDecodeError) as exc:
            raise ContextError(f"cannot read {ignore_file}: {exc}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _check_dir(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or path-like, got {type(path).__name__}")
    root = Path(path).expanduser()
    if not root.exists():
        raise ContextError(f"the context directory {root} does not exist")
    if not root.is_dir():
        raise ContextError(f"the context {root} is not a directory")
    return root


def list_context_entries(path: str | os.PathLike[str]) -> list[ContextEntry]:
    """List what the context archive of ``path`` will hold, without reading file contents.

    Directories are walked without following symbolic links; a link is kept as a link.
    Excluded directories are not entered (gitignore semantics).

    Args:
        path: the context directory.

    Returns:
        The entries, sorted by ``relpath`` (directories included, so empty ones survive).

    Raises:
        TypeError: when ``path`` is not a str or path-like.
        ContextError: when ``path`` does not exist, is not a directory, or cannot be read.
    """
    root = _check_dir(path)
    spec = _ignore_spec(root)
    entries: list[ContextEntry] = []

    def on_error(exc: OSError) -> None:
        raise ContextError(f"cannot read the context directory: {exc}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept_dirs = []
        for name in sorted(dirnames):
            rel = prefix + name
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                if not spec.match_file(rel):
                    entries.append(ContextEntry(rel, "symlink", 0))
                continue
            if spec.match_file(rel + "/"):
                continue
            entries.append(ContextEntry(rel, "dir", 0))
            kept_dirs.append(name)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = prefix + name
            if spec.match_file(rel):
                continue
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError as exc:
                raise ContextError(f"cannot read {full}: {exc}") from None
            if stat.S_ISLNK(st.st_mode):
                entries.append(ContextEntry(rel, "symlink", 0))
            elif stat.S_ISREG(st.st_mode):
                entries.append(ContextEntry(rel, "file", st.st_size))
            # Sockets, FIFOs and devices cannot travel in a context: skip them.
    entries.sort(key=lambda e: e.relpath)
    return entries


def list_context_files(path: str | os.PathLike[str]) -> list[str]:
    """The relative paths (``/``-separated) of the regular files the archive will hold.

    Args:
        path: the context directory.

    Raises:
        ContextError: as :func:`list_context_entries`.
    """
    return [e.relpath for e in list_context_entries(path) if e.kind == "file"]


def build_context_tarball(
    path: str | os.PathLike[str], limit_bytes: int = MAX_CONTEXT_BYTES
) -> bytes:
    """Pack a context directory into gzipped tar bytes for ``POST /experiments``.

    The sum of the included file sizes is checked against ``limit_bytes`` before any file
    is read, then the compressed archive is checked again. Member paths are relative to
    the directory; owner names and ids are cleared.

    Args:
        path: the context directory.
        limit_bytes: the largest allowed size in bytes (default 95 MiB, the master's).

    Returns:
        The archive bytes.

    Raises:
        TypeError: when ``path`` is not path-like or ``limit_bytes`` not an int.
        ValueError: when ``limit_bytes`` is below 1.
        ContextError: when the directory is missing or unreadable.
        ContextTooLargeError: when the files or the archive exceed ``limit_bytes``.
    """
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int):
        raise TypeError(f"limit_bytes must be an int, got {type(limit_bytes).__name__}")
    if limit_bytes < 1:
        raise ValueError(f"limit_bytes must be >= 1 byte, got {limit_bytes}")
    entries = list_context_entries(path)
    root = Path(path).expanduser()
    total = sum(e.size for e in entries)
    if total > limit_bytes:
        raise ContextTooLargeError(str(root), total, limit_bytes, "files")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for entry in entries:
            full = root / entry.relpath
            try:
                info = tar.gettarinfo(str(full), arcname=entry.relpath)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with open(full, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
            except OSError as exc:
                raise ContextError(f"cannot read {full}: {exc}") from None
    data = buffer.getvalue()
    if len(data) > limit_bytes:
        raise ContextTooLargeError(str(root), len(data), limit_bytes, "compressed")
    return data
