"""``det workspace|project|rbac|user-group``, ``det rp bindings``, ``det e move`` and
``det e create --project_id`` against the real master (RBAC on), over real sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from dauntless.cli import main
from dauntless.master import auth_secrets
from dauntless.master.testing import Cluster, serve

pytestmark = pytest.mark.usefixtures("no_backoff")

CONFIG = """
name: cli-teams
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


@pytest.fixture
def rbac_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    pools = [{"pool_name": p} for p in ("default", "gpu")]
    with serve(
        str(tmp_path / "master"),
        run_loop=False,
        resource_pools=pools,
        security={"authz": {"type": "rbac"}},
    ) as live:
        c = Cluster(live.url, live.app)
        try:
            yield c
        finally:
            c.close()


def det(capsys: pytest.CaptureFixture[str], cluster: Cluster, *argv: str, user: str = "admin"):
    code = main(["-m", cluster.url, "-u", user, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_teams_commands(
    rbac_cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch
) -> None:
    c = rbac_cluster
    ok = lambda *a, **k: det(capsys, c, *a, **k)  # noqa: E731
    for name in ("ann", "ben"):
        r = c.admin.post("/api/v1/users", json={"username": name, "password": ""})
        assert r.status_code == 201, r.text

    code, out, err = ok("w", "create", "vision", "--default-compute-pool", "gpu")
    assert code == 0 and "Created workspace 'vision'" in out, err
    code, out, err = ok("w", "create", "k8s", "--namespace", "ns")
    assert code == 1 and "Kubernetes" in err
    code, out, _ = ok("w", "list", "--json")
    assert {w["name"] for w in json.loads(out)["workspaces"]} == {"Uncategorized", "vision"}
    code, out, err = ok("p", "create", "vision", "cats", "--description", "felines", "--key", "cat")
    assert code == 0 and "key CAT" in out, err
    code, out, _ = ok("w", "list-projects", "vision")
    assert "cats" in out and "felines" in out
    code, out, err = ok("p", "edit", "vision", "cats", "--new_name", "kittens")
    assert code == 0, err
    code, out, _ = ok("p", "describe", "vision", "kittens", "--json")
    assert json.loads(out)["project"]["name"] == "kittens"

    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "model_def.py").write_text("x = 1\n")
    pid = json.loads(ok("p", "describe", "vision", "kittens", "--json")[1])["project"]["id"]
    code, out, err = ok("e", "create", str(config), str(tmp_path / "ctx"), "--paused",
                        "--project_id", str(pid))  # fmt: skip
    assert code == 0, err
    exp_id = int(out.split()[-1])
    exp = c.admin.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert (exp["project_id"], exp["workspace_name"]) == (pid, "vision")
    assert exp["config"]["resources"]["resource_pool"] == "gpu"  # the workspace's default
    code, out, _ = ok("p", "list-experiments", "vision", "kittens", "--json")
    assert [e["id"] for e in json.loads(out)["experiments"]] == [exp_id]
    code, out, err = ok("e", "move", str(exp_id), "Uncategorized", "Uncategorized")
    assert code == 0 and "Moved experiment" in out, err
    assert c.admin.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["project_id"] == 1

    # Groups and roles.
    code, out, err = ok("user-group", "create", "team", "--add-user", "ann")
    assert code == 0 and "1 member(s)" in out, err
    code, out, err = ok("user-group", "add-user", "team", "ben")
    assert code == 0, err
    code, out, _ = ok("user-group", "describe", "team", "--json")
    assert {u["username"] for u in json.loads(out)["users"]} == {"ann", "ben"}
    code, out, _ = ok("user-group", "list", "--groups-user-belongs-to", "ben", "--json")
    assert [g["group"]["name"] for g in json.loads(out)["groups"]] == ["team"]
    code, out, err = ok("rbac", "assign-role", "Viewer", "-g", "team", "-w", "vision")
    assert code == 0 and "Assigned role Viewer to group 'team' on workspace 'vision'" in out, err
    code, out, err = ok("rbac", "assign-role", "editor", "-u", "ann", "-w", "vision")
    assert code == 0, err
    code, out, _ = ok("rbac", "list-users-roles", "ann")
    assert "Editor" in out and "Viewer" in out and "group team" in out
    code, out, _ = ok("rbac", "list-groups-roles", "team", "--json")
    assert json.loads(out)["roles"][0]["role"]["name"] == "Viewer"
    code, out, _ = ok("rbac", "describe-role", "WorkspaceCreator")
    assert "PERMISSION_TYPE_CREATE_WORKSPACE" in out
    code, out, _ = ok("rbac", "list-roles", "--exclude-global-roles", "--json")
    names = {r["name"] for r in json.loads(out)["roles"]}
    assert "Editor" in names and "WorkspaceCreator" not in names
    code, out, _ = ok("w", "list-members", "vision", "--csv")
    assert "user,ann,Editor" in out and "group,team,Viewer" in out
    code, out, _ = ok("rbac", "my-permissions", user="ben")
    assert "Viewer" in out and "vision" in out
    # ben (Viewer) reads but may not create there; ann (Editor) may.
    code, out, err = ok("p", "create", "vision", "dogs", user="ben")
    assert code == 1 and "PERMISSION_TYPE_CREATE_PROJECT" in err
    code, out, err = ok("p", "create", "vision", "dogs", user="ann")
    assert code == 0, err
    code, out, _ = ok("w", "list", user="ben")
    assert "vision" in out and "Uncategorized" not in out
    code, out, err = ok("rbac", "unassign-role", "Viewer", "-g", "team", "-w", "vision")
    assert code == 0, err
    code, out, _ = ok("w", "list", "--json", user="ben")
    assert json.loads(out)["workspaces"] == []

    # Pool bindings.
    code, out, err = ok("rp", "bindings", "add", "gpu", "vision")
    assert code == 0, err
    code, out, _ = ok("rp", "bindings", "list-workspaces", "gpu")
    assert "vision" in out
    code, out, err = ok("w", "list-pools", "Uncategorized")
    assert "gpu" not in out and "default" in out
    code, out, err = ok("rp", "bindings", "remove", "gpu", "vision")
    assert code == 0, err

    # Archive, delete (refused while it holds experiments), groups.
    code, out, err = ok("w", "archive", "vision")
    assert code == 0, err
    code, out, err = ok("p", "create", "vision", "late")
    assert code == 1 and "archived" in err
    code, out, err = ok("w", "unarchive", "vision")
    assert code == 0, err
    code, out, err = ok("e", "move", str(exp_id), "vision", "kittens")
    assert code == 0, err
    code, out, err = ok("w", "delete", "vision", "--yes")
    assert code == 1 and "move or delete them first" in err
    code, out, err = ok("user-group", "change-name", "team", "crew")
    assert code == 0, err
    code, out, err = ok("user-group", "delete", "crew", "--yes")
    assert code == 0, err
