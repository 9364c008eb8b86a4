"""Fixtures for the CLI and client tests: a clean environment and the real master.

The master is the real application (:func:`dauntless.master.testing.serve`: FastAPI under
uvicorn in a thread, SQLite in a temp dir, the scheduling loop running), so the commands
are exercised over real sockets against the real routes;
:class:`dauntless.master.testing.Cluster` plays the other parties through the same public
API.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from databases import migrated_sqlite

from dauntless import _http
from dauntless.cli import _util
from dauntless.master import auth_secrets
from dauntless.master.testing import Cluster, serve


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in (
        "DET_MASTER",
        "DET_MASTER_ADDR",
        "DAUNTLESS_DATA_DIR",
        "DET_USER",
        "DET_PASS",
        "DET_USER_TOKEN",
        "DET_MASTER_CERT_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    # Saved tokens go to a per-test config dir, never the real ~/.config.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setattr(_util, "POLL_INTERVAL", 0.01)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions made by the CLI keep their retries but do not wait between them."""
    monkeypatch.setattr(_http.RetryPolicy, "delay", lambda self, retry: 0.0)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The real master in this process (SQLite in ``tmp_path``, its data directory
    ``tmp_path/master``), with its parties.

    Its passwords are hashed with argon2id at the library's smallest costs: each test's
    master hashes the built-in users' passwords and checks every sign-in, and at the
    default costs (about 0.13 s a hash here) that was most of these tests' time. The
    hashing itself is tested in tests/unit/master/test_auth.py.
    """
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    # The database at the schema's head (tests/databases.py): the master skips Alembic.
    db_url = migrated_sqlite(tmp_path / "dauntless.db")
    with serve(str(tmp_path / "master"), db_url=db_url) as live:
        c = Cluster(live.url, live.app)
        try:
            yield c
        finally:
            c.close()


@pytest.fixture
def closed_port() -> int:
    """A local port where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
