"""Determined's REST shapes on Dauntless's ``/api/v1`` (issue 33), in-process: the
pre-hashed sign-in, bodies without ``Content-Type``, the dialect switch, JSON create
with the context as ``File`` objects, and the answers Determined's client parses. The
real client itself runs in tests/integration/test_det_client_e2e.py."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import auth_secrets, det_shapes
from dauntless.master.app import create_app
from dauntless.master.testing import sign_in

DET = {"User-Agent": "python-requests/2.32.3"}
"""What Determined's client sends (it is built on requests)."""

CONFIG = """
name: det-json
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: {batches: 10}
"""


def _prehash(password: str) -> str:
    # Determined 0.38.1's client: sha512 of its fixed salt + the password, as hex.
    return hashlib.sha512(("GubPEmmotfiK9TMD6Zdw" + password).encode()).hexdigest()


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client


def test_prehashed_passwords_and_older_hashes():
    stored = auth_secrets.hash_password("s3cret")
    assert stored.startswith(auth_secrets.PREHASHED)
    assert auth_secrets.verify_password(stored, "s3cret")
    assert auth_secrets.verify_password(stored, _prehash("s3cret"), is_hashed=True)
    assert not auth_secrets.verify_password(stored, _prehash("other"), is_hashed=True)
    assert not auth_secrets.verify_password(stored, "s3cret", is_hashed=True)
    # An argon2 hash over the plain password (made before) checks plain passwords only,
    # and says it should be replaced.
    older = auth_secrets._hasher.hash("s3cret")
    assert auth_secrets.needs_rehash(older) and not auth_secrets.needs_rehash(stored)
    assert auth_secrets.verify_password(older, "s3cret")
    assert not auth_secrets.verify_password(older, _prehash("s3cret"), is_hashed=True)
    # The empty password is sent as "" by Determined's client, hashed or not.
    assert auth_secrets.verify_password(auth_secrets.hash_password(""), "", is_hashed=True)


def test_login_without_content_type_and_is_hashed(master):
    r = master.post("/api/v1/users", json={"username": "carol", "password": "Carol-pw-1"})
    assert r.status_code == 201, r.text
    body = json.dumps({"username": "carol", "password": _prehash("Carol-pw-1"), "isHashed": True})
    r = master.post("/api/v1/auth/login", content=body, headers={"content-type": ""})
    assert r.status_code == 200, r.text
    user = r.json()["user"]
    assert user["username"] == "carol" and "displayName" in user and "modifiedAt" in user
    bad = json.dumps({"username": "carol", "password": _prehash("nope"), "isHashed": True})
    assert master.post("/api/v1/auth/login", content=bad).status_code == 401
    # Unknown fields are still refused, naming them.
    r = master.post("/api/v1/auth/login", json={"username": "carol", "password": "", "x": 1})
    assert r.status_code == 400 and "x" in r.text


def test_info_is_public_and_in_determined_shape(master):
    master.cookies.clear()
    info = master.get("/info").json()
    for field in ("version", "masterId", "clusterId", "clusterName", "strictJobQueueControl"):
        assert field in info, field
    assert info["clusterId"] == master.get("/api/v1/master").json()["cluster_id"]


def _files(tree: dict[str, bytes]) -> list[dict]:
    return [
        {
            "path": path,
            "type": 48,
            "content": base64.b64encode(data).decode(),
            "mode": 0o644,
            "mtime": 0,
        }
        for path, data in tree.items()
    ]


def test_json_create_and_the_dialect(master):
    body = {
        "config": CONFIG,
        "modelDefinition": [
            {"path": "pkg", "type": 53, "content": "", "mode": 0o755, "mtime": 0},
            *_files({"train.py": b"print('hi')\n", "pkg/util.py": b"X = 1\n"}),
        ],
        "activate": False,
    }
    r = master.post("/api/v1/experiments", content=json.dumps(body), headers=DET)
    assert r.status_code == 200, r.text  # Determined's client takes only 200
    exp = r.json()["experiment"]
    assert exp["state"] == "STATE_PAUSED" and exp["jobId"] == f"experiment-{exp['id']}"
    assert r.json()["config"]["searcher"]["name"] == "single"
    # Dauntless's own clients keep their shapes on the same paths.
    ours = master.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]
    assert ours["state"] == "PAUSED"
    det = master.get(f"/api/v1/experiments/{exp['id']}", headers=DET).json()["experiment"]
    assert det["state"] == "STATE_PAUSED" and det["originalConfig"] == CONFIG
    forced = master.get(f"/api/v1/experiments/{exp['id']}", headers={"X-Det-Dialect": "determined"})
    assert forced.json()["experiment"]["state"] == "STATE_PAUSED"
    page = master.get("/api/v1/experiments", headers=DET, params={"users": "admin"}).json()
    assert [e["id"] for e in page["experiments"]] == [exp["id"]]
    assert page["pagination"]["total"] == 1
    assert (
        master.get("/api/v1/experiments", headers=DET, params={"users": "x"}).json()["experiments"]
        == []
    )
    # The files became the context directory.
    tar = master.get(f"/api/v1/experiments/{exp['id']}/model_def").content
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert {"train.py", "pkg/util.py"} <= set(t.getnames())


def test_json_create_refuses_bad_bodies_naming_the_field(master):
    cases = [
        ({"config": CONFIG, "template": "t"}, "template"),
        ({"config": CONFIG, "bogus": 1}, "bogus"),
        ({"config": 3}, "config"),
        ({"config": CONFIG, "activate": "yes"}, "activate"),
        (
            {"config": CONFIG, "modelDefinition": [{"path": "a", "type": 48, "content": "!!"}]},
            "modelDefinition[0].content",
        ),
    ]
    for body, field in cases:
        r = master.post("/api/v1/experiments", content=json.dumps(body), headers=DET)
        assert r.status_code == 400, (body, r.text)
        assert field in r.text, (field, r.text)


def test_shapes_of_agents_and_pools(master):
    pools = master.get("/api/v1/resource-pools").json()
    (pool,) = pools["resourcePools"]
    assert pool["name"] == "default" and pool["type"] == "RESOURCE_POOL_TYPE_STATIC"
    assert pool["schedulerType"].startswith("SCHEDULER_TYPE_")
    agent = det_shapes.agent(
        {
            "id": "a1",
            "hostname": "h",
            "resource_pool": "default",
            "enabled": True,
            "draining": False,
            "registered_at": 0.0,
            "slots": [
                {"id": "0", "type": "cpu", "device": "cpu", "enabled": True, "allocation_id": "x"}
            ],
        }
    )
    assert set(agent["slots"]) == {"0"} and agent["slots"]["0"]["container"]["id"] == "x"
    assert agent["slotStats"]["typeStats"]["TYPE_CPU"]["total"] == 1
    assert det_shapes.state("STOPPING_CANCELED") == "STATE_STOPPING_CANCELED"
    assert det_shapes.state("NONSENSE") == "STATE_UNSPECIFIED"
    assert det_shapes.camel("default_compute_pool") == "defaultComputePool"


def test_models_in_determined_shapes_and_camel_case(master):
    for name in ("alpha", "beta"):
        body = {"name": name, "description": f"{name} model", "workspaceName": "Uncategorized"}
        r = master.post("/api/v1/models", content=json.dumps(body), headers=DET)
        assert r.status_code == 200, r.text
    model = r.json()["model"]
    assert model["name"] == "beta" and model["workspaceId"] == 1 and model["numVersions"] == 0
    assert model["creationTime"].endswith("Z") and model["username"] == "admin"
    page = master.get(
        "/api/v1/models", headers=DET, params={"sortBy": "SORT_BY_NAME", "orderBy": "ORDER_BY_DESC"}
    ).json()
    assert [m["name"] for m in page["models"]] == ["beta", "alpha"]
    assert page["pagination"] == {
        "offset": 0,
        "limit": 0,
        "startIndex": 0,
        "endIndex": 2,
        "total": 2,
    }
    none = master.get("/api/v1/models", headers=DET, params={"workspaceNames": "nowhere"})
    assert none.json()["models"] == []
    bad = master.get("/api/v1/models", headers=DET, params={"sortBy": "SORT_BY_COLOUR"})
    assert bad.status_code == 400 and "sort_by" in bad.text
    # Dauntless's own clients keep snake_case on the same paths.
    ours = master.get("/api/v1/models/alpha").json()["model"]
    assert ours["workspace_id"] == 1 and "workspaceId" not in ours
    det = master.get("/api/v1/models/alpha", headers=DET).json()["model"]
    assert det["description"] == "alpha model" and "workspace_id" not in det
    versions = master.get("/api/v1/models/alpha/versions", headers=DET).json()
    assert versions["modelVersions"] == [] and versions["model"]["name"] == "alpha"
    # An unknown checkpoint is refused by the same route, camelCase or not.
    for key in ("checkpointUuid", "checkpoint_uuid"):
        r = master.post(
            "/api/v1/models/alpha/versions", content=json.dumps({key: "nope"}), headers=DET
        )
        assert r.status_code == 404 and "nope" in r.text, r.text


def test_task_launch_list_and_logs_in_determined_shapes(master):
    files = _files({"run.sh": b"echo hi\n"})
    body = {"config": {"entrypoint": ["sh", "run.sh"]}, "files": files, "workspaceId": 1}
    r = master.post("/api/v1/commands", content=json.dumps(body), headers=DET)
    assert r.status_code == 200, r.text
    cmd = r.json()["command"]
    assert cmd["state"] == "STATE_QUEUED" and cmd["jobId"] == f"task-{cmd['id']}"
    assert cmd["username"] == "admin" and cmd["workspaceId"] == 1 and r.json()["warnings"] == []
    ours = master.get(f"/api/v1/tasks/{cmd['id']}").json()["task"]
    assert ours["entrypoint"] == ["sh", "run.sh"] and ours["state"] == "QUEUED"
    assert ours["taskType"] == "TASK_TYPE_COMMAND" and ours["allocations"] == []
    tar = master.get(f"/api/v1/tasks/{cmd['id']}/context").content
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert t.getnames() == ["run.sh"]
    listed = master.get("/api/v1/commands", headers=DET, params={"users": "admin"}).json()
    assert [c["id"] for c in listed["commands"]] == [cmd["id"]]
    assert master.get("/api/v1/commands", headers=DET, params={"users": "x"}).json() == {
        "commands": []
    }
    assert "tasks" in master.get("/api/v1/commands").json()  # Dauntless's shape
    logs = master.get(f"/api/v1/tasks/{cmd['id']}/logs", headers=DET)
    assert logs.status_code == 200 and logs.text == ""  # no line yet; not followed
    nb = master.post("/api/v1/notebooks", content=json.dumps({"config": {}}), headers=DET)
    assert nb.status_code == 200 and nb.json()["notebook"]["serviceAddress"], nb.text
    for bad, field in (({"preview": True}, "preview"), ({"bogus": 1}, "bogus")):
        r = master.post("/api/v1/commands", content=json.dumps(bad), headers=DET)
        assert r.status_code == 400 and field in r.text, r.text
    r = master.post("/api/v1/commands", content=json.dumps({"config": {}}), headers=DET)
    assert r.status_code == 400 and "entrypoint" in r.text, r.text
