"""Migrations and the schema check, on SQLite (PostgreSQL in the integration tests)."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from dauntless.master.db import Base, Database, SchemaError, current_revision, head_revision
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


def test_newer_schema_is_refused(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.db")
    db.migrate()
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(SchemaError, match="newer version"):
        db.migrate()


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
