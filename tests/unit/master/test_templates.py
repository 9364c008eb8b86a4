"""Config templates (issue 31 scope 5): Determined's merge rules, the REST routes and
their permissions, and ``template`` on experiment and task creation, on an in-process
master (SQLite and PostgreSQL); ``det template`` against a real master over sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.cli import main
from dauntless.config import MasterConfig, merge_template
from dauntless.master.app import create_app
from dauntless.master.testing import bearer, login, model_def_tarball, serve, sign_in

BASE = {
    "entrypoint": "model_def:Trial",
    "hyperparameters": {
        "global_batch_size": 8,
        "lr": {"type": "double", "minval": 0.1, "maxval": 1},
    },
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "environment": {"environment_variables": ["A=template", "B=template"]},
    "bind_mounts": [
        {"host_path": "/data", "container_path": "/data"},
        {"host_path": "/cache", "container_path": "/cache"},
    ],
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpt"},
}


# ---------------------------------------------------------------------- merge rules


def test_merge_config_wins_scalars_and_lists_objects_merge() -> None:
    config = {
        "name": "mine",
        "hyperparameters": {"lr": {"maxval": 2}, "layers": 3},
        "searcher": {"max_length": {"batches": 20}},
        "labels": ["x"],
    }
    merged = merge_template({**BASE, "labels": ["t1", "t2"], "name": "tpl"}, config)
    assert merged["name"] == "mine"
    assert merged["labels"] == ["x"]  # a plain list: the config's replaces the template's
    assert merged["hyperparameters"]["lr"] == {"type": "double", "minval": 0.1, "maxval": 2}
    assert merged["hyperparameters"]["layers"] == 3
    assert merged["hyperparameters"]["global_batch_size"] == 8
    assert merged["searcher"] == {
        "name": "single",
        "metric": "loss",
        "max_length": {"batches": 20},
    }
    assert merged["entrypoint"] == "model_def:Trial"
    assert BASE["searcher"]["max_length"] == {"batches": 10}  # inputs untouched


def test_merge_custom_rules() -> None:
    config = {
        "environment": {"environment_variables": ["B=config"]},
        "bind_mounts": [{"host_path": "/mine", "container_path": "/data"}],
        "checkpoint_storage": {"type": "s3", "bucket": "b"},
        "hyperparameters": {"lr": {"type": "const", "val": 0.5}},
        "searcher": {"name": "random", "metric": "acc", "max_trials": 3},
        "resources": {"devices": ["/dev/x:/dev/y"]},
    }
    tpl = {**BASE, "resources": {"devices": [{"host_path": "/h", "container_path": "/dev/y"}]}}
    merged = merge_template(tpl, config)
    # environment variables: the template's first, the config's after (a later one wins)
    assert merged["environment"]["environment_variables"] == [
        "A=template",
        "B=template",
        "B=config",
    ]
    # bind mounts: the config's, then the template's of another container path
    assert merged["bind_mounts"] == [
        {"host_path": "/mine", "container_path": "/data"},
        {"host_path": "/cache", "container_path": "/cache"},
    ]
    assert merged["resources"]["devices"] == ["/dev/x:/dev/y"]
    # another storage type or searcher name: the config's section whole
    assert merged["checkpoint_storage"] == {"type": "s3", "bucket": "b"}
    assert merged["searcher"] == {"name": "random", "metric": "acc", "max_trials": 3}
    # a hyperparameter of another type: the config's whole
    assert merged["hyperparameters"]["lr"] == {"type": "const", "val": 0.5}
    # per device type when either side gives them per type
    per_type = merge_template(
        {"environment": {"environment_variables": ["A=1"]}},
        {"environment": {"environment_variables": {"cuda": ["C=2"]}}},
    )
    assert per_type["environment"]["environment_variables"] == {
        "cpu": ["A=1"],
        "cuda": ["A=1", "C=2"],
        "rocm": ["A=1"],
    }
    with pytest.raises(TypeError, match="mappings"):
        merge_template([], {})  # type: ignore[arg-type]


# ---------------------------------------------------------------------- REST


@pytest.fixture()
def rbac_master(tmp_path: Path, db_url: str) -> Iterator[tuple[TestClient, Any]]:
    app = create_app(
        MasterConfig(
            data_dir=str(tmp_path),
            port=18080,
            db_url=db_url,
            security={"authz": {"type": "rbac"}},
        ),
        run_loop=False,
    )
    with TestClient(app) as client:
        sign_in(client)
        yield client, app


def _ok(r: Any, code: int = 200) -> Any:
    assert r.status_code == code, (r.request.method, r.request.url, r.status_code, r.text)
    return r.json()


def test_template_routes_and_roles(rbac_master: tuple[TestClient, Any]) -> None:
    client, _app = rbac_master
    ws = _ok(client.post("/api/v1/workspaces", json={"name": "team"}), 201)["workspace"]["id"]
    other = _ok(client.post("/api/v1/workspaces", json={"name": "other"}), 201)["workspace"]["id"]
    tpl = {"name": "base", "config": BASE, "workspace_id": ws}
    created = _ok(client.post("/api/v1/templates/base", json=tpl))["template"]
    assert created == {"name": "base", "config": BASE, "workspace_id": ws}
    assert client.post("/api/v1/templates/base", json=tpl).status_code == 409
    assert _ok(client.get("/api/v1/templates/base"))["template"]["config"] == BASE
    assert client.get("/api/v1/templates/nope").status_code == 404
    bad = client.post("/api/v1/templates/x", json={"config": ["not", "a", "mapping"]})
    assert bad.status_code == 400
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]
    r = client.post("/api/v1/templates/deep", json={"config": deep})
    assert r.status_code == 400 and "config" in r.text
    r = client.post("/api/v1/templates/x", json={"name": "y", "config": {}})
    assert r.status_code == 400 and "name" in r.text
    # PUT replaces, PATCH replaces the config, rename, list (filtered and paged)
    _ok(client.put("/api/v1/templates/other", json={"config": {"a": 1}, "workspace_id": other}))
    _ok(client.put("/api/v1/templates/other", json={"config": {"a": 2}, "workspace_id": other}))
    assert _ok(client.get("/api/v1/templates/other"))["template"]["config"] == {"a": 2}
    _ok(client.patch("/api/v1/templates/other", json={"config": {"a": 3}}))
    renamed = _ok(
        client.patch("/api/v1/template/rename", json={"old_name": "other", "new_name": "o2"})
    )
    assert renamed["template"] == {"name": "o2", "config": {"a": 3}, "workspace_id": other}
    page = _ok(client.get("/api/v1/templates", params={"order_by": "ORDER_BY_DESC"}))
    assert [t["name"] for t in page["templates"]] == ["o2", "base"]
    assert page["pagination"]["total"] == 2
    only = _ok(client.get("/api/v1/templates", params={"workspace_ids": [ws], "name": "BA"}))
    assert [t["name"] for t in only["templates"]] == ["base"]

    # A Viewer of "team" sees its templates only and may not change them; an Editor may.
    for name in ("viewer", "editor"):
        _ok(client.post("/api/v1/users", json={"username": name, "password": "pw"}), 201)
    ids = {u["username"]: u["id"] for u in _ok(client.get("/api/v1/users"))["users"]}
    _ok(
        client.post(
            "/api/v1/roles/add-assignments",
            json={
                "user_role_assignments": [
                    {
                        "user_id": ids[name],
                        "role_assignment": {"role": {"role_id": role}, "scope_workspace_id": ws},
                    }
                    for name, role in (("viewer", 4), ("editor", 5))
                ]
            },
        )
    )
    viewer = bearer(login(client, "viewer", "pw"))
    editor = bearer(login(client, "editor", "pw"))
    client.cookies.clear()
    listed = _ok(client.get("/api/v1/templates", headers=viewer))
    assert [t["name"] for t in listed["templates"]] == ["base"]
    assert listed["pagination"]["total"] == 1
    assert client.get("/api/v1/templates/o2", headers=viewer).status_code == 403
    r = client.patch("/api/v1/templates/base", json={"config": {}}, headers=viewer)
    assert r.status_code == 403 and "PERMISSION_TYPE_UPDATE_TEMPLATES" in r.json()["detail"]
    r = client.post("/api/v1/templates/v", json={"config": {}, "workspace_id": ws}, headers=viewer)
    assert r.status_code == 403
    _ok(client.post("/api/v1/templates/e", json={"config": {}, "workspace_id": ws}, headers=editor))
    r = client.post(
        "/api/v1/templates/e2", json={"config": {}, "workspace_id": other}, headers=editor
    )
    assert r.status_code == 403
    assert client.delete("/api/v1/templates/o2", headers=editor).status_code == 403
    _ok(client.delete("/api/v1/templates/e", headers=editor))
    assert client.get("/api/v1/templates/e", headers=editor).status_code == 404

    # Using a template needs VIEW_TEMPLATES on its workspace.
    config = {"name": "x", "workspace": "team", "project": "Uncategorized"}
    _ok(client.post(f"/api/v1/workspaces/{ws}/projects", json={"name": "Uncategorized"}), 201)
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "template": "o2", "validate_only": "true"},
        headers=editor,
    )
    assert r.status_code == 403 and "TEMPLATES" in r.json()["detail"]
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "template": "base", "validate_only": "true"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        headers=editor,
    )
    assert r.status_code == 201 and r.json()["experiment"] is None, r.text


def test_template_applies_to_experiments_and_tasks(master: tuple[TestClient, Any]) -> None:
    client, ctx = master
    _ok(client.post("/api/v1/templates/base", json={"config": BASE}))
    config = {
        "name": "from-template",
        "hyperparameters": {"lr": {"maxval": 2}},
        "environment": {"environment_variables": ["B=mine"]},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(ctx.config.data_dir)},
    }
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "template": "base", "activate": "false"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    exp = _ok(r, 201)["experiment"]
    assert exp["name"] == "from-template"
    assert exp["config"]["searcher"]["metric"] == "loss"
    assert exp["config"]["hyperparameters"]["lr"]["minval"] == 0.1
    assert exp["config"]["hyperparameters"]["lr"]["maxval"] == 2
    env = exp["config"]["environment"]["environment_variables"]
    assert env[-1] == "B=mine" and "A=template" in env
    # without the template the config is incomplete (no searcher, no entrypoint)
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "validate_only": "true"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 400
    r = client.post(
        "/api/v1/experiments", data={"config": yaml.safe_dump(config), "template": "missing"}
    )
    assert r.status_code == 404 and "missing" in r.text
    # a later edit of the template does not change the experiment
    _ok(client.patch("/api/v1/templates/base", json={"config": {"name": "changed"}}))
    again = _ok(client.get(f"/api/v1/experiments/{exp['id']}"))["experiment"]
    assert again["config"]["searcher"]["metric"] == "loss"

    _ok(
        client.put(
            "/api/v1/templates/task",
            json={"config": {"environment": {"environment_variables": ["T=1"]}}},
        )
    )
    r = client.post(
        "/api/v1/commands",
        data={
            "entrypoint": json.dumps(["true"]),
            "config": "environment: {environment_variables: [U=2]}",
            "template_name": "task",
        },
    )
    task = _ok(r, 201)["task"]
    shown = _ok(client.get(f"/api/v1/tasks/{task['id']}"))["task"]
    assert shown["config"]["environment"]["environment_variables"] == ["T=1", "U=2"]
    r = client.post("/api/v1/commands", data={"entrypoint": '"true"', "template_name": "nope"})
    assert r.status_code == 404


def test_det_template_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER_TOKEN_DIR", str(tmp_path / "tokens"))
    with serve(str(tmp_path / "master"), run_loop=False) as live:

        def det(*argv: str) -> tuple[int, str, str]:
            code = main(["-m", live.url, "-u", "admin", *argv])
            out, err = capsys.readouterr()
            return code, out, err

        tpl = tmp_path / "tpl.yaml"
        tpl.write_text(yaml.safe_dump(BASE))
        code, out, err = det("template", "create", "base", str(tpl))
        assert code == 0 and "Created template base" in out, err
        code, out, err = det("tpl", "create", "base", str(tpl))
        assert code != 0 and "already exists" in err
        code, out, _ = det("template", "list", "-d")
        assert "base" in out and "Uncategorized" in out and "global_batch_size" in out
        code, out, _ = det("template", "describe", "base")
        assert yaml.safe_load(out) == BASE
        (tmp_path / "small.yaml").write_text("name: small\n")
        code, out, err = det("template", "set", "base", str(tmp_path / "small.yaml"))
        assert code == 0 and "Set template base" in out, err
        code, out, _ = det("template", "describe", "base", "--json")
        assert json.loads(out)["config"] == {"name": "small"}
        code, out, err = det("template", "set-value", "config", "base", str(tpl))
        assert code == 0, err
        cfg = tmp_path / "exp.yaml"
        cfg.write_text("name: with-tpl\n")
        (tmp_path / "ctx").mkdir()
        (tmp_path / "ctx" / "model_def.py").write_text("x = 1\n")
        code, out, err = det(
            "e", "create", str(cfg), str(tmp_path / "ctx"), "--template", "base", "--paused"
        )
        assert code == 0 and "Created experiment" in out, err
        code, out, err = det("template", "rm", "base")
        assert code == 0 and "Removed template base" in out, err
        code, out, _ = det("template", "list", "--json")
        assert json.loads(out)["templates"] == []
