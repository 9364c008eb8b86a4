"""Fixtures of the framework integrations' unit tests: a Core API context over an
in-memory backend and a checkpoint directory, as a trial of a cluster would have."""

from __future__ import annotations

from typing import Any

import pytest

from dauntless import core
from dauntless.storage import DirectoryStorageManager


@pytest.fixture()
def make_context(tmp_path):
    """``make_context(searcher=..., trial_id=..., latest=uuid)`` -> ``(Context, LocalBackend)``; the
    checkpoints of every context made go to one directory."""
    made: list[core.Context] = []

    def make(searcher: dict[str, Any] | None = None, trial_id: int = 1, latest: str | None = None):
        backend = core.LocalBackend([1])
        trial = core.TrialInfo(
            trial_id=trial_id,
            experiment_id=1,
            trial_seed=0,
            hparams={},
            config={"searcher": searcher or {"name": "single", "metric": "val_loss"}},
            latest_checkpoint=latest,
        )
        ctx = core.Context(
            trial, backend=backend, storage=DirectoryStorageManager(str(tmp_path / "ckpts"))
        )
        made.append(ctx)
        return ctx, backend

    yield make
    for ctx in made:
        ctx.close()
