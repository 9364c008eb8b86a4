"""Workspaces and projects (issue 30 scope 1): Determined's rules on one in-process master
per test (SQLite and PostgreSQL): the immutable Uncategorized pair, create / rename /
archive / pin / delete refused while non-empty, projects and their moves, the config's
``workspace``/``project`` and ``project_id``, workspace defaults (checkpoint storage,
pools) and pools bound to workspaces."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

CONFIG = {
    "name": "ws-test",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _create(client: TestClient, config: dict | None = None, **form: str):
    return client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config or CONFIG), "activate": "false", **form},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )


@pytest.fixture()
def pools_master(tmp_path: Path, db_url: str):
    """A master with pools ``default``, ``gpu`` and ``aux``, signed in as the admin."""
    config = MasterConfig(
        data_dir=str(tmp_path),
        port=18080,
        db_url=db_url,
        resource_pools=[{"pool_name": n} for n in ("default", "gpu", "aux")],
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


def test_workspace_and_project_lifecycle(pools_master):
    client, _ctx = pools_master
    # The immutable Uncategorized pair.
    ws1 = client.get("/api/v1/workspaces/1").json()["workspace"]
    assert (ws1["name"], ws1["immutable"]) == ("Uncategorized", True)
    p1 = client.get("/api/v1/projects/1").json()["project"]
    assert (p1["name"], p1["immutable"], p1["workspace_name"]) == (
        "Uncategorized",
        True,
        "Uncategorized",
    )
    for verb in ("archive", "unarchive"):
        assert client.post(f"/api/v1/workspaces/1/{verb}").status_code == 409
    assert client.delete("/api/v1/workspaces/1").status_code == 409
    assert client.patch("/api/v1/workspaces/1", json={"name": "x"}).status_code == 409
    assert client.post("/api/v1/projects/1/archive").status_code == 409
    assert client.post("/api/v1/workspaces/1/projects", json={"name": "p"}).status_code == 409

    # Names: 1-80 characters, unique case-insensitively.
    r = client.post("/api/v1/workspaces", json={"name": "Team A"})
    assert r.status_code == 201, r.text
    ws = r.json()["workspace"]
    assert (ws["username"], ws["num_projects"], ws["pinned"]) == ("admin", 0, False)
    r = client.post("/api/v1/workspaces", json={"name": "team a"})
    assert r.status_code == 409 and "case-insensitive" in r.json()["detail"]
    for bad in ("", "   ", "x" * 81):
        r = client.post("/api/v1/workspaces", json={"name": bad})
        assert r.status_code == 400 and r.json()["errors"][0]["field"] == "name", bad
    r = client.patch(f"/api/v1/workspaces/{ws['id']}", json={"workspace": {"name": "Team B"}})
    assert r.status_code == 200 and r.json()["workspace"]["name"] == "Team B"

    # Projects: keys, names unique per workspace, notes, archive.
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "vision"})
    assert r.status_code == 201, r.text
    proj = r.json()["project"]
    assert proj["key"].startswith("VIS") and len(proj["key"]) == 5
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "Vision"})
    assert r.status_code == 409 and "already in use" in r.json()["detail"]
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "nlp", "key": "nl1"})
    assert r.json()["project"]["key"] == "NL1"
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "n2", "key": "nl1"})
    assert r.status_code == 409 and "project key NL1 is already in use" in r.json()["detail"]
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "n3", "key": "a-b"})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "key"
    pid = proj["id"]
    r = client.post(f"/api/v1/projects/{pid}/notes", json={"note": {"name": "a", "contents": "b"}})
    assert r.json()["notes"] == [{"name": "a", "contents": "b"}]
    r = client.put(f"/api/v1/projects/{pid}/notes", json={"notes": []})
    assert r.json()["notes"] == []
    r = client.patch(f"/api/v1/projects/{pid}", json={"description": "cats"})
    assert r.json()["project"]["description"] == "cats"
    listed = client.get(f"/api/v1/workspaces/{ws['id']}/projects", params={"limit": 1})
    body = listed.json()
    assert len(body["projects"]) == 1 and body["pagination"]["total"] == 2

    # Experiments: the config's names, --project_id, moves, archived projects.
    r = _create(client, {**CONFIG, "workspace": "Team B", "project": "vision"})
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    assert r.json()["experiment"]["project_id"] == pid
    r = _create(client, {**CONFIG, "project": "vision"})
    assert r.status_code == 400 and "must both be included" in r.json()["detail"]
    r = _create(client, {**CONFIG, "workspace": "Team B", "project": "nope"})
    assert r.status_code == 404
    assert "workspace 'Team B' or project 'nope' not found" in r.json()["detail"]
    r = _create(client, {**CONFIG, "workspace": "x", "project": "y"}, project_id=str(pid))
    assert r.status_code == 201 and r.json()["experiment"]["project_id"] == pid  # id wins
    page = client.get("/api/v1/experiments", params={"project_id": pid}).json()
    assert page["total"] == 2
    page = client.get("/api/v1/experiments", params={"workspace_id": 1}).json()
    assert page["total"] == 0
    r = client.post(f"/api/v1/experiments/{exp_id}/move", json={"destination_project_id": 1})
    assert r.status_code == 200, r.text
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["project_id"] == 1
    assert client.post(f"/api/v1/projects/{pid}/archive").status_code == 200
    r = client.post(f"/api/v1/experiments/{exp_id}/move", json={"destination_project_id": pid})
    assert r.status_code == 409 and "archived" in r.json()["detail"]
    r = _create(client, project_id=str(pid))
    assert r.status_code == 409 and "project is archived" in r.json()["detail"]
    assert client.post(f"/api/v1/projects/{pid}/unarchive").status_code == 200

    # Delete is refused while anything is left in it.
    r = client.delete(f"/api/v1/projects/{pid}")
    assert r.status_code == 409 and "move or delete them first" in r.json()["detail"]
    r = client.delete(f"/api/v1/workspaces/{ws['id']}")
    assert r.status_code == 409 and "experiment(s)" in r.json()["detail"]
    moved = client.post(
        f"/api/v1/projects/{pid}/experiments/move",
        json={"experiment_ids": [exp_id + 1], "destination_project_id": 1},
    )
    assert moved.status_code == 200 and moved.json()["results"] == [{"id": exp_id + 1, "error": ""}]

    # Pins are the caller's; the list filters and pages.
    assert client.post(f"/api/v1/workspaces/{ws['id']}/pin").status_code == 200
    pinned = client.get("/api/v1/workspaces", params={"pinned": "true"}).json()
    assert [w["id"] for w in pinned["workspaces"]] == [ws["id"]]
    assert pinned["workspaces"][0]["pinned_at"] is not None
    assert client.post(f"/api/v1/workspaces/{ws['id']}/unpin").status_code == 200
    assert client.get("/api/v1/workspaces", params={"pinned": "true"}).json()["workspaces"] == []
    named = client.get("/api/v1/workspaces", params={"name": "team b"}).json()
    assert [w["id"] for w in named["workspaces"]] == [ws["id"]]

    # Archived workspace: no new projects or experiments.
    assert client.post(f"/api/v1/workspaces/{ws['id']}/archive").status_code == 200
    r = client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "late"})
    assert r.status_code == 409 and "is archived and cannot add new projects" in r.json()["detail"]
    r = _create(client, project_id=str(pid))
    assert r.status_code == 409 and "workspace is archived" in r.json()["detail"]
    assert client.post(f"/api/v1/workspaces/{ws['id']}/unarchive").status_code == 200

    # Empty now: projects go with it.
    assert client.delete(f"/api/v1/workspaces/{ws['id']}").json() == {"completed": True}
    assert client.get(f"/api/v1/projects/{pid}").status_code == 404


def test_config_workspace_and_project_place_the_experiment(pools_master):
    """The config's ``workspace``/``project`` (and the workspace's defaults) are acted on:
    the experiment lands there, takes the workspace's checkpoint storage under its own
    and its default pool, and a pool bound to another workspace is refused by name."""
    client, ctx = pools_master
    storage = {"type": "shared_fs", "host_path": str(Path(ctx.config.data_dir) / "ws-ckpt")}
    r = client.post(
        "/api/v1/workspaces",
        json={
            "name": "A",
            "checkpoint_storage_config": storage,
            "default_compute_pool": "gpu",
            "default_aux_pool": "aux",
        },
    )
    assert r.status_code == 201, r.text
    a = r.json()["workspace"]
    b = client.post("/api/v1/workspaces", json={"name": "B"}).json()["workspace"]
    for w in (a, b):
        r = client.post(f"/api/v1/workspaces/{w['id']}/projects", json={"name": "p"})
        assert r.status_code == 201
    exp = _create(client, {**CONFIG, "workspace": "A", "project": "p"}).json()["experiment"]
    config = client.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]["config"]
    assert config["checkpoint_storage"]["host_path"] == storage["host_path"]
    assert config["resources"]["resource_pool"] == "gpu"
    # The experiment's own storage wins; a type-less one takes the workspace's fields.
    own = {**CONFIG, "workspace": "A", "project": "p"}
    own["checkpoint_storage"] = {"save_trial_best": 3}
    exp2 = _create(client, own).json()["experiment"]
    cs = client.get(f"/api/v1/experiments/{exp2['id']}").json()["experiment"]["config"]
    assert cs["checkpoint_storage"]["host_path"] == storage["host_path"]
    assert cs["checkpoint_storage"]["save_trial_best"] == 3
    # Default pools must be available to the workspace.
    r = client.patch(f"/api/v1/workspaces/{b['id']}", json={"default_compute_resource_pool": "x"})
    assert r.status_code == 400 and "not available to the workspace" in r.json()["detail"]
    # Bind gpu to A: B may not use it (named), the default pool cannot be bound.
    r = client.post(
        "/api/v1/resource-pools/gpu/workspace-bindings", json={"workspace_names": ["A"]}
    )
    assert r.status_code == 200, r.text
    r = client.post(
        "/api/v1/resource-pools/default/workspace-bindings", json={"workspace_ids": [1]}
    )
    assert r.status_code == 400 and "default pool" in r.json()["detail"]
    bad = {**CONFIG, "workspace": "B", "project": "p", "resources": {"resource_pool": "gpu"}}
    r = _create(client, bad)
    assert r.status_code == 400, r.text
    assert r.json()["errors"] == [
        {"field": "resources.resource_pool", "message": "pool 'gpu' is not bound to workspace 'B'"}
    ]
    r = client.post(
        "/api/v1/commands",
        data={
            "entrypoint": '"true"',
            "workspace_id": str(b["id"]),
            "config": "resources: {resource_pool: gpu, slots: 0}",
        },
    )
    assert r.status_code == 400 and "'gpu'" in r.json()["detail"]
    assert client.get(f"/api/v1/workspaces/{b['id']}/available-resource-pools").json() == {
        "resource_pools": ["default", "aux"]
    }
    bound = client.get("/api/v1/resource-pools/gpu/workspace-bindings").json()
    assert bound["workspace_ids"] == [a["id"]]
    # A task of A with no slots takes A's auxiliary pool; its list filters by workspace.
    r = client.post(
        "/api/v1/commands",
        data={
            "entrypoint": '"true"',
            "workspace_id": str(a["id"]),
            "config": "resources: {slots: 0}",
        },
    )
    assert r.status_code == 201, r.text
    task = r.json()["task"]
    assert (task["workspace_id"], task["resource_pool"]) == (a["id"], "aux")
    assert [
        t["id"]
        for t in client.get("/api/v1/tasks", params={"workspace_id": a["id"]}).json()["tasks"]
    ] == [task["id"]]
    assert client.get("/api/v1/tasks", params={"workspace_id": b["id"]}).json()["tasks"] == []
    r = client.post(
        "/api/v1/commands", data={"entrypoint": '"true"', "config": "resources: {slots: 0}"}
    )
    page = client.get("/api/v1/commands", params={"limit": 1, "offset": 1}).json()
    assert page["total"] == 2 and [t["id"] for t in page["tasks"]] == [r.json()["task"]["id"]]
    # Unbinding refuses nothing any more.
    r = client.request(
        "DELETE", "/api/v1/resource-pools/gpu/workspace-bindings", json={"workspace_ids": [a["id"]]}
    )
    assert r.status_code == 200
    assert _create(client, bad).status_code == 201


def test_workspace_agent_user_group_overrides_field_by_field(pools_master):
    from dauntless.config import DefaultTaskConfig
    from dauntless.master.models.users import task_identity

    client, ctx = pools_master
    group = {"agent_uid": 1001, "agent_user": "ml"}
    r = client.post("/api/v1/workspaces", json={"name": "posix", "agent_user_group": group})
    assert r.status_code == 201 and r.json()["workspace"]["agent_user_group"] == group
    r = client.post(
        "/api/v1/workspaces", json={"name": "bad", "agent_user_group": {"agent_uid": -1}}
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"].endswith("agent_uid")
    root = DefaultTaskConfig(uid=0, gid=0, user="root", group="root")
    ws = client.get("/api/v1/workspaces", params={"name": "posix"}).json()["workspaces"][0]
    with ctx.db.read() as s:  # no owner link: the workspace's fields over default_task
        got = task_identity(s, None, root, ws["id"])
    assert (got.uid, got.gid, got.user, got.group) == (1001, 0, "ml", "root")
