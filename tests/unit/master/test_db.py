"""Migrations and the schema check, on SQLite (PostgreSQL in the integration tests)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from databases import fresh_postgres_database, migrated_sqlite, postgres_available
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text

from dauntless.master.db import (
    Base,
    Database,
    SchemaError,
    current_revision,
    head_from_files,
    head_revision,
    schema_at_head,
)
from dauntless.master.db.engine import SQLITE_SOFT_HEAP_BYTES
from dauntless.master.states import IllegalTransition, check_transition, is_terminal


def test_migrations_match_models(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.db")
    assert current_revision(db.engine) is None
    db.migrate()
    assert current_revision(db.engine) == head_revision()
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"models and migrations differ: {diff}"
    db.migrate()  # idempotent
    with db.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        # SQLite's page caches are bounded in the master's process (issue 37)
        assert conn.execute(text("PRAGMA soft_heap_limit")).scalar() == SQLITE_SOFT_HEAP_BYTES


def test_newer_schema_is_refused(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.db")
    db.migrate()
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(SchemaError, match="newer version"):
        db.migrate()


def test_head_from_files_is_alembics_head():
    assert head_from_files() == head_revision()


def test_head_from_files_gives_up_on_what_it_cannot_read(tmp_path):
    (tmp_path / "a.py").write_text('revision: str = "a"\ndown_revision: str | None = None\n')
    (tmp_path / "b.py").write_text('revision = "b"\ndown_revision = "a"\n')
    assert head_from_files(tmp_path) == "b"
    (tmp_path / "c.py").write_text('revision = "c"\ndown_revision = "a"\n')
    assert head_from_files(tmp_path) is None  # two heads: Alembic decides
    (tmp_path / "c.py").write_text('revision = "c"\ndown_revision = compute()\n')
    assert head_from_files(tmp_path) is None  # not a literal


def test_schema_at_head(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.db")
    assert not schema_at_head(db.engine)  # no alembic_version table yet
    db.migrate()
    assert schema_at_head(db.engine)
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    assert not schema_at_head(db.engine)


# The master's start: migrate in a forked child, then the start-up's own migrate finds the
# schema current without importing Alembic; a child that fails leaves the error to the
# in-process migrate, as before.
_MASTER_START = """
import sys
from sqlalchemy import text
from dauntless.master.db import Database, migrate_in_child
url = sys.argv[1]
newer = sys.argv[2] == "newer"
if newer:
    db = Database(url)
    db.migrate()
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    db.engine.dispose()
    del sys.modules["alembic"]
    for name in [m for m in sys.modules if m.startswith(("alembic.", "mako"))]:
        del sys.modules[name]
print("child", migrate_in_child(url))
try:
    Database(url).migrate()
except Exception as exc:
    print("error", type(exc).__name__)
print("alembic", "alembic" in sys.modules)
"""


def test_migrate_in_child_keeps_alembic_out(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    out = subprocess.run(
        [sys.executable, "-c", _MASTER_START, url, "fresh"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split("\n")[:2] == ["child True", "alembic False"], out.stderr
    assert current_revision(Database(url).engine) == head_revision()


def test_migrate_in_child_leaves_errors_to_the_parent(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _MASTER_START, f"sqlite:///{tmp_path}/m.db", "newer"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split("\n")[:2] == ["child False", "error SchemaError"], out.stderr


def _mask_time(value: object) -> object:
    return "<time>" if isinstance(value, float) and 1e9 < value < 1e11 else value


def _schema_and_rows(url: str) -> tuple[list, dict]:
    """What ``upgrade head`` leaves in a database: its tables' columns and indexes (by
    SQLAlchemy's inspector) and every table's rows, with the times the migrations
    stamped (epoch seconds as floats) masked: a copy's are its template's."""
    db = Database(url)
    try:
        inspector = sa_inspect(db.engine)
        schema, rows = [], {}
        with db.engine.connect() as conn:
            for table in sorted(inspector.get_table_names()):
                columns = [(c["name"], str(c["type"])) for c in inspector.get_columns(table)]
                indexes = sorted(
                    (i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)
                )
                schema.append((table, columns, indexes))
                found = conn.execute(text(f'SELECT * FROM "{table}"'))
                rows[table] = sorted((tuple(map(_mask_time, row)) for row in found), key=repr)
        return schema, rows
    finally:
        db.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_tests_migrated_databases_equal_a_fresh_migration(tmp_path, kind):
    """tests/databases.py hands unit-test masters copies of one database migrated per
    process: each copy must hold what migrating an empty database writes (schema, the
    built-in users, the default workspace and project), and the master then skips
    Alembic."""
    if kind == "sqlite":
        fresh = f"sqlite:///{tmp_path}/fresh.db"
        Database(fresh).migrate()
        assert _schema_and_rows(migrated_sqlite(tmp_path / "copy.db")) == _schema_and_rows(fresh)
        assert schema_at_head(Database(f"sqlite:///{tmp_path}/copy.db").engine)
        with pytest.raises(FileExistsError):
            migrated_sqlite(tmp_path / "copy.db")  # never over a database a test wrote
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, db test)")
    with fresh_postgres_database() as fresh, fresh_postgres_database(migrated=True) as copy:
        assert current_revision(Database(fresh).engine) is None
        Database(fresh).migrate()
        assert _schema_and_rows(copy) == _schema_and_rows(fresh)
        assert schema_at_head(Database(copy).engine)


def test_write_rolls_back_on_error(tmp_path):
    from dauntless.master.db import ClusterRow

    db = Database(f"sqlite:///{tmp_path}/m.db")
    db.migrate()
    with pytest.raises(RuntimeError), db.write() as s:
        s.add(ClusterRow(id=1, cluster_id="x", created_at=0.0))
        s.flush()
        raise RuntimeError("boom")
    with db.read() as s:
        assert s.get(ClusterRow, 1) is None


@pytest.mark.parametrize(
    ("kind", "cur", "req", "ok"),
    [
        ("experiment", "ACTIVE", "PAUSED", True),
        ("experiment", "PAUSED", "ACTIVE", True),
        ("experiment", "COMPLETED", "ACTIVE", False),
        ("experiment", "COMPLETED", "DELETING", True),
        ("experiment", "DELETED", "ACTIVE", False),
        ("trial", "ERROR", "ACTIVE", True),
        ("trial", "COMPLETED", "DELETING", False),
        ("trial", "STOPPING_KILLED", "COMPLETED", False),
    ],
)
def test_transitions(kind, cur, req, ok):
    if ok:
        check_transition(kind, cur, req)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition(kind, cur, req)
        assert cur in str(info.value) and req in str(info.value)


def test_terminal_states():
    assert is_terminal("COMPLETED") and is_terminal("DELETED")
    assert not is_terminal("ACTIVE") and not is_terminal("STOPPING_CANCELED")
    with pytest.raises(ValueError):
        check_transition("model", "ACTIVE", "PAUSED")
