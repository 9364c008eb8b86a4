"""The master's shared context: a model function run through it owns one transaction,
and the loop is woken only when that transaction commits."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from dauntless.config import MasterConfig
from dauntless.master.context import MasterContext
from dauntless.master.db import Database


@pytest.fixture
def ctx(tmp_path: Path):
    db = Database(f"sqlite:///{tmp_path}/master.db")
    db.migrate()
    yield MasterContext(db, MasterConfig(data_dir=str(tmp_path)))
    db.dispose()


def test_wake_after_commit_wakes_once_the_write_commits(ctx: MasterContext) -> None:
    def work(s: Session, c: MasterContext, answer: int) -> int:
        c.wake_after_commit(s)
        assert not c.wake.is_set()  # not before the commit
        return answer

    assert ctx.write(work, 7) == 7
    assert ctx.wake.is_set()


def test_a_rolled_back_write_does_not_wake(ctx: MasterContext) -> None:
    def failing(s: Session, c: MasterContext) -> None:
        c.wake_after_commit(s)
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        ctx.write(failing)
    assert not ctx.wake.is_set()
