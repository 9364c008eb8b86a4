"""``dauntless.import_from_path``: import modules from a directory without polluting, or
being shadowed by, the interpreter's module cache (Determined's ``det.import_from_path``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

_active = threading.Lock()


def _top_level_names(path: Path) -> set[str]:
    """Names importable from ``path``: ``x.py``, ``x/`` packages, extension modules."""
    names: set[str] = set()
    try:
        entries = list(path.iterdir())
    except OSError:
        return names
    for entry in entries:
        if entry.is_dir() and entry.name.isidentifier():
            names.add(entry.name)
        elif entry.suffix in (".py", ".so", ".pyd"):
            stem = entry.name.split(".")[0]
            if stem.isidentifier():
                names.add(stem)
    return names


def _module_file_under(module: ModuleType | None, root: str) -> bool:
    file = getattr(module, "__file__", None)
    if not file:
        return False
    return os.path.abspath(file).startswith(root + os.sep)


@contextlib.contextmanager
def import_from_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Inside the block, ``import x`` finds ``x`` in ``path`` first, freshly loaded.

    Modules already imported under a name that ``path`` also provides (say a
    ``model_def`` from the working directory, or from another checkpoint) are set aside
    for the block and put back afterwards, and the modules loaded from ``path`` are
    dropped from ``sys.modules`` at the end, so two directories holding different
    ``model_def.py`` files can be imported one after the other in one process, each
    giving its own classes. Objects created inside the block keep working afterwards.

    Args:
        path: the directory to import from (e.g. a checkpoint's ``code/``).

    Raises:
        RuntimeError: when called while another ``import_from_path`` block is open (in
            any thread); nesting is not supported, as in Determined.
    """
    if not _active.acquire(blocking=False):
        raise RuntimeError("import_from_path does not support nesting or concurrent use")
    root = os.path.abspath(os.fspath(path))
    names = _top_level_names(Path(root))
    old_path = list(sys.path)
    set_aside: dict[str, ModuleType] = {}
    try:
        for key in list(sys.modules):
            if key.split(".")[0] in names and not _module_file_under(sys.modules[key], root):
                set_aside[key] = sys.modules.pop(key)
        sys.path[:] = [root] + [p for p in old_path if p != root]
        yield
    finally:
        for key in list(sys.modules):
            module = sys.modules.get(key)
            if key.split(".")[0] in names or _module_file_under(module, root):
                sys.modules.pop(key, None)
        sys.path[:] = old_path
        sys.modules.update(set_aside)
        _active.release()
