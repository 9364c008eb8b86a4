"""Fixtures of the master's unit tests: the database each test's master runs on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from databases import fresh_postgres_database, migrated_sqlite, postgres_available
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.context import MasterContext
from dauntless.master.testing import sign_in


def _database(request: pytest.FixtureRequest, tmp_path: Path, migrated: bool) -> Iterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "dauntless.db"
        yield migrated_sqlite(path) if migrated else f"sqlite:///{path}"
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, db test)")
    with fresh_postgres_database(migrated=migrated) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The master's database, at the schema's head (a copy of a template migrated once
    per test process, tests/databases.py): a SQLite file ``tmp_path/dauntless.db``, or
    a PostgreSQL database of its own (skipped, saying why, where PostgreSQL is not
    reachable)."""
    yield from _database(request, tmp_path, migrated=True)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """As ``db_url`` but empty, for tests of the migrations themselves."""
    yield from _database(request, tmp_path, migrated=False)


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
