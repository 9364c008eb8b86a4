"""The model registry (issue 31 scope 1) on one in-process master per test, SQLite and
PostgreSQL: Determined's rules for models and versions (names, archived models, version
numbers, filters), and the protection of registered checkpoints from checkpoint GC,
``DELETE /checkpoints/{uuid}`` and the experiment's deletion, released by deleting the
version. The same path with real trial processes: tests/integration/
test_model_registry_e2e.py."""

from __future__ import annotations

import io
import tarfile
import uuid as uuidlib
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from dauntless.client import Registry
from dauntless.master.db import CheckpointRow, ExperimentRow, TrialRow
from dauntless.master.testing import login, model_def_tarball


def _experiment(client: TestClient, storage: Path) -> tuple[int, int]:
    """A single-trial experiment on shared_fs ``storage``: ``(experiment id, trial id)``."""
    config = {
        "name": "registry",
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 8},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
    }
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config)},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    return exp_id, trial["id"]


def _checkpoint(ctx: Any, storage: Path, exp_id: int, trial_id: int, batches: int, state: str):
    """A checkpoint with one file (its bytes depend on ``batches``); its uuid."""
    uuid = str(uuidlib.uuid4())
    (storage / uuid).mkdir(parents=True)
    (storage / uuid / "weights.bin").write_bytes(bytes(range(256)) * batches)
    with ctx.db.write() as s:
        s.add(
            CheckpointRow(
                uuid=uuid,
                trial_id=trial_id,
                experiment_id=exp_id,
                total_batches=batches,
                state=state,
                resources={"weights.bin": 256 * batches},
                meta={"steps_completed": batches},
                report_time=float(batches),
            )
        )
    return uuid


def _finish(ctx: Any, exp_id: int) -> None:
    """End the experiment and its trial (COMPLETED), as the harness would."""
    with ctx.db.write() as s:
        s.get(ExperimentRow, exp_id).state = "COMPLETED"
        for t in s.query(TrialRow).filter(TrialRow.experiment_id == exp_id):
            t.state = "COMPLETED"


def test_models_and_versions_follow_determined_rules(master, tmp_path: Path) -> None:
    client, ctx = master
    storage = tmp_path / "ckpts"
    exp_id, trial_id = _experiment(client, storage)
    done = _checkpoint(ctx, storage, exp_id, trial_id, 5, "COMPLETED")
    uploading = _checkpoint(ctx, storage, exp_id, trial_id, 6, "UPLOADING")

    # Names: unique (case-sensitive), not blank, no "  ", "/" or "\\", not all digits.
    r = client.post("/api/v1/models", json={"name": "mnist", "labels": ["a", "b"]})
    assert r.status_code == 200, r.text
    model = r.json()["model"]
    assert (model["workspace_id"], model["num_versions"], model["username"]) == (1, 0, "admin")
    assert client.post("/api/v1/models", json={"name": "mnist"}).status_code == 409
    assert client.post("/api/v1/models", json={"name": "MNIST"}).status_code == 200
    for bad in ("", "  ", "a  b", "a/b", "a\\b", "123"):
        r = client.post("/api/v1/models", json={"name": bad})
        assert r.status_code == 400 and r.json()["errors"][0]["field"] == "name", (bad, r.text)
    r = client.post("/api/v1/models", json={"name": "x", "unknown": 1})
    assert r.status_code in (400, 422) and "unknown" in r.text
    assert client.get(f"/api/v1/models/{model['id']}").json()["model"]["name"] == "mnist"
    assert client.get("/api/v1/models/nope").status_code == 404

    # Filters, sorting, labels by use.
    client.post("/api/v1/models", json={"name": "other", "description": "Speech", "labels": ["b"]})
    names = lambda **q: [m["name"] for m in client.get("/api/v1/models", params=q).json()["models"]]  # noqa: E731
    assert names() == ["MNIST", "mnist", "other"]
    assert names(name="mni") == ["MNIST", "mnist"]
    assert names(description="speech") == ["other"]
    assert names(labels=["a", "b"]) == ["mnist"]
    assert names(sort_by="SORT_BY_NAME", order_by="ORDER_BY_DESC", limit=1) == ["other"]
    assert client.get("/api/v1/model/labels").json()["labels"] == ["b", "a"]

    # Versions: only COMPLETED checkpoints; numbered from 1 per model.
    reg_path = "/api/v1/models/mnist/versions"
    r = client.post(reg_path, json={"checkpoint_uuid": uploading})
    assert r.status_code == 409 and "COMPLETED" in r.json()["detail"]
    assert client.post(reg_path, json={"checkpoint_uuid": "nope"}).status_code == 404
    v1 = client.post(reg_path, json={"checkpoint_uuid": done, "name": "first", "labels": ["x"]})
    assert v1.status_code == 200, v1.text
    v1 = v1.json()["model_version"]
    assert (v1["model_version"], v1["model_name"], v1["checkpoint"]["uuid"]) == (1, "mnist", done)
    v2 = client.post(reg_path, json={"checkpoint_uuid": done}).json()["model_version"]
    assert v2["version"] == 2
    latest = client.get("/api/v1/models/mnist/versions/-1").json()["model_version"]
    assert latest["version"] == 2
    r = client.patch(
        "/api/v1/models/mnist/versions/1",
        json={"model_version": {"comment": "good", "metadata": {"acc": 0.9}}},
    )
    assert r.json()["model_version"]["comment"] == "good", r.text
    listed = client.get(reg_path, params={"order_by": "ORDER_BY_DESC"}).json()
    assert [v["version"] for v in listed["model_versions"]] == [2, 1]
    assert listed["model"]["num_versions"] == 2
    assert client.get("/api/v1/models/mnist/versions/7").status_code == 404

    # Archived: readable, not editable, no new versions.
    assert client.post("/api/v1/models/mnist/archive").status_code == 200
    r = client.patch("/api/v1/models/mnist", json={"model": {"description": "d"}})
    assert r.status_code == 409 and "archived" in r.json()["detail"]
    assert client.post(reg_path, json={"checkpoint_uuid": done}).status_code == 409
    assert names(archived="false") == ["MNIST", "other"]
    client.post("/api/v1/models/mnist/unarchive")
    r = client.patch("/api/v1/models/mnist", json={"model": {"name": "digits", "notes": "# Notes"}})
    assert r.json()["model"]["name"] == "digits", r.text

    # Moving and workspaces: a workspace holding models cannot be deleted.
    ws = client.post("/api/v1/workspaces", json={"name": "team"}).json()["workspace"]["id"]
    r = client.post("/api/v1/models/digits/move", json={"destination_workspace_id": ws})
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/models/digits").json()["model"]["workspace_id"] == ws
    r = client.delete(f"/api/v1/workspaces/{ws}")
    assert r.status_code == 409 and "model" in r.json()["detail"]

    # The SDK over the same routes.
    reg = Registry.__new__(Registry)
    reg.session = _TestSession(client)
    assert reg.add_model_metadata("digits", {"k": 1, "j": 2}) == {"k": 1, "j": 2}
    assert reg.remove_model_metadata("digits", ["j"]) == {"k": 1}
    assert reg.get_version("digits")["model_version"] == 2  # type: ignore[index]
    assert reg.add_version_metadata("digits", 1, {"f1": 0.5}) == {"acc": 0.9, "f1": 0.5}
    assert reg.get_version("other") is None

    # Deleting the model deletes its versions, not its checkpoint.
    client.delete("/api/v1/models/digits")
    assert client.get(f"/api/v1/checkpoints/{done}").json()["checkpoint"]["state"] == "COMPLETED"
    assert client.delete(f"/api/v1/workspaces/{ws}").status_code == 200


class _TestSession:
    """The part of :class:`dauntless.client.Session` that :class:`Registry` uses, over
    an in-process test client."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def request(self, method: str, path: str, *, params: Any = None, json: Any = None) -> Any:
        r = self.client.request(method, "/api/v1" + path, params=params, json=json)
        assert r.status_code < 400, r.text
        return r


def test_registered_checkpoints_outlive_gc_and_their_experiment(master, tmp_path: Path) -> None:
    client, ctx = master
    storage = tmp_path / "ckpts"
    exp_id, trial_id = _experiment(client, storage)
    kept = _checkpoint(ctx, storage, exp_id, trial_id, 3, "COMPLETED")
    other = _checkpoint(ctx, storage, exp_id, trial_id, 4, "COMPLETED")
    client.post("/api/v1/models", json={"name": "m"})
    client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": kept})
    client.post("/api/v1/models/m/versions", json={"checkpoint_uuid": kept})
    _finish(ctx, exp_id)

    # det checkpoint delete: refused, naming the model versions.
    r = client.delete(f"/api/v1/checkpoints/{kept}")
    assert r.status_code == 409
    assert "m (model #1), version 1; m (model #1), version 2" in r.json()["detail"]

    # Checkpoint GC with nothing to keep: the registered checkpoint stays.
    policy = {"save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0}
    r = client.patch(f"/api/v1/experiments/{exp_id}", json={"checkpoint_storage": policy})
    assert r.status_code == 200, r.text
    states = {
        c["uuid"]: c["state"]
        for c in client.get(f"/api/v1/experiments/{exp_id}/checkpoints").json()["checkpoints"]
    }
    assert states == {kept: "COMPLETED", other: "DELETED"}
    assert (storage / kept / "weights.bin").is_file() and not (storage / other).exists()

    # The experiment's deletion leaves it; the version keeps what reads need.
    assert client.delete(f"/api/v1/experiments/{exp_id}").status_code == 200
    assert client.get(f"/api/v1/experiments/{exp_id}").status_code == 404
    ckpt = client.get(f"/api/v1/checkpoints/{kept}").json()["checkpoint"]
    assert (ckpt["state"], ckpt["total_batches"], ckpt["experiment_id"]) == ("COMPLETED", 3, exp_id)
    r = client.get(f"/api/v1/checkpoints/{kept}/download")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        f = tar.extractfile("./weights.bin")
        assert f is not None and f.read() == bytes(range(256)) * 3
    v = client.get("/api/v1/models/m/versions/1").json()["model_version"]
    assert v["checkpoint"]["uuid"] == kept

    # Deleting one version keeps the files (the other names them); the last releases them.
    assert client.delete("/api/v1/models/m/versions/1").status_code == 200
    assert (storage / kept).is_dir()
    assert client.delete("/api/v1/models/m/versions/2").status_code == 200
    assert not (storage / kept).exists()
    assert client.get(f"/api/v1/checkpoints/{kept}").status_code == 404


def test_basic_authz_owners_and_readers(master, tmp_path: Path) -> None:
    """Under basic authz anyone creates and edits models; deleting one, or a version, is
    its owner's or an admin's; a trial's metadata and status show in its view; stored
    checkpoints' metadata can change until they are registered."""
    client, ctx = master
    storage = tmp_path / "ckpts"
    exp_id, trial_id = _experiment(client, storage)
    uuid = _checkpoint(ctx, storage, exp_id, trial_id, 2, "COMPLETED")
    assert client.post("/api/v1/users", json={"username": "bob", "password": "pw"}).is_success
    bob = {"Authorization": f"Bearer {login(client, 'bob', 'pw')}"}
    client.post("/api/v1/models", json={"name": "admins"})
    r = client.post("/api/v1/models", json={"name": "bobs"}, headers=bob)
    assert r.status_code == 200 and r.json()["model"]["username"] == "bob"
    r = client.patch("/api/v1/models/admins", json={"description": "by bob"}, headers=bob)
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/models/admins/versions", json={"checkpoint_uuid": uuid}, headers=bob)
    assert r.status_code == 200, r.text
    r = client.delete("/api/v1/models/admins/versions/1", headers=bob)  # bob's own version
    assert r.status_code == 200, r.text
    r = client.post("/api/v1/models/admins/versions", json={"checkpoint_uuid": uuid})
    assert r.json()["model_version"]["version"] == 1  # the highest plus one: 1 again
    r = client.delete("/api/v1/models/admins/versions/1", headers=bob)
    assert r.status_code == 403 and "admin" in r.json()["detail"], r.text
    r = client.delete("/api/v1/models/admins", headers=bob)
    assert r.status_code == 403 and "model 'admins'" in r.json()["detail"], r.text
    assert client.delete("/api/v1/models/bobs", headers=bob).status_code == 200

    # A trial's status and metadata; a checkpoint's metadata until it is registered.
    assert client.post(
        f"/api/v1/trials/{trial_id}/runner/metadata", json={"metadata": {"state": "warm"}}
    ).is_success
    r = client.post(f"/api/v1/runs/{trial_id}/metadata", json={"metadata": {"a": {"b": 1}}})
    assert r.json() == {"metadata": {"a": {"b": 1}}}
    client.post(f"/api/v1/runs/{trial_id}/metadata", json={"metadata": {"a": {"c": 2}}})
    trial = client.get(f"/api/v1/trials/{trial_id}").json()["trial"]
    assert (trial["runner_state"], trial["metadata"]) == ("warm", {"a": {"b": 1, "c": 2}})
    r = client.post(f"/api/v1/runs/{trial_id}/metadata", json={"metadata": [1]})
    assert r.status_code in (400, 422)
    other = _checkpoint(ctx, storage, exp_id, trial_id, 3, "COMPLETED")
    r = client.post(
        f"/api/v1/checkpoints/{other}/metadata", json={"checkpoint": {"metadata": {"k": 1}}}
    )
    assert r.json()["checkpoint"]["metadata"] == {"k": 1}, r.text
    r = client.post(
        f"/api/v1/checkpoints/{uuid}/metadata", json={"checkpoint": {"metadata": {"k": 1}}}
    )
    assert r.status_code == 409 and "admins (model #1), version 1" in r.json()["detail"]
