"""Migration 0014 (issue 30 scope 7) on a database made by the previous schema (0009), on
SQLite and PostgreSQL: every experiment and task lands in the Uncategorized workspace and
project, and every user keeps what they could do (the owner-or-admin rules) under basic
authz, and under RBAC through the roles the migration gave them (admins ClusterAdmin,
the others Viewer on the cluster, owners their owner's rights)."""

from __future__ import annotations

import json
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.auth_secrets import hash_password
from dauntless.master.db import (
    Database,
    ExperimentRow,
    ProjectRow,
    RoleAssignmentRow,
    TaskRow,
    WorkspaceRow,
    current_revision,
)
from dauntless.master.db.engine import MIGRATIONS_DIR
from dauntless.master.testing import bearer, login

CONFIG = {
    "name": "old",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _database_at_0009(url: str) -> None:
    db = Database(url)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = db.engine
    command.upgrade(cfg, "0009")
    assert current_revision(db.engine) == "0009"
    hashed = hash_password("pw")
    with db.engine.begin() as conn:
        # A cluster in use: its master gave `determined` its password at its first start.
        conn.execute(
            text("UPDATE users SET password_hash = :h WHERE username = 'determined'"),
            {"h": hash_password("")},
        )
        for name in ("alice", "bob"):
            conn.execute(
                text(
                    "INSERT INTO users (username, password_hash, admin, active, modified_at) "
                    "VALUES (:n, :h, :a, :a2, 0)"
                ),
                {"n": name, "h": hashed, "a": False, "a2": True},
            )
        alice = conn.execute(text("SELECT id FROM users WHERE username = 'alice'")).scalar()
        for _ in range(2):
            conn.execute(
                text(
                    "INSERT INTO experiments (name, state, archived, owner, owner_id, config, "
                    "original_config, seed, searcher_shutdown, progress, start_time) VALUES "
                    "('old', 'PAUSED', :f, 'alice', :o, :c, '', 0, :f, 0, 0)"
                ),
                {"o": alice, "c": json.dumps(CONFIG), "f": False},
            )
        conn.execute(
            text(
                "INSERT INTO tasks (id, type, state, owner, owner_id, description, config, "
                "entrypoint, meta, run_id, kill_requested, created_at) VALUES ('t1', "
                "'COMMAND', 'QUEUED', 'alice', :o, 'x', :c, '\"true\"', '{}', 0, :f, 0)"
            ),
            {
                "o": alice,
                "c": json.dumps({"resources": {"slots": 0, "resource_pool": ""}}),
                "f": False,
            },
        )
    db.dispose()


def test_upgrade_from_0009_keeps_everyone_s_rights(empty_db_url: str, tmp_path: Path) -> None:
    db_url = empty_db_url
    _database_at_0009(db_url)
    for authz in ("basic", "rbac"):
        config = MasterConfig(
            data_dir=str(tmp_path), db_url=db_url, security={"authz": {"type": authz}}
        )
        app = create_app(config, run_loop=False)
        with TestClient(app) as client:
            if authz == "basic":
                with app.state.ctx.db.read() as s:
                    ws = s.get(WorkspaceRow, 1)
                    p = s.get(ProjectRow, 1)
                    assert (ws.name, ws.immutable, p.name, p.workspace_id) == (
                        "Uncategorized",
                        True,
                        "Uncategorized",
                        1,
                    )
                    assert {e.project_id for e in s.scalars(select(ExperimentRow))} == {1}
                    assert s.get(TaskRow, "t1").workspace_id == 1
                    roles = {
                        a.user_id: (a.role_id, a.workspace_id)
                        for a in s.scalars(select(RoleAssignmentRow))
                    }
                users = {
                    u["username"]: u["id"]
                    for u in client.get("/api/v1/users", headers=bearer(login(client))).json()[
                        "users"
                    ]
                }
                assert roles == {
                    users["admin"]: (1, None),  # ClusterAdmin
                    users["determined"]: (4, None),  # Viewer
                    users["alice"]: (4, None),
                    users["bob"]: (4, None),
                }
            admin = bearer(login(client))
            alice = bearer(login(client, "alice", "pw"))
            bob = bearer(login(client, "bob", "pw"))
            # Everyone still sees everything, in Uncategorized.
            for who in (alice, bob):
                page = client.get("/api/v1/experiments", headers=who).json()
                assert page["total"] == 2 and all(
                    e["workspace_name"] == "Uncategorized" for e in page["experiments"]
                )
                tasks = client.get("/api/v1/tasks", headers=who).json()["tasks"]
                assert [t["id"] for t in tasks] == ["t1"] and tasks[0]["workspace_id"] == 1
            # Owner or admin: alice and the admin may change alice's experiments, bob not.
            r = client.post("/api/v1/experiments/1/activate", headers=alice)
            assert r.status_code == 200, (authz, r.text)
            r = client.post("/api/v1/experiments/1/pause", headers=bob)
            assert r.status_code == 403, (authz, r.text)
            r = client.post("/api/v1/experiments/1/pause", headers=admin)
            assert r.status_code == 200, (authz, r.text)
            r = client.post("/api/v1/tasks/t1/kill", headers=bob)
            assert r.status_code == 403, (authz, r.text)
            assert client.get("/api/v1/tasks/t1", headers=bob).status_code == 200
            # The admin still administers users.
            r = client.post("/api/v1/users", headers=admin, json={"username": f"c-{authz}"})
            assert r.status_code == 201, r.text
        app.state.ctx.db.dispose()


def test_a_new_database_gives_determined_no_role(tmp_path: Path) -> None:
    app = create_app(MasterConfig(data_dir=str(tmp_path)), run_loop=False)
    with TestClient(app), app.state.ctx.db.read() as s:
        rows = [(a.user_id, a.role_id) for a in s.scalars(select(RoleAssignmentRow))]
    assert rows == [(1, 1)]  # admin: ClusterAdmin; determined: nothing
