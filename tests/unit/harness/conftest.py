"""Fixtures of the harness tests: keep process-global state from leaking between tests."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

# Under --import-mode=importlib test directories are not put on sys.path; the tests
# import their shared trial module (harness_toy_trial) from here, as the harness imports
# an entrypoint module from the context directory.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Modules that tests import from a context directory (the harness puts it on sys.path).
_CONTEXT_MODULES = ("model_def",)


@pytest.fixture(autouse=True)
def _isolate_process_state():
    """Restore RNGs, torch threads, sys.path and context modules; fail on leaked DET_*."""
    det_env = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    threads = torch.get_num_threads()
    path = list(sys.path)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    random.setstate(rng[0])
    np.random.set_state(rng[1])
    torch.set_rng_state(rng[2])
    sys.path[:] = path
    for name in _CONTEXT_MODULES:
        sys.modules.pop(name, None)
    leaked = {k: v for k, v in os.environ.items() if k.startswith("DET_")}
    if leaked != det_env:
        pytest.fail(f"the test changed DET_* environment variables: {leaked}")
