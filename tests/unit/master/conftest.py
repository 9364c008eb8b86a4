"""Fixtures of the master's unit tests: the database each test's master runs on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from databases import fresh_postgres_database, postgres_available


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
