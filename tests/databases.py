"""PostgreSQL for tests: a fresh database per test on 127.0.0.1:5432 (user postgres,
trust authentication, the maintenance database ``test``), dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_available() -> bool:
    """Whether PostgreSQL answers on 127.0.0.1:5432 (within 3 s)."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database; yields its SQLAlchemy URL and drops it on exit (also when
    connections are left open)."""
    import psycopg

    name = f"dauntless_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
