"""Fixtures of the Core API tests: no DET_* variable may leak out of a test."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

# Under --import-mode=importlib test directories are not put on sys.path; the
# multi-process test imports its worker module (dist_worker) from here.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(autouse=True)
def _no_leaks():
    """Fail a test that leaves DET_* variables changed or a preemption thread running."""
    det_env = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
    yield
    leaked = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
    if leaked != det_env:
        pytest.fail(f"the test changed DET_* environment variables: {leaked}")
    watchers = [t.name for t in threading.enumerate() if t.name.startswith("preemption-")]
    if watchers:
        pytest.fail(f"the test left preemption watcher threads running: {watchers}")
