"""The routers' routes are built once per process and shared by every application
(``dauntless.master.app.shared_routes``): each application still answers from its own
state and still asks every caller for a credential."""

from __future__ import annotations

from pathlib import Path

from databases import migrated_sqlite
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app, shared_routes
from dauntless.master.testing import bearer, login


def _app(data_dir: Path) -> FastAPI:
    data_dir.mkdir()
    migrated_sqlite(data_dir / "dauntless.db")  # the schema at head: no Alembic
    return create_app(MasterConfig(data_dir=str(data_dir), port=18080), run_loop=False)


def test_two_applications_share_the_routes_and_keep_their_own_state(tmp_path: Path) -> None:
    first, second = _app(tmp_path / "a"), _app(tmp_path / "b")
    shared = shared_routes()
    for app in (first, second):
        assert all(any(r is s for r in app.router.routes) for s in shared)
    with TestClient(first) as a, TestClient(second) as b:
        token_a, token_b = login(a), login(b)
        r = a.post("/api/v1/workspaces", headers=bearer(token_a), json={"name": "only-in-a"})
        assert r.status_code == 201, r.text
        names = {
            w["name"]
            for w in b.get("/api/v1/workspaces", headers=bearer(token_b)).json()["workspaces"]
        }
        assert "only-in-a" not in names  # b reads its own database through the same route
        names = {
            w["name"]
            for w in a.get("/api/v1/workspaces", headers=bearer(token_a)).json()["workspaces"]
        }
        assert "only-in-a" in names
        # Each application knows only its own sessions, and a shared route still asks.
        assert b.get("/api/v1/workspaces", headers=bearer(token_a)).status_code == 401
        assert b.get("/api/v1/workspaces").status_code == 401
