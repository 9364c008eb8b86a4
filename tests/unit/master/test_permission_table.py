"""The permission table (issue 30 scope 2): one row per route, nothing else decides; a
route added without a row is refused, never open; an old-style ``@access`` rule is
honoured until its route is moved into the table."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import authz
from dauntless.master.app import create_app
from dauntless.master.auth import access
from dauntless.master.permissions import ROUTES
from dauntless.master.rbac import GLOBAL_ONLY, ROLES, Perm, role_by_name
from dauntless.master.testing import bearer, login

_PATH_OBJECTS = {
    "exp_id",
    "trial_id",
    "uuid",
    "model_name",
    "task_id",
    "job_id",
    "project_id",
    "workspace_id",
}


def _app(tmp_path: Path, **security: object):
    return create_app(
        MasterConfig(data_dir=str(tmp_path), port=18080, security=security), run_loop=False
    )


def test_every_route_has_exactly_one_row(tmp_path: Path) -> None:
    app = _app(tmp_path)
    spec = {(m.upper(), p) for p, item in app.openapi()["paths"].items() for m in item}
    assert spec - set(ROUTES) == set(), "routes without a row in permissions.ROUTES"
    assert set(ROUTES) - spec == {("PROXY", "/proxy/{task_id}/")}, "rows without a route"
    for (method, path), rule in ROUTES.items():
        params = set(re.findall(r"{(\w+)}", path))
        if rule.on == "path":
            assert rule.perm is not None, (method, path)
            assert params & _PATH_OBJECTS, f"{method} {path}: names no object to check"
        if rule.on in ("cluster", "self", "body", "list"):
            assert rule.perm is not None, (method, path)
        if rule.on == "cluster":
            assert rule.perm in GLOBAL_ONLY or rule.perm is not None
    # Determined's role table: ClusterAdmin holds all, WorkspaceAdmin not 4005/11004.
    assert ROLES[1].permissions == frozenset(Perm)
    assert Perm.SET_WORKSPACE_AGENT_USER_GROUP not in ROLES[2].permissions
    assert Perm.CREATE_NSC not in ROLES[7].permissions and Perm.VIEW_NSC in ROLES[7].permissions
    assert role_by_name("editor") is ROLES[5] and ROLES[3].global_only


def test_undeclared_routes_are_refused_and_access_rules_still_work(tmp_path: Path) -> None:
    app = _app(tmp_path)
    extra = APIRouter(prefix="/api/v1")

    @extra.get("/undeclared")
    def undeclared(request: Request) -> dict:
        return {}

    @extra.get("/legacy-admin")
    @access(users="admin", what="read the legacy thing")
    def legacy(request: Request) -> dict:
        return {}

    @extra.get("/legacy-any")
    @access()
    def legacy_any(request: Request) -> dict:
        return {}

    before = len(app.router.routes)
    app.include_router(extra)  # then ahead of the WebUI's catch-all
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[:0] = added
    with TestClient(app) as client:
        admin = bearer(login(client))
        client.post("/api/v1/users", headers=admin, json={"username": "u", "password": "pw"})
        user = bearer(login(client, "u", "pw"))
        assert client.get("/api/v1/undeclared").status_code == 401
        r = client.get("/api/v1/undeclared", headers=user)
        assert r.status_code == 403 and "declares no permission" in r.json()["detail"]
        assert client.get("/api/v1/undeclared", headers=admin).status_code == 200
        r = client.get("/api/v1/legacy-admin", headers=user)
        assert r.status_code == 403 and "read the legacy thing" in r.json()["detail"]
        assert client.get("/api/v1/legacy-admin", headers=admin).status_code == 200
        assert client.get("/api/v1/legacy-any", headers=user).status_code == 200


def test_rbac_owner_rights_groups_and_cache(tmp_path: Path) -> None:
    """Under RBAC: an owner keeps their rights while they may see the object; roles from
    groups count; taking a role back takes effect at the next request; a global role
    cannot be given on a workspace."""
    app = _app(tmp_path, authz={"type": "rbac"})
    with TestClient(app) as client:
        admin = bearer(login(client))
        ids = {}
        for name in ("owner", "other"):
            r = client.post(
                "/api/v1/users", headers=admin, json={"username": name, "password": "pw"}
            )
            ids[name] = r.json()["user"]["id"]
        owner = bearer(login(client, "owner", "pw"))
        other = bearer(login(client, "other", "pw"))
        r = client.post("/api/v1/workspaces", headers=owner, json={"name": "x"})
        assert r.status_code == 403 and "PERMISSION_TYPE_CREATE_WORKSPACE" in r.json()["detail"]
        creator = {"role": {"role_id": 3}, "scope_cluster": True}
        r = client.post(
            "/api/v1/roles/add-assignments",
            headers=admin,
            json={"user_role_assignments": [{"user_id": ids["owner"], "role_assignment": creator}]},
        )
        assert r.status_code == 200, r.text
        r = client.post("/api/v1/workspaces", headers=owner, json={"name": "x"})
        assert r.status_code == 201, r.text  # the grants were read again at once
        ws = r.json()["workspace"]["id"]
        # The creator became WorkspaceAdmin there (workspace_creator_assign_role).
        summary = client.get("/api/v1/permissions/summary", headers=owner).json()
        assert {"role_id": 2, "scope_workspace_ids": [ws], "scope_cluster": False} in summary[
            "assignments"
        ]
        assert client.get(f"/api/v1/workspaces/{ws}", headers=other).status_code == 403
        listed = client.get("/api/v1/workspaces", headers=other).json()
        assert listed["workspaces"] == [] and listed["pagination"]["total"] == 0
        # A group's role counts for its members.
        g = client.post(
            "/api/v1/groups", headers=admin, json={"name": "team", "add_users": [ids["other"]]}
        )
        gid = g.json()["group"]["group_id"]
        viewer = {"role": {"role_id": 4}, "scope_workspace_id": ws}
        body = {"group_role_assignments": [{"group_id": gid, "role_assignment": viewer}]}
        assert (
            client.post("/api/v1/roles/add-assignments", headers=owner, json=body).status_code
            == 200
        )
        assert client.get(f"/api/v1/workspaces/{ws}", headers=other).status_code == 200
        r = client.patch(f"/api/v1/workspaces/{ws}", headers=other, json={"name": "y"})
        assert r.status_code == 403 and "PERMISSION_TYPE_UPDATE_WORKSPACE" in r.json()["detail"]
        # Removing the member takes the role away at once.
        client.put(f"/api/v1/groups/{gid}", headers=admin, json={"remove_users": [ids["other"]]})
        assert client.get(f"/api/v1/workspaces/{ws}", headers=other).status_code == 403
        # Global roles only on the cluster.
        bad = {"role": {"role_id": 3}, "scope_workspace_id": ws}
        r = client.post(
            "/api/v1/roles/add-assignments",
            headers=admin,
            json={"user_role_assignments": [{"user_id": ids["other"], "role_assignment": bad}]},
        )
        assert r.status_code == 400 and "only on the cluster" in r.json()["detail"]
        # Owner rights: the WorkspaceAdmin role taken back, the owner still edits while
        # they may view (Viewer), and not once they may not.
        own = {"role": {"role_id": 2}, "scope_workspace_id": ws}
        view = {"role": {"role_id": 4}, "scope_workspace_id": ws}
        for path, a in (("remove", own), ("add", view)):
            r = client.post(
                f"/api/v1/roles/{path}-assignments",
                headers=admin,
                json={"user_role_assignments": [{"user_id": ids["owner"], "role_assignment": a}]},
            )
            assert r.status_code == 200
        r = client.patch(f"/api/v1/workspaces/{ws}", headers=owner, json={"name": "mine"})
        assert r.status_code == 200, r.text
        client.post(
            "/api/v1/roles/remove-assignments",
            headers=admin,
            json={"user_role_assignments": [{"user_id": ids["owner"], "role_assignment": view}]},
        )
        r = client.patch(f"/api/v1/workspaces/{ws}", headers=owner, json={"name": "gone"})
        assert r.status_code == 403 and "PERMISSION_TYPE_VIEW_WORKSPACE" in r.json()["detail"]
        assert isinstance(authz.ALL, frozenset)
