"""Every route of the OpenAPI spec, called as each of Determined's roles under
``security.authz.type: rbac`` (issue 30 scope 2), on SQLite and PostgreSQL.

One in-process master per database holds two workspaces, A and B, each with a project,
an experiment (a trial, a checkpoint), a command, and a pool bound to it; every object
is the admin's, so owners' rights never blur what roles grant. One user holds each role
of :data:`dauntless.master.rbac.ROLES` (workspace roles on A, global-only ones on the
cluster), one holds Viewer on A through a group, one holds nothing.

For each route and user the expectation is worked out here from the route's row of the
permission table and the role's permissions, independently of the master's check:
allowed -> not 403 (and not 401), forbidden -> 403; routes that name an object are also
called with B's objects (forbidden to every workspace role). Without a credential every
route but the open ones answers 401. The lists (experiments, workspaces, projects,
models, tasks, the job queue, allocations, bindings, search by name, the SSE streams), the logs
and the task proxy show each user only what they may see, counts included.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from argon2 import PasswordHasher
from databases import fresh_postgres_database, postgres_available
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import auth_secrets, loop
from dauntless.master.app import create_app
from dauntless.master.db import CheckpointRow
from dauntless.master.permissions import ROUTES, Rule
from dauntless.master.rbac import GLOBAL_ONLY, ROLES, Perm
from dauntless.master.testing import agent_headers, bearer, login, model_def_tarball

CONFIG = {
    "name": "roles",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}

# user -> (role id, where: "A" or None for the cluster); "via_group" holds Viewer on A
# through a group, "nobody" holds nothing.
ROLE_USERS: dict[str, tuple[int | None, str | None]] = {
    "r1": (1, None),
    "r2": (2, "A"),
    "r3": (3, None),
    "r4": (4, "A"),
    "r5": (5, "A"),
    "r6": (6, "A"),
    "r7": (7, "A"),
    "r8": (8, "A"),
    "r9": (9, "A"),
    "r10": (10, None),
    "via_group": (4, "A"),
    "nobody": (None, None),
}
VIEW_EXP = Perm.VIEW_EXPERIMENT_METADATA


class World:
    """The master, its objects and its users' tokens."""

    def __init__(self, client: TestClient, app: Any) -> None:
        self.client, self.app, self.ctx = client, app, app.state.ctx
        self.admin = login(client)
        admin = bearer(self.admin)

        def post(path: str, body: Any = None, **kw: Any) -> dict:
            r = client.post(path, headers=admin, json=body, **kw)
            assert r.status_code in (200, 201), (path, r.text)
            return r.json()

        self.ws = {n: post("/api/v1/workspaces", {"name": n})["workspace"]["id"] for n in "AB"}
        self.proj = {
            n: post(f"/api/v1/workspaces/{self.ws[n]}/projects", {"name": f"p{n}"})["project"]["id"]
            for n in "AB"
        }
        self.proj2 = post(f"/api/v1/workspaces/{self.ws['A']}/projects", {"name": "p2"})["project"][
            "id"
        ]
        self.exp = {}
        for n in "AB":
            r = client.post(
                "/api/v1/experiments",
                headers=admin,
                data={"config": yaml.safe_dump(CONFIG), "project_id": str(self.proj[n])},
                files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
            )
            assert r.status_code == 201, r.text
            self.exp[n] = r.json()["experiment"]["id"]
        self.trial = {
            n: client.get(f"/api/v1/experiments/{self.exp[n]}", headers=admin).json()["trials"][0][
                "id"
            ]
            for n in "AB"
        }
        self.uuid = {n: str(uuid.uuid4()) for n in "AB"}
        with self.ctx.db.write() as s:
            for n in "AB":
                s.add(
                    CheckpointRow(
                        uuid=self.uuid[n],
                        trial_id=self.trial[n],
                        experiment_id=self.exp[n],
                        total_batches=1,
                        state="COMPLETED",
                        resources={},
                        meta={},
                        report_time=0.0,
                    )
                )
        # A model in each workspace with one version (its checkpoint).
        for n in "AB":
            post("/api/v1/models", {"name": f"m{n}", "workspace_id": self.ws[n]})
            post(f"/api/v1/models/m{n}/versions", {"checkpoint_uuid": self.uuid[n]})
        self.task = {}
        for n in "AB":
            form = {"entrypoint": '"true"', "workspace_id": str(self.ws[n])}
            form["config"] = "resources: {slots: 0}"
            self.task[n] = post("/api/v1/commands", data=form)["task"]["id"]
        # Config templates and webhooks, one of each per workspace (issue 31).
        for n in "AB":
            post(f"/api/v1/templates/t{n}", {"config": {"name": n}, "workspace_id": self.ws[n]})
        self.hook = {n: self.new_hook(n) for n in "AB"}
        self.spares = 0
        # Running trials: allocations for the cluster stream and the allocation list.
        r = client.post(
            "/api/v1/agents",
            headers=agent_headers(app),
            json={"id": "a1", "slots": [{"id": "c0", "type": "cpu"}, {"id": "c1", "type": "cpu"}]},
        )
        assert r.status_code == 200, r.text
        loop.schedule_pass(self.ctx)
        for n, pool in (("A", "pa"), ("B", "pb")):
            post(
                f"/api/v1/resource-pools/{pool}/workspace-bindings", {"workspace_ids": [self.ws[n]]}
            )
        # Users, their roles, the group.
        self.ids: dict[str, int] = {}
        for name in [*ROLE_USERS, "victim"]:
            r = client.post(
                "/api/v1/users", headers=admin, json={"username": name, "password": "pw"}
            )
            assert r.status_code == 201, r.text
            self.ids[name] = r.json()["user"]["id"]
        self.group = post("/api/v1/groups", {"name": "g", "add_users": [self.ids["via_group"]]})[
            "group"
        ]["group_id"]
        self.group2 = post("/api/v1/groups", {"name": "g2"})["group"]["group_id"]
        users, groups = [], []
        for name, (role, where) in ROLE_USERS.items():
            if role is None:
                continue
            a: dict[str, Any] = {"role": {"role_id": role}}
            if where:
                a["scope_workspace_id"] = self.ws[where]
            if name == "via_group":
                groups.append({"group_id": self.group, "role_assignment": a})
            else:
                users.append({"user_id": self.ids[name], "role_assignment": a})
        post(
            "/api/v1/roles/add-assignments",
            {"user_role_assignments": users, "group_role_assignments": groups},
        )
        self.tokens = {name: login(client, name, "pw") for name in ROLE_USERS}

    def workspace_of(self, target: str) -> int:
        return self.ws[target]

    def new_hook(self, target: str) -> int:
        """A webhook of ``target``'s workspace (to a closed port), made by the admin."""
        r = self.client.post(
            "/api/v1/webhooks",
            headers=bearer(self.admin),
            json=hook_body(self.ws[target]),
        )
        assert r.status_code == 200, r.text
        return int(r.json()["webhook"]["id"])

    def spare_template(self, target: str) -> str:
        """A template of ``target``'s workspace for one DELETE call to remove."""
        self.spares += 1
        name = f"spare{self.spares}{target}"
        r = self.client.post(
            f"/api/v1/templates/{name}",
            headers=bearer(self.admin),
            json={"config": {}, "workspace_id": self.ws[target]},
        )
        assert r.status_code == 200, r.text
        return name


def hook_body(workspace_id: int) -> dict[str, Any]:
    """A webhook of ``workspace_id`` posting to a closed port of 127.0.0.1."""
    return {
        "name": "h",
        "url": "http://127.0.0.1:9/hook",
        "workspace_id": workspace_id,
        "triggers": [
            {
                "trigger_type": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                "condition": {"state": "COMPLETED"},
            }
        ],
    }


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    if request.param == "postgres" and not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, db test)")
    fast = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    saved, auth_secrets._hasher = auth_secrets._hasher, fast
    tmp: Path = tmp_path_factory.mktemp(f"roles-{request.param}")
    try:
        with fresh_postgres_database() if request.param == "postgres" else _sqlite(tmp) as url:
            config = MasterConfig(
                data_dir=str(tmp),
                port=18080,
                db_url=url,
                resource_pools=[{"pool_name": p} for p in ("default", "pa", "pb")],
                security={"authz": {"type": "rbac"}},
            )
            app = create_app(config, run_loop=False)
            with TestClient(app) as client:
                yield World(client, app)
    finally:
        auth_secrets._hasher = saved


class _sqlite:  # noqa: N801 - a context manager yielding a URL, as fresh_postgres_database
    def __init__(self, tmp: Path) -> None:
        self.url = f"sqlite:///{tmp}/dauntless.db"

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------- expectations


def holds(user: str, perm: Perm, workspace: str | None) -> bool:
    """Whether ``user``'s role grants ``perm`` on workspace ``workspace`` (None: on the
    cluster), from the role table alone."""
    role_id, where = ROLE_USERS[user]
    if role_id is None or perm not in ROLES[role_id].permissions:
        return False
    if where is None:
        return True
    return workspace == where and perm not in GLOBAL_ONLY


def expected(user: str, rule: Rule, method: str, path: str, target: str) -> bool:
    """Whether ``user`` may call the route with the objects of workspace ``target``."""
    if rule.open or rule.on in ("any", "list"):
        return True
    if rule.on == "admin":
        return ROLE_USERS[user][0] == 1
    if rule.on in ("cluster", "self"):  # "self" routes are called with another user's id
        return holds(user, rule.perm_for("pause"), None)  # type: ignore[arg-type]
    perm = rule.perm_for("pause")
    assert perm is not None
    needs = [(perm, target)]
    body_needs = {
        ("POST", "/api/v1/experiments"): [(Perm.CREATE_EXPERIMENT, target)],
        ("POST", "/api/v1/tensorboards"): [
            (Perm.CREATE_NSC, target),
            (Perm.VIEW_EXPERIMENT_ARTIFACTS, target),
        ],
        # The model registry: the objects are the admin's, so deleting them needs the
        # rights on other users' models too; registering needs the checkpoint's artifacts.
        ("POST", "/api/v1/models"): [(Perm.CREATE_MODEL_REGISTRY, target)],
        ("POST", "/api/v1/models/{model_name}/versions"): [
            (Perm.EDIT_MODEL_REGISTRY, target),
            (Perm.VIEW_EXPERIMENT_ARTIFACTS, target),
        ],
        ("DELETE", "/api/v1/models/{model_name}"): [
            (Perm.DELETE_MODEL_REGISTRY, target),
            (Perm.DELETE_OTHER_USER_MODEL_REGISTRY, target),
        ],
        ("DELETE", "/api/v1/models/{model_name}/versions/{model_version_num}"): [
            (Perm.DELETE_MODEL_VERSION, target),
            (Perm.DELETE_OTHER_USER_MODEL_VERSION, target),
        ],
    }
    if (method, path) in body_needs:
        needs = body_needs[(method, path)]
    if method == "GET" and path.startswith("/api/v1/checkpoints/{uuid}"):
        # The world's checkpoints are registered: their model's viewers may read them.
        if holds(user, Perm.VIEW_MODEL_REGISTRY, target):
            return True
    if rule.body_perm is not None:
        needs.append((rule.body_perm, target))  # destinations are in the same workspace
    return all(holds(user, p, w) for p, w in needs)


def url_and_body(w: World, method: str, path: str, target: str) -> tuple[str, Any, Any]:
    """The URL, JSON body and multipart form of a call with ``target``'s objects."""
    url = path.format(
        exp_id=w.exp[target],
        trial_id=w.trial[target],
        uuid=w.uuid[target],
        task_id=w.task[target],
        job_id=f"experiment-{w.exp[target]}",
        workspace_id=w.ws[target],
        project_id=w.proj[target],
        group_id=w.group2,
        user_id=w.ids["victim"],
        pool_name="pa" if target == "A" else "pb",
        agent_id="a1",
        slot_id="c0",
        action="pause" if "/slots/" not in path else "enable",
        allocation_id="none",
        label="v1",
        token_id="999999",  # none: tokens are per user (tests/unit/master/test_access_tokens.py)
        model_name=f"m{target}",
        model_version_num=1,
        template_name=f"t{target}",
        webhook_id=w.hook[target],
    )
    if path == "/api/v1/trials/metrics/trial_metrics":  # Determined's, checked per trial
        url += f"?trialIds={w.trial[target]}&group=training"
    if (method, path) == ("DELETE", "/api/v1/templates/{template_name}"):
        url = f"/api/v1/templates/{w.spare_template(target)}"
    if (method, path) == ("DELETE", "/api/v1/webhooks/{webhook_id}"):
        url = f"/api/v1/webhooks/{w.new_hook(target)}"
    ws, proj = w.ws[target], w.proj[target]
    assignment = {"role": {"role_id": 4}, "scope_workspace_id": ws}
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/api/v1/auth/login"): {"username": "victim", "password": "pw"},
        ("POST", "/api/v1/users"): {"username": "carol"},
        ("PATCH", "/api/v1/users/{user_id}"): {"display_name": "V"},
        ("POST", "/api/v1/users/{user_id}/password"): {"password": "pw"},
        ("PATCH", "/api/v1/users/assignments"): {
            "user_ids": [w.ids["victim"]],
            "add_groups": [w.group2],
        },
        ("POST", "/api/v1/preview-hp-search"): {"config": yaml.safe_dump(CONFIG)},
        ("PATCH", "/api/v1/experiments/{exp_id}"): {"description": "d"},
        ("POST", "/api/v1/experiments/continue"): {"id": w.exp[target]},
        ("POST", "/api/v1/experiments/{exp_id}/move"): {
            "destination_project_id": w.proj2 if target == "A" else proj
        },
        ("POST", "/api/v1/projects/{project_id}/experiments/move"): {
            "experiment_ids": [w.exp[target]],
            "destination_project_id": w.proj2 if target == "A" else proj,
        },
        ("PATCH", "/api/v1/jobs/{job_id}"): {"priority": 5},
        ("POST", "/api/v1/workspaces"): {"name": f"new-{target}"},
        ("PATCH", "/api/v1/workspaces/{workspace_id}"): {"name": target},
        ("POST", "/api/v1/workspaces/{workspace_id}/projects"): {"name": "q"},
        ("PATCH", "/api/v1/projects/{project_id}"): {"description": "d"},
        ("POST", "/api/v1/projects/{project_id}/move"): {"destination_workspace_id": ws},
        ("POST", "/api/v1/projects/{project_id}/notes"): {"note": {"name": "n", "contents": "c"}},
        ("PUT", "/api/v1/projects/{project_id}/notes"): {"notes": []},
        ("POST", "/api/v1/roles/search/by-ids"): {"role_ids": [1]},
        ("POST", "/api/v1/roles/add-assignments"): {
            "user_role_assignments": [{"user_id": w.ids["victim"], "role_assignment": assignment}]
        },
        ("POST", "/api/v1/roles/remove-assignments"): {
            "user_role_assignments": [{"user_id": w.ids["victim"], "role_assignment": assignment}]
        },
        ("POST", "/api/v1/groups"): {"name": f"g-{target}"},
        ("PUT", "/api/v1/groups/{group_id}"): {"name": "g2"},
        ("POST", "/api/v1/agents/{agent_id}/heartbeat"): {"running": []},
        ("POST", "/api/v1/models"): {"name": f"new-{target}", "workspace_id": ws},
        ("PATCH", "/api/v1/models/{model_name}"): {"model": {"description": "d"}},
        ("POST", "/api/v1/models/{model_name}/move"): {"destination_workspace_id": ws},
        ("POST", "/api/v1/models/{model_name}/versions"): {"checkpoint_uuid": w.uuid[target]},
        ("PATCH", "/api/v1/models/{model_name}/versions/{model_version_num}"): {
            "model_version": {"comment": "c"}
        },
        ("POST", "/api/v1/templates/{template_name}"): {"config": {}, "workspace_id": ws},
        ("PUT", "/api/v1/templates/{template_name}"): {"config": {"a": 1}, "workspace_id": ws},
        ("PATCH", "/api/v1/templates/{template_name}"): {"config": {"a": 2}},
        ("PATCH", "/api/v1/template/rename"): {
            "old_name": f"t{target}",
            "new_name": f"t{target}",
        },
        ("POST", "/api/v1/webhooks"): hook_body(ws),
        ("PATCH", "/api/v1/webhooks/{webhook_id}"): {"url": "http://127.0.0.1:9/other"},
        ("POST", "/api/v1/webhooks/custom"): {
            "data": {"title": "t"},
            "experiment_id": w.exp[target],
            "trial_id": w.trial[target],
        },
    }
    body = bodies.get((method, path))
    if body is None and path.endswith("/workspace-bindings") and method != "GET":
        body = {"workspace_ids": [ws]}
    form = None
    if (method, path) == ("POST", "/api/v1/experiments"):
        form = {"config": yaml.safe_dump(CONFIG), "project_id": str(proj), "activate": "false"}
    elif method == "POST" and path.split("/")[-1] in (
        "commands",
        "notebooks",
        "shells",
        "tensorboards",
    ):
        form = {"workspace_id": str(ws), "config": "resources: {slots: 0}", "entrypoint": '"true"'}
        if path.endswith("tensorboards"):
            form = {"workspace_id": str(ws), "experiment_ids": json.dumps([w.exp[target]])}
    if body is None and form is None and method != "GET":
        body = {}
    return url, body, form


def call(w: World, method: str, url: str, token: str | None, body: Any, form: Any):
    w.client.cookies.clear()
    headers = bearer(token) if token else None
    params = {"max_seconds": 0.05} if "/stream/" in url else None
    if form is not None:
        return w.client.request(method, url, headers=headers, data=form, params=params)
    return w.client.request(method, url, headers=headers, json=body, params=params)


def _spec_routes(app: Any) -> list[tuple[str, str]]:
    out = [(m.upper(), p) for p, item in app.openapi()["paths"].items() for m in item]
    # Destructive calls last; an experiment's or a model's own deletion after its parts'.
    last = {("DELETE", "/api/v1/experiments/{exp_id}"), ("DELETE", "/api/v1/models/{model_name}")}
    return sorted(out, key=lambda mp: (mp[0] == "DELETE", mp in last, mp))


# ---------------------------------------------------------------------- lists first (the walk changes the world)


def _visible(user: str, perm: Perm) -> set[str]:
    return {n for n in "AB" if holds(user, perm, n)}


def test_lists_show_only_what_each_role_may_see(world: World) -> None:
    w = world
    exp_ws = {w.exp[n]: n for n in "AB"}
    for user, token in w.tokens.items():
        h = bearer(token)
        see_exp = _visible(user, VIEW_EXP)
        page = w.client.get("/api/v1/experiments", headers=h, params={"archived": "all"}).json()
        names = {exp_ws.get(e["id"], "new") for e in page["experiments"]}
        assert names - {"new"} <= see_exp, (user, page)
        assert page["total"] == len(page["experiments"]), user
        if not see_exp and ROLE_USERS[user][1] is not None or user == "nobody":
            assert page["total"] == 0, user
        with w.client.stream(
            "GET",
            "/api/v1/stream/experiments",
            headers=h,
            params={"max_seconds": 0.05, "archived": "all"},
        ) as r:
            text = "".join(r.iter_text())
        data = json.loads(text.split("data: ", 1)[1].split("\n", 1)[0])
        assert data["total"] == page["total"], user

        see_ws = _visible(user, Perm.VIEW_WORKSPACE)
        got = {x["id"] for x in w.client.get("/api/v1/workspaces", headers=h).json()["workspaces"]}
        assert {w.ws[n] for n in "AB"} & got == {w.ws[n] for n in see_ws}, user
        found = w.client.get("/api/v1/workspaces", headers=h, params={"name": "B"}).json()
        assert (found["pagination"]["total"] == 1) == ("B" in see_ws), user
        bound = w.client.get("/api/v1/resource-pools/pb/workspace-bindings", headers=h).json()
        assert (bound["workspace_ids"] == [w.ws["B"]]) == ("B" in see_ws), user

        see_models = _visible(user, Perm.VIEW_MODEL_REGISTRY)
        page = w.client.get("/api/v1/models", headers=h).json()
        assert {m["name"] for m in page["models"]} == {f"m{n}" for n in see_models}, user
        assert page["pagination"]["total"] == len(see_models), user

        see_nsc = _visible(user, Perm.VIEW_NSC)
        for path in ("/api/v1/tasks", "/api/v1/commands"):
            tasks = {t["id"] for t in w.client.get(path, headers=h).json()["tasks"]}
            assert {w.task[n] for n in "AB"} & tasks == {w.task[n] for n in see_nsc}, (user, path)
        jobs = w.client.get("/api/v1/job-queues", headers=h).json()["jobs"]
        assert {j["workspace_id"] for j in jobs} <= {w.ws[n] for n in see_exp | see_nsc}, user
        with w.client.stream(
            "GET", "/api/v1/stream/cluster", headers=h, params={"max_seconds": 0.05}
        ) as r:
            text = "".join(r.iter_text())
        cluster = json.loads(text.split("data: ", 1)[1].split("\n", 1)[0])
        shown = {a["experiment_id"] for a in cluster["allocations"] if a["experiment_id"]}
        assert shown == {w.exp[n] for n in see_exp}, (user, shown)

        if user == "r5":  # a TensorBoard over B's trial: B's event files
            form = {"workspace_id": str(w.ws["A"]), "trial_ids": json.dumps([w.trial["B"]])}
            r = w.client.post("/api/v1/tensorboards", headers=h, data=form)
            assert r.status_code == 403, r.text
        for n in "AB":  # logs and the proxy
            r = w.client.get(f"/api/v1/trials/{w.trial[n]}/logs", headers=h)
            assert (r.status_code == 200) == holds(user, Perm.VIEW_EXPERIMENT_ARTIFACTS, n), user
            r = w.client.get(f"/api/v1/tasks/{w.task[n]}/logs", headers=h)
            assert (r.status_code == 200) == (n in see_nsc), user
            w.client.cookies.clear()
            r = w.client.get(f"/proxy/{w.task[n]}/", headers=h)
            may = holds(user, Perm.UPDATE_NSC, n)
            assert (r.status_code == 403) != may, (user, n, r.status_code, r.text)


# ---------------------------------------------------------------------- the walk


def test_every_route_as_every_role(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    w = world
    routes = _spec_routes(w.app)
    assert len(routes) >= 110
    checked = calls = 0
    for method, path in routes:  # no credential: 401 unless open
        rule = ROUTES[(method, path)]
        url, body, form = url_and_body(w, method, path, "A")
        r = call(w, method, url, None, body, form)
        calls += 1
        if rule.open:
            assert r.status_code not in (401, 403), (method, path, r.text)
        else:
            assert r.status_code == 401, (method, path, r.status_code, r.text)

    for method, path in routes:
        rule = ROUTES[(method, path)]
        if rule.open:
            continue
        checked += 1
        targets = ["A", "B"] if rule.on == "path" or rule.on == "body" else ["A"]
        plan = [(user, "A", expected(user, rule, method, path, "A")) for user in ROLE_USERS]
        # B's objects tell apart only users whose role on workspace A allows the call.
        plan += [
            (user, "B", expected(user, rule, method, path, "B"))
            for user, _target, allowed in list(plan)
            if "B" in targets and allowed and ROLE_USERS[user][1] == "A"
        ]
        # Forbidden first (they change nothing), then the allowed calls.
        for user, target, allowed in sorted(plan, key=lambda p: p[2]):
            if allowed and rule.on == "admin":
                continue  # agents' and trials' own routes: tests/unit/master/test_auth.py
            if allowed and "logout" in path:
                continue  # would end the session the other routes use
            url, body, form = url_and_body(w, method, path, target)
            r = call(w, method, url, w.tokens[user], body, form)
            calls += 1
            where = (method, path, user, target, r.status_code, r.text[:300])
            assert r.status_code != 401, where
            if allowed:
                assert r.status_code != 403, where
                assert r.status_code != 500, where
            else:
                assert r.status_code == 403, where
                assert r.json()["detail"], where
    with capsys.disabled():
        print(
            f"\nroute x role: {checked} routes (of {len(routes)} in the OpenAPI spec) checked "
            f"as {len(ROLE_USERS)} users, {calls} calls"
        )
