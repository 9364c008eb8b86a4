"""Authentication and authorization on every route of the master (issue 8).

The walk test goes through ``app.openapi()`` so that a route added later without a rule
is caught: it must refuse a caller without a credential (401), refuse another ordinary
user's modifications of what alice owns (403), and let the right caller through.
"""

from __future__ import annotations

import logging
import time

import pytest
from argon2 import PasswordHasher
from databases import migrated_sqlite
from fastapi.testclient import TestClient
from sqlalchemy import event, select, text

from dauntless._auth import CLUSTER_SECRET_HEADER, COOKIE_NAME
from dauntless.config import MasterConfig
from dauntless.master import auth_secrets, loop
from dauntless.master.app import create_app
from dauntless.master.auth import LoginThrottle, hash_token
from dauntless.master.db import AllocationRow, Database, ExperimentRow, UserRow
from dauntless.master.testing import (
    agent_headers,
    bearer,
    login,
    model_def_tarball,
    register_agent,
)

CONFIG = """
name: owned
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: 20}
"""


class World:
    """A master with users alice and bob, an experiment of alice's with two trials
    running on agent a1, and the credentials of everyone."""

    def __init__(self, client: TestClient, app) -> None:
        self.client, self.app, self.ctx = client, app, app.state.ctx
        self.admin = login(client)
        self.secret = agent_headers(app)  # the cluster secret: registers agents only
        for name in ("alice", "bob"):
            r = client.post(
                "/api/v1/users",
                headers=bearer(self.admin),
                json={"username": name, "password": f"{name}-pw", "admin": False},
            )
            assert r.status_code == 201, r.text
            setattr(self, f"{name}_id", r.json()["user"]["id"])
        self.alice = login(client, "alice", "alice-pw")
        self.bob = login(client, "bob", "bob-pw")
        self.exp_ids = [self._create(self.alice) for _ in range(2)]
        self.exp_id = self.exp_ids[0]
        # the credential the registration issued to a1 (issue 29)
        self.agent = register_agent(
            client,
            app,
            {"id": "a1", "slots": [{"id": "cpu0", "type": "cpu"}, {"id": "cpu1", "type": "cpu"}]},
        )
        assert loop.schedule_pass(self.ctx) == 2
        r = client.post("/api/v1/agents/a1/heartbeat", headers=self.agent, json={"running": []})
        assert r.status_code == 200, r.text
        specs = sorted(r.json()["start"], key=lambda sp: sp["trial_id"])
        assert len(specs) == 2
        self.specs = specs
        self.trial_id, self.other_trial_id = specs[0]["trial_id"], specs[1]["trial_id"]
        self.alloc_id = specs[0]["env"]["DET_ALLOCATION_ID"]
        self.trial = specs[0]["env"]["DET_SESSION_TOKEN"]
        self.other_trial = specs[1]["env"]["DET_SESSION_TOKEN"]
        self.uuid = "11111111-2222-3333-4444-555555555555"
        r = client.post(
            "/api/v1/checkpoints",
            headers=bearer(self.trial),
            json={
                "uuid": self.uuid,
                "trial_id": self.trial_id,
                "allocation_id": self.alloc_id,
                "steps_completed": 5,
                "resources": {},
                "metadata": {},
            },
        )
        assert r.status_code == 200, r.text
        # A command of alice's (no slot), handed to a1: its session token (issue 20).
        r = client.post(
            "/api/v1/commands",
            headers=bearer(self.alice),
            data={"entrypoint": '"true"', "config": "resources: {slots: 0}"},
            files={"context": ("context.tar.gz", model_def_tarball(), "application/gzip")},
        )
        assert r.status_code == 201, r.text
        self.task_id = r.json()["task"]["id"]
        assert loop.schedule_pass(self.ctx) == 1
        running = [sp["allocation_id"] for sp in specs]
        r = client.post(
            "/api/v1/agents/a1/heartbeat", headers=self.agent, json={"running": running}
        )
        (task_spec,) = r.json()["start"]
        self.task_token = task_spec["env"]["DET_SESSION_TOKEN"]
        r = client.post("/api/v1/tokens", headers=bearer(self.alice), json={})
        assert r.status_code == 200, r.text
        self.token_id = r.json()["token_id"]  # an access token of alice's (issue 30)
        # Issue 30: a workspace and a project of alice's, a group (admins make groups).
        r = client.post("/api/v1/workspaces", headers=bearer(self.alice), json={"name": "al"})
        assert r.status_code == 201, r.text
        self.workspace_id = r.json()["workspace"]["id"]
        r = client.post(
            f"/api/v1/workspaces/{self.workspace_id}/projects",
            headers=bearer(self.alice),
            json={"name": "p"},
        )
        assert r.status_code == 201, r.text
        self.project_id = r.json()["project"]["id"]
        r = client.post("/api/v1/groups", headers=bearer(self.admin), json={"name": "g"})
        assert r.status_code == 201, r.text
        self.group_id = r.json()["group"]["group_id"]

    def _create(self, token: str) -> int:
        r = self.client.post(
            "/api/v1/experiments",
            headers=bearer(token),
            data={"config": CONFIG},
            files={"context": ("context.tar.gz", model_def_tarball(), "application/gzip")},
        )
        assert r.status_code == 201, r.text
        return r.json()["experiment"]["id"]


@pytest.fixture()
def world(tmp_path, monkeypatch):
    # argon2id at its smallest costs: the walk signs in once per changing route (the
    # hashing at the default costs is what the tests without this fixture use).
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        yield World(client, app)


# ---------------------------------------------------------------------- the walk

OPEN = {
    ("POST", "/api/v1/auth/login"),
    ("GET", "/api/v1/master"),
    ("GET", "/info"),  # Determined's client asks here first (issue 33)
    # single sign-on (issue 30): the provider's redirects and the CLI's code exchange
    ("GET", "/oidc/sso"),
    ("GET", "/oidc/callback"),
    ("POST", "/oidc/cli-confirm"),
    ("POST", "/api/v1/auth/sso/exchange"),
}
"""Routes that need no credential."""

ANY_USER_MAY_MODIFY = {
    ("POST", "/api/v1/experiments"),  # creates one of their own
    ("POST", "/api/v1/commands"),  # tasks of their own (issue 20)
    ("POST", "/api/v1/notebooks"),
    ("POST", "/api/v1/shells"),
    ("POST", "/api/v1/tensorboards"),
    ("POST", "/api/v1/preview-hp-search"),  # computes, changes nothing
    ("POST", "/api/v1/auth/logout"),  # ends their own session
    ("POST", "/api/v1/tokens"),  # an access token of their own (issue 30)
    ("POST", "/api/v1/workspaces"),  # issue 30: a workspace of their own
    ("POST", "/api/v1/workspaces/{workspace_id}/pin"),  # their own pins
    ("POST", "/api/v1/workspaces/{workspace_id}/unpin"),
    ("POST", "/api/v1/roles/search"),  # reads with a body
    ("POST", "/api/v1/roles/search/by-ids"),
    ("POST", "/api/v1/roles/search/by-assignability"),
    ("POST", "/api/v1/groups/search"),
    ("POST", "/api/v1/models"),  # issue 31: a model of their own (basic authz)
    ("POST", "/api/v1/webhooks"),  # a webhook of their own
}
"""Modifying routes an ordinary user may call on nothing of alice's."""

AGENT_ROUTES = {
    ("POST", "/api/v1/agents"),
    ("POST", "/api/v1/agents/{agent_id}/heartbeat"),
    ("POST", "/api/v1/allocations/{allocation_id}/exited"),
    ("POST", "/api/v1/task/logs"),
}
TRIAL_ROUTES = {
    ("POST", "/api/v1/trials/{trial_id}/searcher/completed_operation"),
    ("POST", "/api/v1/trials/{trial_id}/metrics"),
    ("POST", "/api/v1/trials/{trial_id}/metrics/batch"),
    ("POST", "/api/v1/trials/{trial_id}/profiler/metrics"),  # issue 34: the profiler
    ("POST", "/api/v1/trials/{trial_id}/progress"),
    ("POST", "/api/v1/trials/{trial_id}/early_exit"),
    ("POST", "/api/v1/checkpoints"),
    ("POST", "/api/v1/allocations/{allocation_id}/rendezvous"),
    # Trial internals: the allocation's own token and admins only (issue 18).
    ("GET", "/api/v1/allocations/{allocation_id}/rendezvous"),
    ("GET", "/api/v1/allocations/{allocation_id}/signals/preemption"),
    ("GET", "/api/v1/trials/{trial_id}/searcher/operation"),
    ("POST", "/api/v1/trials/{trial_id}/runner/metadata"),  # issue 31: set_status/metadata
    ("POST", "/api/v1/webhooks/custom"),  # core.alert
}
TASK_ROUTES = {("POST", "/api/v1/tasks/{task_id}/service")}
"""Routes for a command's, notebook's ... own session token."""
TASK_OWNER_READS = {
    ("GET", "/api/v1/tasks/{task_id}/context"),
    ("GET", "/api/v1/experiments/{exp_id}/searcher_events"),
    ("GET", "/api/v1/shells/{task_id}/ssh_key"),  # the owner only, not even an admin
}
"""Reads only the owner (a task's, or an experiment's: a remote search runner's events),
an admin, or the task's agent may make."""
ADMIN_ROUTES = {
    ("POST", "/api/v1/agents/{agent_id}/enable"),
    ("POST", "/api/v1/agents/{agent_id}/disable"),
    ("POST", "/api/v1/agents/{agent_id}/slots/{slot_id}/{action}"),
    ("POST", "/api/v1/users"),
    ("GET", "/api/v1/audit"),
    ("GET", "/api/v1/audit/verify"),
    ("POST", "/api/v1/groups"),
    ("PUT", "/api/v1/groups/{group_id}"),
    ("DELETE", "/api/v1/groups/{group_id}"),
    ("PATCH", "/api/v1/users/assignments"),
    ("GET", "/api/v1/roles/search/by-group/{group_id}"),
    ("POST", "/api/v1/roles/add-assignments"),
    ("POST", "/api/v1/roles/remove-assignments"),
    ("POST", "/api/v1/resource-pools/{pool_name}/workspace-bindings"),
    ("PUT", "/api/v1/resource-pools/{pool_name}/workspace-bindings"),
    ("DELETE", "/api/v1/resource-pools/{pool_name}/workspace-bindings"),
    # issue 34: the master's logs and config, the cluster message, usage reports
    ("GET", "/api/v1/master/logs"),
    ("GET", "/api/v1/master/config"),
    ("PATCH", "/api/v1/master/config"),
    ("PUT", "/api/v1/master/cluster_message"),
    ("DELETE", "/api/v1/master/cluster_message"),
    ("POST", "/api/v1/cleanup_logs"),
    ("GET", "/api/v1/resources/allocation/raw"),
    ("GET", "/api/v1/resources/allocation/aggregated"),
    ("GET", "/api/v1/resources/usage"),
    ("GET", "/prom/det-state-metrics"),
    ("GET", "/debug/prom/metrics"),
    ("GET", "/prom/det-http-sd-config"),
}
SELF_ROUTES = {
    ("GET", "/api/v1/roles/search/by-user/{user_id}"),
    ("PATCH", "/api/v1/users/{user_id}"),
    ("POST", "/api/v1/users/{user_id}/password"),
    ("GET", "/api/v1/users/{user_id}/sso-groups"),
    ("PATCH", "/api/v1/tokens/{token_id}"),
}

BODIES = {
    ("POST", "/api/v1/auth/login"): {"username": "bob", "password": "bob-pw"},
    ("POST", "/api/v1/users"): {"username": "carol", "password": "", "admin": False},
    ("PATCH", "/api/v1/users/{user_id}"): {"display_name": "Alice A."},
    ("PATCH", "/api/v1/tokens/{token_id}"): {"description": "alice's CI"},
    ("POST", "/api/v1/users/{user_id}/password"): {"password": "alice-pw"},
    ("POST", "/api/v1/trials/{trial_id}/metrics"): {
        "group": "training",
        "steps_completed": 2,
        "trial_run_id": 1,
        "metrics": {"loss": 1.0},
    },
    ("POST", "/api/v1/trials/{trial_id}/metrics/batch"): {
        "reports": [
            {"group": "training", "steps_completed": 3, "trial_run_id": 1, "metrics": {"loss": 1.0}}
        ]
    },
    ("POST", "/api/v1/trials/{trial_id}/profiler/metrics"): {
        "reports": [{"group": "cpu", "agent_id": "a1", "metrics": {"cpu_util_simple": 5.0}}]
    },
    ("POST", "/api/v1/trials/{trial_id}/progress"): {"progress": 0.5},
    ("POST", "/api/v1/allocations/{allocation_id}/rendezvous"): {"addr": "1.2.3.4", "port": 9},
    ("POST", "/api/v1/preview-hp-search"): {"config": CONFIG},
    ("POST", "/api/v1/agents/{agent_id}/heartbeat"): {"running": []},
    ("POST", "/api/v1/task/logs"): {"logs": []},
    ("POST", "/api/v1/allocations/{allocation_id}/exited"): {"exit_code": 0},
    ("PATCH", "/api/v1/experiments/{exp_id}"): {"description": "edited"},
    ("POST", "/api/v1/tasks/{task_id}/service"): {"addr": "127.0.0.1", "port": 9},
    ("PATCH", "/api/v1/jobs/{job_id}"): {"priority": 5},
    ("POST", "/api/v1/workspaces"): {"name": "bobs"},
    ("PATCH", "/api/v1/workspaces/{workspace_id}"): {"name": "al2"},
    ("POST", "/api/v1/workspaces/{workspace_id}/projects"): {"name": "q"},
    ("PATCH", "/api/v1/projects/{project_id}"): {"description": "d"},
    ("POST", "/api/v1/projects/{project_id}/notes"): {"note": {"name": "n", "contents": "c"}},
    ("PUT", "/api/v1/projects/{project_id}/notes"): {"notes": []},
    ("POST", "/api/v1/roles/search/by-ids"): {"role_ids": [1]},
    ("POST", "/api/v1/groups"): {"name": "g2"},
    ("PUT", "/api/v1/groups/{group_id}"): {"name": "g3"},
    ("PATCH", "/api/v1/users/assignments"): {"user_ids": [], "add_groups": []},
    ("POST", "/api/v1/resource-pools/{pool_name}/workspace-bindings"): {"workspace_ids": []},
    ("PUT", "/api/v1/resource-pools/{pool_name}/workspace-bindings"): {"workspace_ids": []},
    ("DELETE", "/api/v1/resource-pools/{pool_name}/workspace-bindings"): {"workspace_ids": []},
}


def _routes(app) -> list[tuple[str, str]]:
    out = []
    for path, item in app.openapi()["paths"].items():
        for method in item:
            out.append((method.upper(), path))
    return sorted(out)


ELSEWHERE = ("model_name", "template_name", "webhook_id")
"""Path objects this world does not make (models, templates, webhooks): their routes'
refusals to other users are checked with real objects in test_route_roles.py."""


def _url(w: World, path: str) -> str:
    action = "enable" if "/slots/" in path else "pause"
    return path.format(
        exp_id=w.exp_id,
        trial_id=w.trial_id,
        uuid=w.uuid,
        agent_id="a1",
        slot_id="cpu0",
        action=action,
        allocation_id=w.alloc_id,
        user_id=w.alice_id,
        label="v1",
        task_id=w.task_id,
        job_id=f"experiment-{w.exp_id}",
        token_id=w.token_id,
        workspace_id=w.workspace_id,
        project_id=w.project_id,
        group_id=w.group_id,
        pool_name="default",
        # objects that need not exist: each route's credential check comes first
        model_name="no-such-model",
        model_version_num=1,
        template_name="no-such-template",
        webhook_id=999999,
    )


def _call(w: World, method: str, path: str, headers: dict[str, str] | None):
    w.client.cookies.clear()
    params = {"max_seconds": 0.05} if "/stream/" in path else None
    if method == "POST" and path == "/api/v1/experiments":
        return w.client.post(_url(w, path), headers=headers, data={"config": CONFIG})
    body = BODIES.get((method, path))
    if (method, path) == ("POST", "/api/v1/experiments/continue"):  # the id is in the body
        body = {"id": w.exp_id}
    if path.endswith("{project_id}/move"):  # to its own workspace: 409, a name clash
        body = {"destination_workspace_id": w.workspace_id}
    if path.endswith("/experiments/move"):
        body = {"experiment_ids": [w.exp_id], "destination_project_id": w.project_id}
    elif path.endswith("{exp_id}/move"):
        body = {"destination_project_id": w.project_id}
    elif path.endswith("-assignments"):  # a role on alice's workspace, for bob
        assignment = {"role": {"role_id": 4}, "scope_workspace_id": w.workspace_id}
        body = {"user_role_assignments": [{"user_id": w.bob_id, "role_assignment": assignment}]}
    return w.client.request(
        method,
        _url(w, path),
        headers=headers,
        params=params,
        json=body if body is not None else ({} if method != "GET" else None),
    )


def _right(w: World, method: str, path: str) -> dict[str, str]:
    key = (method, path)
    if key == ("POST", "/api/v1/agents"):
        return w.secret
    if key in AGENT_ROUTES:
        return w.agent
    if key in TRIAL_ROUTES:
        return bearer(w.trial)
    if key in TASK_ROUTES:
        return bearer(w.task_token)
    if key in TASK_OWNER_READS:
        return bearer(w.alice)
    if key in ADMIN_ROUTES:
        return bearer(w.admin)
    if key in SELF_ROUTES or method != "GET":
        # a fresh token each time: logout and the password change end alice's tokens
        return bearer(login(w.client, "alice", "alice-pw"))
    return bearer(w.bob)  # reads: any signed-in user


def test_every_route_requires_the_right_credential(world):
    w = world
    routes = _routes(w.app)
    assert len(routes) > 40
    assert not {*AGENT_ROUTES, *TRIAL_ROUTES, *ADMIN_ROUTES, *SELF_ROUTES, *OPEN} - set(routes)

    for method, path in routes:  # no credential
        r = _call(w, method, path, None)
        if (method, path) in OPEN:
            assert r.status_code not in (401, 403), (method, path, r.text)
        else:
            assert r.status_code == 401, (method, path, r.status_code, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["detail"]

    for method, path in routes:  # bob on alice's things, and garbage tokens
        if (method, path) in OPEN:
            continue
        r = _call(w, method, path, bearer("not-a-token"))
        assert r.status_code == 401, (method, path, r.text)
        r = _call(w, method, path, {CLUSTER_SECRET_HEADER: "wrong"})
        assert r.status_code == 401, (method, path, r.text)
        if method == "GET" or (method, path) in ANY_USER_MAY_MODIFY:
            continue
        r = _call(w, method, path, bearer(w.bob))
        elsewhere = any(f"{{{k}}}" in path for k in ELSEWHERE) or "/template/" in path
        if r.status_code in (400, 404) and elsewhere:
            continue  # no such object in this world: test_route_roles.py has them
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert r.json()["detail"], (method, path)

    # the right caller: trials first (the agent's routes end their allocation)
    order = sorted(
        routes,
        key=lambda mp: (
            mp not in TRIAL_ROUTES | TASK_ROUTES,
            mp in AGENT_ROUTES,
            mp[0] == "DELETE",
        ),
    )
    for method, path in order:
        r = _call(w, method, path, _right(w, method, path))
        assert r.status_code not in (401, 403), (method, path, r.status_code, r.text)
        assert r.status_code < 500, (method, path, r.text)


def test_refusals_name_the_rule(world):
    w = world
    r = w.client.post(f"/api/v1/experiments/{w.exp_id}/pause", headers=bearer(w.bob))
    assert r.status_code == 403
    assert r.json()["detail"] == (
        f"only the owner of experiment {w.exp_id} (alice) or an admin may pause it"
    )
    r = w.client.post(f"/api/v1/trials/{w.trial_id}/kill", headers=bearer(w.bob))
    assert "(alice) or an admin may kill its trial" in r.json()["detail"]
    r = w.client.post("/api/v1/agents/a1/disable", headers=bearer(w.alice))
    assert r.status_code == 403 and r.json()["detail"] == "only an admin may disable agents"
    r = w.client.get("/api/v1/experiments", headers=w.agent)
    assert r.status_code == 403 and "agents" in r.json()["detail"]
    # the owner and an admin may; views name the owner
    r = w.client.post(f"/api/v1/experiments/{w.exp_id}/pause", headers=bearer(w.alice))
    assert r.status_code == 200, r.text
    exp = r.json()["experiment"]
    assert (exp["owner"], exp["username"], exp["user_id"]) == ("alice", "alice", w.alice_id)
    r = w.client.post(f"/api/v1/experiments/{w.exp_id}/activate", headers=bearer(w.admin))
    assert r.status_code == 200, r.text


def test_a_trial_token_reaches_only_its_own_trial(world):
    w = world
    mine, other = w.trial_id, w.other_trial_id
    body = {"group": "training", "steps_completed": 4, "trial_run_id": 1, "metrics": {"loss": 0.5}}
    r = w.client.post(f"/api/v1/trials/{other}/metrics", headers=bearer(w.trial), json=body)
    assert r.status_code == 403, r.text
    assert f"only its own trial (trial {mine}" in r.json()["detail"]
    r = w.client.post(f"/api/v1/trials/{mine}/metrics", headers=bearer(w.trial), json=body)
    assert r.status_code == 200, r.text
    r = w.client.post(f"/api/v1/trials/{other}/metrics", headers=bearer(w.other_trial), json=body)
    assert r.status_code == 200, r.text
    # checkpoints name their trial in the body
    ck = {
        "uuid": "u-2",
        "trial_id": other,
        "allocation_id": w.alloc_id,
        "steps_completed": 4,
        "resources": {},
        "metadata": {},
    }
    r = w.client.post("/api/v1/checkpoints", headers=bearer(w.trial), json=ck)
    assert r.status_code == 403, r.text
    # its own experiment's context, not another's; no user or agent routes
    r = w.client.get(f"/api/v1/experiments/{w.exp_ids[0]}/model_def", headers=bearer(w.trial))
    assert r.status_code == 200
    r = w.client.get(f"/api/v1/experiments/{w.exp_ids[1]}/model_def", headers=bearer(w.trial))
    assert r.status_code == 403
    other_alloc = w.specs[1]["env"]["DET_ALLOCATION_ID"]
    r = w.client.get(
        f"/api/v1/allocations/{other_alloc}/signals/preemption", headers=bearer(w.trial)
    )
    assert r.status_code == 403
    for method, url in [
        ("GET", "/api/v1/experiments"),
        ("POST", "/api/v1/task/logs"),
        ("GET", "/api/v1/me"),
        ("POST", f"/api/v1/trials/{mine}/kill"),
    ]:
        r = w.client.request(method, url, headers=bearer(w.trial), json={"logs": []})
        assert r.status_code == 403, (method, url, r.text)
    # the token dies with its allocation; it is stored only hashed
    with w.ctx.db.read() as s:
        stored = s.scalar(select(AllocationRow.token_hash).where(AllocationRow.id == w.alloc_id))
    assert stored == hash_token(w.trial) and w.trial not in stored
    r = w.client.post(
        f"/api/v1/allocations/{w.alloc_id}/exited", headers=w.agent, json={"exit_code": 0}
    )
    assert r.status_code == 200
    r = w.client.get(f"/api/v1/trials/{mine}/searcher/operation", headers=bearer(w.trial))
    assert r.status_code == 401


def test_tokens_end_at_logout_and_password_change(world):
    w = world
    c = w.client
    t1 = login(c, "alice", "alice-pw")
    assert c.get("/api/v1/me", headers=bearer(t1)).json()["user"]["username"] == "alice"
    r = c.post("/api/v1/auth/logout", headers=bearer(t1))
    assert r.status_code == 200 and r.json() == {}
    assert c.get("/api/v1/me", headers=bearer(t1)).status_code == 401
    assert c.get("/api/v1/me", headers=bearer(w.alice)).status_code == 200  # others live

    t2 = login(c, "alice", "alice-pw")
    r = c.post(
        f"/api/v1/users/{w.alice_id}/password",
        headers=bearer(t2),
        json={"password": "new-pw", "old_password": "wrong"},
    )
    assert r.status_code == 403 and r.json()["detail"] == "the old password is wrong"
    r = c.post(
        f"/api/v1/users/{w.alice_id}/password",
        headers=bearer(w.bob),
        json={"password": "bobs-choice"},
    )
    assert r.status_code == 403
    r = c.post(
        f"/api/v1/users/{w.alice_id}/password",
        headers=bearer(t2),
        json={"password": "new-pw", "old_password": "alice-pw"},
    )
    assert r.status_code == 200 and "new-pw" not in r.text
    for token in (t2, w.alice):
        assert c.get("/api/v1/me", headers=bearer(token)).status_code == 401
    r = c.post("/api/v1/auth/login", json={"username": "alice", "password": "alice-pw"})
    assert r.status_code == 401
    t3 = login(c, "alice", "new-pw")
    assert c.get("/api/v1/auth/user", headers=bearer(t3)).status_code == 200
    # an admin resets anyone's password; that ends the user's tokens too
    r = c.post(
        f"/api/v1/users/{w.alice_id}/password", headers=bearer(w.admin), json={"password": "reset"}
    )
    assert r.status_code == 200
    assert c.get("/api/v1/me", headers=bearer(t3)).status_code == 401


def test_login_answers_and_cookie(world):
    w = world
    c = w.client
    c.cookies.clear()
    for body in (
        {"username": "alice", "password": "nope"},
        {"username": "nobody", "password": "alice-pw"},
    ):
        r = c.post("/api/v1/auth/login", json=body)
        assert r.status_code == 401
        assert r.json()["detail"] == "invalid username or password"
    r = c.post("/api/v1/auth/login", json={"username": "alice", "password": "alice-pw"})
    assert r.status_code == 200
    assert set(r.json()["user"]) == {
        "id",
        "username",
        "admin",
        "active",
        "display_name",
        "modified_at",
        "remote",
        "agent_user_group",
        # Determined's names of the same fields, for its client (issue 33)
        "displayName",
        "modifiedAt",
        "agentUserGroup",
    }
    cookie = r.headers["set-cookie"]
    assert f"{COOKIE_NAME}=" in cookie and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower() and "Secure" not in cookie
    csrf = r.json()["csrf_token"]
    # the cookie alone authenticates reads (the WebUI and its event streams) ...
    assert c.get("/api/v1/me").json()["user"]["username"] == "alice"
    assert c.get("/api/v1/auth/csrf").json() == {"csrf_token": csrf}
    # ... but a change signed in by the cookie needs the session's CSRF token
    r = c.post("/api/v1/auth/logout")
    assert r.status_code == 403 and "X-CSRF-Token" in r.json()["detail"]
    forged = csrf[:-1] + ("1" if csrf.endswith("0") else "0")  # differs in its last character
    r = c.post("/api/v1/auth/logout", headers={"X-CSRF-Token": forged})
    assert r.status_code == 403
    r = c.post("/api/v1/auth/logout", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and 'dauntless_token=""' in r.headers["set-cookie"]
    assert c.get("/api/v1/me").status_code == 401
    r = c.get("/api/v1/me", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401 and "Bearer" in r.json()["detail"]


def test_users_admin_rules(world):
    w = world
    c = w.client
    r = c.post("/api/v1/users", headers=bearer(w.bob), json={"username": "eve", "admin": True})
    assert r.status_code == 403 and r.json()["detail"] == "only an admin may create users"
    r = c.post("/api/v1/users", headers=bearer(w.admin), json={"username": "alice"})
    assert r.status_code == 409
    r = c.post("/api/v1/users", headers=bearer(w.admin), json={"username": "bad name"})
    assert r.status_code == 400
    users = c.get("/api/v1/users", headers=bearer(w.bob)).json()["users"]
    assert [u["username"] for u in users] == ["admin", "determined", "alice", "bob"]
    assert all("password" not in str(u) for u in users)
    # a user sets its own display name, nothing else, and nobody else's
    r = c.patch(f"/api/v1/users/{w.bob_id}", headers=bearer(w.bob), json={"display_name": "B"})
    assert r.status_code == 200 and r.json()["user"]["display_name"] == "B"
    r = c.patch(f"/api/v1/users/{w.bob_id}", headers=bearer(w.bob), json={"admin": True})
    assert r.status_code == 403
    r = c.patch(f"/api/v1/users/{w.alice_id}", headers=bearer(w.bob), json={"display_name": "x"})
    assert r.status_code == 403
    # deactivation ends the user's tokens and logins
    r = c.patch(f"/api/v1/users/{w.bob_id}", headers=bearer(w.admin), json={"active": False})
    assert r.status_code == 200 and r.json()["user"]["active"] is False
    assert c.get("/api/v1/me", headers=bearer(w.bob)).status_code == 401
    r = c.post("/api/v1/auth/login", json={"username": "bob", "password": "bob-pw"})
    assert r.status_code == 403
    # the last active admin stays
    r = c.patch("/api/v1/users/1", headers=bearer(w.admin), json={"admin": False})
    assert r.status_code == 409
    r = c.patch(f"/api/v1/users/{w.alice_id}", headers=bearer(w.admin), json={"admin": True})
    assert r.status_code == 200 and r.json()["user"]["admin"] is True
    alice = login(c, "alice", "alice-pw")
    r = c.post("/api/v1/agents/a1/enable", headers=bearer(alice))
    assert r.status_code == 200


def test_failed_logins_are_slowed(world):
    w = world
    now = [1000.0]
    w.app.state.auth.throttle = LoginThrottle(clock=lambda: now[0])
    c = w.client

    def attempt(password: str) -> int:
        return c.post(
            "/api/v1/auth/login", json={"username": "alice", "password": password}
        ).status_code

    assert [attempt("x") for _ in range(3)] == [401, 401, 401]
    r = c.post("/api/v1/auth/login", json={"username": "alice", "password": "alice-pw"})
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert "too many failed logins" in r.json()["detail"]
    assert attempt("alice-pw") == 429  # even the right password waits
    assert (
        c.post(
            "/api/v1/auth/login",  # other users are not slowed
            json={"username": "bob", "password": "bob-pw"},
        ).status_code
        == 200
    )
    now[0] += 1.01
    assert attempt("x") == 401  # the 4th failure: the next wait doubles
    now[0] += 1.5
    assert attempt("alice-pw") == 429
    now[0] += 0.6
    assert attempt("alice-pw") == 200  # a success forgets the failures
    assert [attempt("x") for _ in range(3)] == [401, 401, 401]


def test_throttle_delays_grow_and_cap():
    now = [0.0]
    t = LoginThrottle(free=2, base=1.0, cap=8.0, clock=lambda: now[0], max_entries=2)
    for _ in range(2):
        t.failed("u")
    assert t.wait_seconds("u") == 1.0
    for expected in (2.0, 4.0, 8.0, 8.0):
        t.failed("u")
        assert t.wait_seconds("u") == expected
    t.failed("v")
    t.failed("w")  # the table keeps the 2 most recent names
    assert t.wait_seconds("u") == 0.0


def test_token_expiry_and_initial_password(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    config = MasterConfig.model_validate(
        {
            "data_dir": str(tmp_path),
            "security": {"initial_user_password": "s3cret-initial", "token": {"max_lifespan": 60}},
        }
    )
    assert "s3cret-initial" not in repr(config)
    assert "s3cret-initial" not in str(config.model_dump(mode="json"))
    app = create_app(config, run_loop=False)
    with TestClient(app) as c:
        r = c.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
        assert r.status_code == 401
        token = login(c, "determined", "s3cret-initial")
        admin = login(c, "admin", "s3cret-initial")
        assert c.get("/api/v1/me", headers=bearer(token)).status_code == 200
        auth = app.state.auth
        auth.clock = lambda: time.time() + 61
        r = c.get("/api/v1/me", headers=bearer(token))
        assert r.status_code == 401 and "expired" in r.json()["detail"]
        assert c.get("/api/v1/me", headers=bearer(admin)).status_code == 401
    assert "s3cret-initial" not in caplog.text
    assert (tmp_path / "cluster_secret").stat().st_mode & 0o077 == 0


def test_migration_gives_old_experiments_to_determined(tmp_path):
    from alembic import command
    from alembic.config import Config as AlembicConfig

    from dauntless.master.db.engine import MIGRATIONS_DIR

    url = f"sqlite:///{tmp_path}/m.db"
    db = Database(url)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = db.engine
    command.upgrade(cfg, "0002")
    with db.engine.begin() as conn:
        conn.execute(  # the columns of revision 0002 only (not the ORM's, which has more)
            text(
                "INSERT INTO experiments (name, state, archived, owner, config, "
                "original_config, seed, searcher_shutdown, progress, start_time) VALUES "
                "('old', 'COMPLETED', 0, 'determined', '{}', '', 0, 0, 0.0, 0.0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO trials (experiment_id, request_id, state, hparams, "
                "seed, restarts, run_id, total_batches, searcher_closed, "
                "start_time) VALUES (1, 'r', 'COMPLETED', '{}', 0, 0, 0, 0, 0, 0)"
            )
        )
    db.dispose()
    app = create_app(MasterConfig(data_dir=str(tmp_path), db_url=url), run_loop=False)
    with TestClient(app) as c:
        with app.state.ctx.db.read() as s:
            users = {u.username: u for u in s.scalars(select(UserRow))}
            exp = s.get(ExperimentRow, 1)
            assert (exp.owner, exp.owner_id) == ("determined", users["determined"].id)
            assert s.scalar(text("SELECT count(*) FROM trials")) == 1  # nothing cascaded
        assert users["admin"].admin and not users["determined"].admin
        assert all(u.password_hash for u in users.values())
        token = login(c, "determined", "")
        r = c.post("/api/v1/experiments/1/archive", headers=bearer(token))
        assert r.status_code == 200, r.text


def test_trial_and_agent_clients_send_their_credentials(monkeypatch, tmp_path):
    import httpx

    from dauntless.cli._local_cluster import _write_secrets
    from dauntless.core._session import Session

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    monkeypatch.setenv("DET_SESSION_TOKEN", "trial-token")
    with Session("http://m:1", transport=httpx.MockTransport(handler)) as s:
        s.post("/api/v1/trials/1/progress", {"progress": 0.1})
        with s.clone() as c:
            c.get("/api/v1/trials/1")
    assert [r.headers["authorization"] for r in seen] == ["Bearer trial-token"] * 2

    me = {"uid": 1000, "gid": 1000, "user": "me", "group": "me"}
    secret = _write_secrets(tmp_path, "pw", me, True, 0)
    import yaml

    for name in ("master.yaml", "cluster_secret"):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0
    written = yaml.safe_load((tmp_path / "master.yaml").read_text())
    assert written == {
        "security": {
            "cluster_secret": secret,
            "initial_user_password": "pw",
            # whoever deploys a local cluster is its admin: unlinked users' tasks run as it
            "default_task": me,
            "agents": {"allow_artificial_slots": True},
        },
        "task_proxy": {"port": 0},
    }
    assert (tmp_path / "cluster_secret").read_text().strip() == secret
    config = MasterConfig.model_validate({"data_dir": str(tmp_path), **written})
    assert config.security.cluster_secret.get_secret_value() == secret


def test_the_empty_password_is_verified_once_per_hash():
    """The WebUI's silent sign-in tries the empty password on every first visit: its
    answer is computed once per stored hash (argon2 costs a fraction of a second), and
    only the empty password's answer is remembered."""
    import time as _time

    from dauntless.master import auth_secrets

    empty, other = auth_secrets.hash_password(""), auth_secrets.hash_password("s3cret")
    assert auth_secrets.verify_password(empty, "") is True
    assert auth_secrets.verify_password(other, "") is False
    assert auth_secrets.verify_password(None, "") is False  # an unknown user
    started = _time.perf_counter()
    for _ in range(50):
        assert auth_secrets.verify_password(empty, "") is True
        assert auth_secrets.verify_password(other, "") is False
        assert auth_secrets.verify_password(None, "") is False
    assert _time.perf_counter() - started < 0.05  # remembered: no argon2 run
    assert auth_secrets.verify_password(other, "s3cret") is True  # others: verified
    assert auth_secrets.verify_password(empty, "x") is False
    assert {empty, other, None} <= set(auth_secrets._empty_verified)
    assert "s3cret" not in repr(auth_secrets._empty_verified)


def test_the_empty_password_is_hashed_once_per_process():
    """Every master started in one process gives its built-in users (empty password)
    the same hash, made once; any other password gets a fresh salt each time."""
    from dauntless.master import auth_secrets

    first, second = auth_secrets.hash_password(""), auth_secrets.hash_password("")
    assert first == second and first.startswith(auth_secrets.PREHASHED)
    assert auth_secrets.verify_password(first, "") is True
    assert auth_secrets.verify_password(first, "", is_hashed=True) is True
    assert auth_secrets.verify_password(first, "x") is False
    a, b = auth_secrets.hash_password("s3cret"), auth_secrets.hash_password("s3cret")
    assert a != b  # salted apart
    assert auth_secrets.verify_password(a, "s3cret") and auth_secrets.verify_password(b, "s3cret")


def test_remembered_user_tokens_follow_every_change_at_once(world):
    """A user's token, once read, is remembered (no SQL on its next requests); a change
    to the user or its tokens, or the token's expiry, counts at the very next request."""
    w = world
    c = w.client
    statements: list[str] = []
    event.listen(
        w.app.state.ctx.db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: statements.append(statement),
    )
    r = c.patch(f"/api/v1/users/{w.alice_id}", headers=bearer(w.admin), json={"admin": True})
    assert r.status_code == 200
    alice = login(c, "alice", "alice-pw")
    assert c.get("/prom/det-http-sd-config", headers=bearer(alice)).status_code == 200
    statements.clear()
    assert c.get("/prom/det-http-sd-config", headers=bearer(alice)).status_code == 200
    assert not any("user_sessions" in x for x in statements)  # remembered: not read again
    r = c.patch(f"/api/v1/users/{w.alice_id}", headers=bearer(w.admin), json={"admin": False})
    assert r.status_code == 200
    assert c.get("/prom/det-http-sd-config", headers=bearer(alice)).status_code == 403
    assert c.get("/api/v1/me", headers=bearer(alice)).status_code == 200
    auth = w.app.state.auth
    clock = auth.clock
    auth.clock = lambda: clock() + 10 * 365 * 86400.0  # past every token's expiry
    try:
        assert c.get("/api/v1/me", headers=bearer(alice)).status_code == 401
    finally:
        auth.clock = clock


def test_stale_trial_tokens_leave_the_memory_when_another_is_remembered(world, monkeypatch):
    """Issue 37 scope 2, through the route: storing a trial token drops those read long
    enough ago (an ended trial's token is not kept until the memory is full)."""
    from dauntless.master import auth_memory

    w = world
    remembered = w.app.state.auth._trial_tokens
    body = {"group": "training", "steps_completed": 4, "trial_run_id": 1, "metrics": {"loss": 0.5}}
    r = w.client.post(f"/api/v1/trials/{w.trial_id}/metrics", headers=bearer(w.trial), json=body)
    assert r.status_code == 200, r.text
    mine = hash_token(w.trial)
    assert mine in remembered
    # Read long ago (its last item is when it was read, by time.monotonic()).
    remembered[mine] = (*remembered[mine][:-1], time.monotonic() - 3600.0)
    monkeypatch.setattr(auth_memory, "TRIAL_TOKENS_KEPT_STALE", 1)
    other = w.other_trial_id
    r = w.client.post(f"/api/v1/trials/{other}/metrics", headers=bearer(w.other_trial), json=body)
    assert r.status_code == 200, r.text
    assert hash_token(w.other_trial) in remembered
    assert mine not in remembered


def _age_trial_token(remembered: dict, digest: str, seconds: float) -> None:
    """Make the remembered entry of ``digest`` look read ``seconds`` ago."""
    remembered[digest] = (*remembered[digest][:-1], time.monotonic() - seconds)


def test_trial_tokens_due_together_are_read_again_in_one_query(world):
    """Issue 37: trials started together come due for their token's reread together;
    the first request due reads them all again in one query, so the others' requests
    read nothing (32 trials made 32 reads in one tenth of a second every 5 s)."""
    from dauntless.master.auth import TRIAL_TOKEN_REREAD_SECONDS
    from dauntless.master.auth_memory import reread_trial_tokens

    w = world
    remembered = w.app.state.auth._trial_tokens
    body = {"group": "training", "steps_completed": 4, "trial_run_id": 1, "metrics": {"loss": 0.5}}
    for trial_id, token in ((w.trial_id, w.trial), (w.other_trial_id, w.other_trial)):
        r = w.client.post(f"/api/v1/trials/{trial_id}/metrics", headers=bearer(token), json=body)
        assert r.status_code == 200, r.text
    mine, other = hash_token(w.trial), hash_token(w.other_trial)
    for digest in (mine, other):  # both due
        _age_trial_token(remembered, digest, TRIAL_TOKEN_REREAD_SECONDS + 1.0)
    statements: list[str] = []
    event.listen(
        w.ctx.db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: statements.append(statement),
    )
    body["steps_completed"] = 5
    r = w.client.post(f"/api/v1/trials/{w.trial_id}/metrics", headers=bearer(w.trial), json=body)
    assert r.status_code == 200, r.text
    token_reads = [x for x in statements if "token_hash" in x]
    assert len(token_reads) == 1, token_reads  # one query, no user-session lookup
    assert "user_sessions" not in token_reads[0]
    assert remembered[other][-1] == remembered[mine][-1]  # renewed by the same read
    assert time.monotonic() - remembered[other][-1] < TRIAL_TOKEN_REREAD_SECONDS
    statements.clear()
    # A request of the other trial that found its entry due and waited for that reread
    # finds it renewed: it reads nothing either.
    auth = w.app.state.auth
    versions = w.ctx.allocation_versions
    assert reread_trial_tokens(w.ctx.db, remembered, versions, other, auth._reread_lock)
    assert not [x for x in statements if "token_hash" in x]
    r = w.client.post(
        f"/api/v1/trials/{w.other_trial_id}/metrics", headers=bearer(w.other_trial), json=body
    )
    assert r.status_code == 200, r.text
    assert not [x for x in statements if "token_hash" in x]


def test_trial_tokens_renewed_together_still_see_an_end_the_orm_did_not(world):
    """The reread of remembered trial tokens together keeps the guarantee of the reread
    alone: an allocation ended by a statement the ORM does not see voids its token at
    the reread, while the other trial's entry, read in the same query, is renewed."""
    from dauntless.master.auth import TRIAL_TOKEN_REREAD_SECONDS

    w = world
    remembered = w.app.state.auth._trial_tokens
    body = {"group": "training", "steps_completed": 4, "trial_run_id": 1, "metrics": {"loss": 0.5}}
    for trial_id, token in ((w.trial_id, w.trial), (w.other_trial_id, w.other_trial)):
        r = w.client.post(f"/api/v1/trials/{trial_id}/metrics", headers=bearer(token), json=body)
        assert r.status_code == 200, r.text
    mine, other = hash_token(w.trial), hash_token(w.other_trial)
    with w.ctx.db.engine.begin() as conn:  # not through a session: no version is bumped
        conn.execute(
            text("UPDATE allocations SET state = 'TERMINATED' WHERE token_hash = :h"), {"h": mine}
        )
    _age_trial_token(remembered, mine, TRIAL_TOKEN_REREAD_SECONDS + 1.0)
    _age_trial_token(remembered, other, TRIAL_TOKEN_REREAD_SECONDS * 0.75)
    before = remembered[other][-1]
    body["steps_completed"] = 5
    r = w.client.post(f"/api/v1/trials/{w.trial_id}/metrics", headers=bearer(w.trial), json=body)
    assert r.status_code == 401, r.text
    assert "has ended" in r.text
    assert mine not in remembered
    assert remembered[other][-1] > before  # renewed by the same read
    r = w.client.post(
        f"/api/v1/trials/{w.other_trial_id}/metrics", headers=bearer(w.other_trial), json=body
    )
    assert r.status_code == 200, r.text


def test_a_metrics_body_is_parsed_once_and_not_by_json_loads(world, monkeypatch):
    """Issue 37: a trial's metrics body was parsed twice on the event loop by
    ``json.loads`` (the body limits' check, then FastAPI); now orjson parses it once, in
    the body limits' middleware, and the route takes that value. The limits still hold
    on the same route (an integer past 64 bits: 400 naming the field)."""
    import json as stdlib_json

    w = world
    parsed: list[object] = []
    loads = stdlib_json.loads
    monkeypatch.setattr(stdlib_json, "loads", lambda s, *a, **k: parsed.append(s) or loads(s))
    reports = [
        {"group": "training", "steps_completed": b, "trial_run_id": 1, "metrics": {"m": b / 3}}
        for b in (7, 8)
    ]
    body = stdlib_json.dumps({"reports": reports}).encode()
    headers = {**bearer(w.trial), "Content-Type": "application/json"}
    url = f"/api/v1/trials/{w.trial_id}/metrics/batch"
    r = w.client.post(url, content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"stored": [True, True]}
    assert body not in parsed  # neither the middleware nor FastAPI ran json.loads on it
    r = w.client.get(f"/api/v1/trials/{w.trial_id}/metrics", headers=bearer(w.admin))
    assert r.status_code == 200, r.text
    stored = {m["total_batches"]: m["values"]["m"] for m in r.json()["metrics"]}
    assert stored == {7: 7 / 3, 8: 8 / 3}  # the values parsed are json.loads's
    big = body.replace(b"7 / 3", b"0").replace(
        b'"trial_run_id": 1', b'"trial_run_id": 1' + b"0" * 30
    )
    r = w.client.post(url, content=big, headers=headers)
    assert r.status_code == 400 and "trial_run_id" in r.json()["errors"][0]["field"], r.text
