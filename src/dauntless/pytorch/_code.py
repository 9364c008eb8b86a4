"""The model-definition copy (``code/``) saved in every PyTorchTrial checkpoint.

What is copied follows the context-directory rules (reference §5, "Context directory";
https://git-scm.com/docs/gitignore for the pattern syntax): built-in exclusions, then the
lines of the directory's ``.detignore``. The file list is taken once, when training
starts, so files the trial writes into its working directory later are not copied.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pathspec

# The same rules as the context the CLI uploads, so code/ holds what the master was sent.
from dauntless.client._context import BUILTIN_IGNORES, IGNORE_FILE, MAX_CONTEXT_BYTES

logger = logging.getLogger("dauntless.pytorch")

#: The largest model definition copied into checkpoints, in bytes (the context limit).
MAX_CODE_BYTES = MAX_CONTEXT_BYTES
#: The most files copied; a larger directory is not a model definition.
MAX_CODE_FILES = 5000


class CodeSnapshot:
    """The files of a model-definition directory, listed once, copied on demand.

    Args:
        root: the directory (the task's context directory on a cluster, the working
            directory in local training).
        exclude: directories never copied, nor anything below them (e.g. the checkpoint
            storage when it lies inside ``root``; when ``root`` itself lies inside one,
            only the files directly in ``root`` are copied).

    Attributes:
        root: the directory, absolute.
        files: relative paths (``/`` separators) of the files to copy; empty when the
            directory is missing or over :data:`MAX_CODE_BYTES` / :data:`MAX_CODE_FILES`
            (a warning is logged: such a directory is not copied at all).
    """

    def __init__(self, root: str | os.PathLike[str], exclude: tuple[Path, ...] = ()) -> None:
        self.root = Path(root).resolve()
        self.files: list[str] = []
        if not self.root.is_dir():
            return
        lines = list(BUILTIN_IGNORES)
        ignore = self.root / IGNORE_FILE
        if ignore.is_file():
            try:
                lines.extend(ignore.read_text(encoding="utf-8").splitlines())
            except (OSError, UnicodeDecodeError) as exc:
                logger.warning("cannot read %s (%s); using the built-in rules only", ignore, exc)
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        excluded = [p.resolve() for p in exclude]

        def skipped(d: Path) -> bool:
            real = d.resolve()
            return any(real == e or e in real.parents for e in excluded)

        total = 0
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            rel_dir = here.relative_to(self.root).as_posix()
            prefix = "" if rel_dir == "." else rel_dir + "/"
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not spec.match_file(prefix + d + "/")
                and not (here / d).is_symlink()
                and not skipped(here / d)
            )
            for name in sorted(filenames):
                rel = prefix + name
                full = here / name
                if spec.match_file(rel) or full.is_symlink() or not full.is_file():
                    continue
                total += full.stat().st_size
                self.files.append(rel)
                if total > MAX_CODE_BYTES or len(self.files) > MAX_CODE_FILES:
                    logger.warning(
                        "%s holds more than %d files or %d MiB: checkpoints will not include "
                        "a code/ copy of it (add a .detignore to leave out data)",
                        self.root,
                        MAX_CODE_FILES,
                        MAX_CODE_BYTES // 2**20,
                    )
                    self.files = []
                    return

    def copy_to(self, dest: Path) -> None:
        """Copy the listed files that still exist into ``dest`` (created)."""
        dest.mkdir(parents=True, exist_ok=True)
        for rel in self.files:
            src = self.root / rel
            if not src.is_file():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
