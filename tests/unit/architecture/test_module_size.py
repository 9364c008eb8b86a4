"""No module of the master is over ~500 lines (issue 18: "a module of a few hundred
lines"; ../shared/design/STYLE.md), so that a 1,200-line manager cannot grow back."""

from __future__ import annotations

from pathlib import Path

import dauntless.master

MAX_LINES = 500
"""The most lines a module of ``dauntless.master`` may have."""


def long_modules(root: Path, limit: int, exempt: set[str]) -> list[str]:
    """``"path: N lines"`` for every ``*.py`` under ``root`` over ``limit`` lines, except
    files named in ``exempt`` (paths relative to ``root``)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit and rel not in exempt:
            out.append(f"{rel}: {lines} lines")
    return out


def test_no_master_module_is_over_the_limit() -> None:
    root = Path(dauntless.master.__file__).parent
    assert long_modules(root, MAX_LINES, exempt=set()) == []


def test_a_long_module_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text("x = 1\n" * 11)
    (tmp_path / "small.py").write_text("x = 1\n" * 10)
    (tmp_path / "skip.py").write_text("x = 1\n" * 50)
    assert long_modules(tmp_path, 10, {"skip.py"}) == ["pkg/big.py: 11 lines"]
