"""The audit trail (issue 30 scope 5): the hash chain names deleted, edited and missing
rows, survives retention through a signed checkpoint, and records what users change
but not what agents and trials report."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher
from databases import migrated_sqlite
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from dauntless.config import MasterConfig
from dauntless.master import auth_secrets, loop
from dauntless.master.app import create_app
from dauntless.master.audit import AuditEntry, AuditTrail, RetentionHook
from dauntless.master.db import AuditCheckpointRow, AuditRow, ClusterRow, Database
from dauntless.master.testing import bearer, login, register_agent


def _entry(i: int, at: float = 1_700_000_000.0) -> AuditEntry:
    return AuditEntry(
        at=at + i + 0.123456789,  # a float that must round-trip through the database
        user_id=i % 3 + 1,
        username=f"user{i % 3}",
        token_kind="USER_SESSION",
        token_id=i,
        method="POST",
        route="/api/v1/experiments/{exp_id}/pause",
        action="pause_experiment",
        target=f"exp_id={i}",
        status=200,
        result="ok",
        client="127.0.0.1",
    )


def _problems(trail: AuditTrail) -> list[tuple[int, str]]:
    return [(b["id"], b["problem"]) for b in trail.verify().breaks]


def test_the_chain_names_deleted_edited_and_truncated_rows(db_url, tmp_path):
    db = Database(db_url)
    db.migrate()
    trail = AuditTrail(db, str(tmp_path))
    ids = [trail.append(_entry(i)) for i in range(12)]
    assert ids == list(range(1, 13))
    result = trail.verify()
    assert (result.ok, result.rows, result.first_id, result.last_id) == (True, 12, 1, 12)

    with db.write() as s:
        s.execute(delete(AuditRow).where(AuditRow.id == 5))
        s.execute(update(AuditRow).where(AuditRow.id == 8).values(username="mallory"))
    assert _problems(trail) == [
        (5, "row 5 is missing (deleted): row 6's previous hash matches no row"),
        (8, "row 8 was edited: its hash does not match its content"),
    ]

    # Rows deleted from the end are found from the head the master keeps outside the
    # database, also by a master started afterwards, which numbers on after that head.
    with db.write() as s:
        s.execute(delete(AuditRow).where(AuditRow.id >= 11))
    restarted = AuditTrail(db, str(tmp_path))
    assert (11, "rows 11 to 12 are missing at the end (the master wrote up to row 12)") in (
        _problems(restarted)
    )
    assert restarted.append(_entry(99)) == 13
    assert (11, "rows 11 to 12 are missing (deleted): row 13's previous hash matches no row") in (
        _problems(restarted)
    )
    # Another key (someone who rewrote the chain without the master's) fails every row.
    (tmp_path / "other").mkdir()
    forger = AuditTrail(db, str(tmp_path / "other"))
    assert all("was edited" in p for _, p in _problems(forger) if "missing" not in p)
    db.dispose()
    # A new database (another cluster id) in the same data directory starts afresh.
    fresh = Database(f"sqlite:///{tmp_path}/fresh.db")
    fresh.migrate()
    with fresh.write() as s:
        s.add(ClusterRow(id=1, cluster_id="another-cluster", created_at=0.0))
    anew = AuditTrail(fresh, str(tmp_path))
    assert anew.verify().ok and anew.append(_entry(1)) == 1
    fresh.dispose()


def test_retention_leaves_a_signed_checkpoint_the_chain_goes_on_from(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/audit.db")
    db.migrate()
    now = [2_000_000_000.0]
    trail = AuditTrail(db, str(tmp_path), clock=lambda: now[0])
    for i in range(10):
        trail.append(_entry(i, at=now[0] - 100 + i * 10))
    assert trail.prune(older_than=now[0] - 40) == 6  # rows 1..6 (at = now - 100 + 11 i + ...)
    result = trail.verify()
    assert result.ok and result.rows == 4 and result.first_id == 7
    assert result.checkpoint == {"cut_id": 6, "at": now[0], "removed": 6}
    assert trail.append(_entry(50, at=now[0])) == 11 and trail.verify().ok
    assert trail.prune(older_than=now[0] - 1000) == 0

    with db.write() as s:  # the first row after the cut goes: named
        s.execute(delete(AuditRow).where(AuditRow.id == 7))
    assert _problems(trail) == [
        (7, "row 7 is missing (deleted): row 8's previous hash matches no row")
    ]
    with db.write() as s:  # a made-up checkpoint to cover it is not signed by the key
        s.execute(update(AuditCheckpointRow).values(cut_id=7))
    assert (
        7,
        "the retention checkpoint at row 7 is not signed by this master's audit key "
        "(edited or made up)",
    ) in _problems(trail)

    hook = RetentionHook(trail, retention_days=1, every=3600)
    now[0] += 3 * 86400
    hook()
    hook()  # once an hour only
    with db.read() as s:
        assert s.scalars(select(AuditRow)).all() == []
        assert len(s.scalars(select(AuditCheckpointRow)).all()) == 2
    db.dispose()


@pytest.fixture()
def master(tmp_path, monkeypatch):
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18083), run_loop=False)
    with TestClient(app) as client:
        yield client, app


CONFIG = """
name: audited
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: {batches: 20}}
"""


def test_user_changes_and_sign_ins_are_audited_not_machine_reports(master):
    from dauntless.master.testing import model_def_tarball

    client, app = master
    admin = login(client)
    r = client.post("/api/v1/users", headers=bearer(admin), json={"username": "bob"})
    assert r.status_code == 201
    r = client.post("/api/v1/auth/login", json={"username": "bob", "password": "wrong"})
    assert r.status_code == 401
    bob = login(client, "bob", "")
    assert client.post("/api/v1/agents/a1/disable", headers=bearer(bob)).status_code == 403
    r = client.post(
        "/api/v1/experiments",
        headers=bearer(bob),
        data={"config": CONFIG},
        files={"context": ("c.tgz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    agent = register_agent(client, app, {"id": "a1", "slots": [{"id": "c0", "type": "cpu"}]})
    assert loop.schedule_pass(app.state.ctx) == 1
    (spec,) = client.post(
        "/api/v1/agents/a1/heartbeat", headers=agent, json={"running": []}
    ).json()["start"]
    trial = bearer(spec["env"]["DET_SESSION_TOKEN"])
    body = {"group": "training", "steps_completed": 1, "trial_run_id": 1, "metrics": {"x": 1}}
    r = client.post(f"/api/v1/trials/{spec['trial_id']}/metrics", headers=trial, json=body)
    assert r.status_code == 200
    assert client.get("/api/v1/experiments", headers=bearer(bob)).status_code == 200
    assert client.post("/api/v1/users", json={"username": "eve"}).status_code == 401

    r = client.get("/api/v1/audit", headers=bearer(bob))
    assert r.status_code == 403 and r.json()["detail"] == "only an admin may read the audit trail"
    r = client.get("/api/v1/audit", headers=bearer(admin), params={"order": "asc"})
    assert r.status_code == 200, r.text
    seen = [
        (e["username"], e["token_kind"], e["method"], e["route"], e["result"], e["status"])
        for e in r.json()["entries"]
    ]
    assert seen == [
        ("admin", "NONE", "POST", "/api/v1/auth/login", "ok", 200),
        ("admin", "USER_SESSION", "POST", "/api/v1/users", "ok", 201),
        ("bob", "NONE", "POST", "/api/v1/auth/login", "denied", 401),
        ("bob", "NONE", "POST", "/api/v1/auth/login", "ok", 200),
        ("bob", "USER_SESSION", "POST", "/api/v1/agents/{agent_id}/disable", "denied", 403),
        ("bob", "USER_SESSION", "POST", "/api/v1/experiments", "ok", 201),
    ]
    entries = r.json()["entries"]
    assert entries[1]["target"] == "user bob" and entries[4]["target"] == "agent_id=a1"
    assert entries[0]["client"] == "testclient" and entries[0]["action"] == "login"
    assert entries[2]["user_id"] is not None  # a known name: the user is recorded
    assert r.json()["pagination"]["total"] == 6
    r = client.get("/api/v1/audit/verify", headers=bearer(admin))
    assert r.json() | {"checkpoint": None} == {
        "ok": True,
        "rows": 6,
        "first_id": 1,
        "last_id": 6,
        "checkpoint": None,
        "breaks": [],
        "break_count": 0,
    }


def test_migration_0015_keeps_sessions_and_users_and_goes_back(empty_db_url):
    """A database of 0009 with a user and a login session upgrades (the session is a
    USER_SESSION, the user not remote) and downgrades again (access tokens dropped)."""
    from alembic import command
    from sqlalchemy import text

    from dauntless.master.db.engine import _alembic_config, make_engine, upgrade

    engine = make_engine(empty_db_url)
    config = _alembic_config(engine)
    command.upgrade(config, "0009")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO user_sessions (user_id, token_hash, created_at, expires_at) "
                "VALUES (1, 'a', 0, 10)"
            )
        )
    upgrade(engine)
    with engine.begin() as conn:
        row = conn.execute(text("SELECT token_type, revoked, description FROM user_sessions")).one()
        assert (row[0], bool(row[1]), row[2]) == ("USER_SESSION", False, None)
        assert conn.execute(text("SELECT remote FROM users WHERE id = 1")).scalar() in (0, False)
        conn.execute(
            text(
                "INSERT INTO user_sessions (user_id, token_hash, created_at, expires_at, "
                "token_type) VALUES (1, 'b', 0, 10, 'ACCESS_TOKEN')"
            )
        )
    command.downgrade(config, "0009")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT token_hash FROM user_sessions")).scalars().all() == ["a"]
    upgrade(engine)
    engine.dispose()
