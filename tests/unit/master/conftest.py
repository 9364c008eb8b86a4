"""Fixtures of the master's unit tests: the database each test's master runs on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from databases import fresh_postgres_database, postgres_available
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.context import MasterContext
from dauntless.master.testing import sign_in


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The master's database: a SQLite file in ``tmp_path``, or a fresh PostgreSQL
    database of its own (skipped, saying why, where PostgreSQL is not reachable)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/dauntless.db"
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, db test)")
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture()
def master(tmp_path: Path, db_url: str) -> Iterator[tuple[TestClient, MasterContext]]:
    """A master application on ``db_url`` without its control loop, served in-process,
    and its context: ``(client, ctx)``; the client is signed in as the admin. Tests that
    need more (a registered agent) define their own ``master``."""
    app = create_app(
        MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url), run_loop=False
    )
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx
