"""The integrations answer Determined's import paths through the compatibility package,
and ``import dauntless`` imports none of the frameworks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("lightning", "transformers", "keras")),
    reason="the lightning, transformers and keras extras are not all installed",
)


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={"KERAS_BACKEND": "torch", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_determined_paths_are_the_integrations():
    out = _run(
        "import dauntless.compat; dauntless.compat.install()\n"
        "import determined as det\n"
        "from dauntless.integrations import keras, lightning, transformers\n"
        "print(det.keras.DeterminedCallback is keras.DeterminedCallback,"
        " det.transformers.DetCallback is transformers.DetCallback,"
        " det.lightning.DeterminedCallback is lightning.DeterminedCallback)"
    )
    assert out.split() == ["True", "True", "True"]


def test_import_dauntless_stays_lean():
    out = _run(
        "import sys, dauntless, dauntless.core, dauntless.integrations\n"
        "print(sorted(m for m in ('lightning', 'transformers', 'keras') if m in sys.modules))"
    )
    assert out.strip() == "[]"
