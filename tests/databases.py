"""Databases for tests.

PostgreSQL: a fresh database per test on 127.0.0.1:5432 (user postgres, trust
authentication, the maintenance database ``test``), dropped afterwards.

Both kinds can start at the schema's head instead of empty: a test master then finds
its schema current and skips Alembic (``Database.migrate``), which was about a third of
the CPU of starting a master in a unit test (0.16–0.19 CPU-s of 0.46–0.50 on SQLite;
on PostgreSQL 1.3 s of wall time against 0.2 s for a copy of a template). The migrations
run for real once per test process, into a template that every such database is copied
from, so a test gets exactly the rows and schema ``upgrade head`` writes. Tests of the
migrations themselves (from empty or from an old revision) ask for an empty database.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/{}"

_lock = threading.Lock()
_sqlite_template: Path | None = None
_postgres_template: str | None = None


def postgres_available() -> bool:
    """Whether PostgreSQL answers on 127.0.0.1:5432 (within 3 s)."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


def _migrate(url: str) -> None:
    from dauntless.master.db import Database

    db = Database(url)
    try:
        db.migrate()
    finally:
        db.dispose()  # SQLite: the last connection's close folds the WAL into the file


def migrated_sqlite(path: Path | str) -> str:
    """Write a SQLite database at the schema's head to ``path`` (a copy of this
    process's template, migrated by Alembic at the first call) and return its
    SQLAlchemy URL.

    Raises:
        FileExistsError: ``path`` exists (a test must not lose a database it wrote).
    """
    global _sqlite_template
    path = Path(path)
    if path.exists():
        raise FileExistsError(path)
    with _lock:
        if _sqlite_template is None:
            folder = Path(tempfile.mkdtemp(prefix="dauntless-schema-"))
            atexit.register(shutil.rmtree, folder, True)
            _migrate(f"sqlite:///{folder}/head.db")
            _sqlite_template = folder / "head.db"
        shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


def _drop_postgres(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_template_at_exit(name: str) -> None:
    import psycopg

    try:
        _drop_postgres(name)
    except psycopg.Error:
        pass  # PostgreSQL already gone: nothing left to drop


def _postgres_head_template() -> str:
    """This process's PostgreSQL database at the schema's head (created and migrated at
    the first call, dropped when the process exits): the template of every
    ``fresh_postgres_database(migrated=True)``. Nothing stays connected to it, as
    ``CREATE DATABASE ... TEMPLATE`` requires."""
    global _postgres_template
    import psycopg

    with _lock:
        if _postgres_template is None:
            name = f"dauntless_head_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            atexit.register(_drop_template_at_exit, name)
            _migrate(_PG_URL.format(name))
            _postgres_template = name
        return _postgres_template


@contextmanager
def fresh_postgres_database(migrated: bool = False) -> Iterator[str]:
    """A new database; yields its SQLAlchemy URL and drops it on exit (also when
    connections are left open).

    Args:
        migrated: start at the schema's head (a copy of this process's migrated
            template, ``CREATE DATABASE ... TEMPLATE``) instead of empty.
    """
    import psycopg

    template = f' TEMPLATE "{_postgres_head_template()}"' if migrated else ""
    name = f"dauntless_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    try:
        yield _PG_URL.format(name)
    finally:
        _drop_postgres(name)
