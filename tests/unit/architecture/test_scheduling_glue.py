"""The master's scheduling pass stays a read-decide-write of a few dozen lines (issue 38
scope 7): every decision, constrained placement included, is in the pure
:mod:`dauntless.scheduler`, and the glue tells trials from tasks by their rows, never by a
prefix of a request id. Complexity is McCabe's, as ruff's C901 rule counts it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dauntless.master.scheduling as glue
import dauntless.scheduler

MAX_LINES = 40
MAX_COMPLEXITY = 10


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return fn


def test_place_pending_is_short_and_simple() -> None:
    path = Path(glue.__file__)
    fn = _function(path, "place_pending")
    assert fn.end_lineno is not None
    assert fn.end_lineno - fn.lineno + 1 <= MAX_LINES
    ruff = Path(sys.executable).with_name("ruff")
    scheduler = Path(dauntless.scheduler.__file__).parent
    r = subprocess.run(
        [
            str(ruff),
            "check",
            "--no-cache",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            str(path),
            str(scheduler / "_schedule.py"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_request_id_is_parsed() -> None:
    text = Path(glue.__file__).read_text(encoding="utf-8")
    assert "startswith" not in text and "REQUEST_PREFIX" not in text
