"""DeepSpeed on a CUDA GPU: the checks of
``tests/unit/integrations/test_deepspeed_train.py`` (ZeRO stages 1-3 paused and resumed
to the weights of an uninterrupted run, gradient accumulation) with DeepSpeed's CUDA
accelerator and NCCL instead of its CPU accelerator and gloo.

Run it on a machine with a GPU and the deepspeed extra installed:
``.venv/bin/python -m pytest -q tests/gpu/test_deepspeed_gpu.py``. Elsewhere it skips.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TRAIN_TESTS = (
    Path(__file__).resolve().parents[1] / "unit" / "integrations" / "test_deepspeed_train.py"
)

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        importlib.util.find_spec("deepspeed") is None,
        reason="the deepspeed extra is not installed",
    ),
]


def test_deepspeed_trains_pauses_and_resumes_on_a_gpu(tmp_path):
    env = dict(os.environ, DS_ACCELERATOR="cuda")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(TRAIN_TESTS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    assert "4 passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-3000:]
