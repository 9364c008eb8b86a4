"""Generic tasks in the master (issue 20): configs, the state machine, the routes, the
scheduler hand-over, the proxy's refusals, and the helpers of task processes."""

from __future__ import annotations

import json

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.cli._tasks import parse_override
from dauntless.config import ConfigError, MasterConfig
from dauntless.config._task import parse_duration, parse_task_config
from dauntless.core._train import TrainContext
from dauntless.exec.task_service import notebook_idle_since
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.task_states import TaskConflict, TaskState, check_task_transition
from dauntless.master.testing import bearer, login, model_def_tarball, register_agent, sign_in
from dauntless.storage._fs import SharedFSStorageManager


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18081), run_loop=False)
    with TestClient(app) as client:
        sign_in(client, "determined")
        yield client, app


def _register(client, app, slots=1) -> dict[str, str]:
    """Register agent a1; the headers of its credential."""
    return register_agent(
        client, app, {"id": "a1", "slots": [{"id": f"cpu{i}", "type": "cpu"} for i in range(slots)]}
    )


def test_config_parsing_and_refusals():
    cfg = parse_task_config({"idle_timeout": "2m", "resources": {"slots": 0}}, "NOTEBOOK")
    assert cfg.idle_timeout == 120.0 and cfg.resources.slots == 0
    assert parse_duration(90) == 90.0 and parse_duration("1.5h") == 5400.0
    with pytest.raises(ConfigError) as err:
        parse_task_config({"idle_timeout": "5m"}, "COMMAND")
    assert err.value.errors[0][0] == "idle_timeout"
    with pytest.raises(ConfigError) as err:
        parse_task_config({"resources": {"slotz": 1}}, "SHELL")
    assert "resources.slotz" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_task_config({"work_dir": "relative"}, "SHELL")
    assert "work_dir" in str(err.value)
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_state_machine():
    check_task_transition("QUEUED", TaskState.ASSIGNED)
    check_task_transition("RUNNING", TaskState.TERMINATING)
    with pytest.raises(TaskConflict, match="COMPLETED; it cannot become RUNNING"):
        check_task_transition("COMPLETED", TaskState.RUNNING)
    with pytest.raises(TaskConflict):
        check_task_transition("QUEUED", TaskState.COMPLETED)


def test_create_schedule_hand_over_exit_and_logs(master):
    client, app = master
    ctx = app.state.ctx
    r = client.post(
        "/api/v1/commands",
        data={"entrypoint": '["echo", "hi"]', "config": "resources: {slots: 1}"},
    )
    assert r.status_code == 201, r.text
    task = r.json()["task"]
    assert task["state"] == "QUEUED" and task["owner"] == "determined"
    assert loop.schedule_pass(ctx) == 0  # no agent: stays queued
    agent = _register(client, app)
    assert loop.schedule_pass(ctx) == 1
    assert client.get(f"/api/v1/tasks/{task['id']}").json()["task"]["state"] == "ASSIGNED"
    work = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=agent).json()
    (spec,) = work["start"]
    assert spec["task_type"] == "COMMAND" and spec["entrypoint"] == ["echo", "hi"]
    # The cluster view shows every allocation, tasks' too, not only trials'.
    stream = client.get("/api/v1/stream/cluster", params={"max_seconds": 0.2}).text
    cluster = json.loads(stream.split("data: ", 1)[1].split("\n", 1)[0])
    assert [(a["id"], a["task_id"], a["trial_id"]) for a in cluster["allocations"]] == [
        (spec["allocation_id"], task["id"], None)
    ]
    listed = client.get("/api/v1/allocations", params={"active": "true"}).json()["allocations"]
    assert [(a["task_id"], a["experiment_id"]) for a in listed] == [(task["id"], None)]
    env = spec["env"]
    assert env["DET_TASK_ID"] == task["id"] and env["DET_USER"] == "determined"
    # The owner's token works for the SDK while the task runs ...
    assert client.get("/api/v1/me", headers=bearer(env["DET_USER_TOKEN"])).status_code == 200
    # ... its session token reaches only its own task routes, never the proxy.
    own = bearer(env["DET_SESSION_TOKEN"])
    assert client.get("/api/v1/experiments", headers=own).status_code == 403
    assert client.get(f"/proxy/{task['id']}/", headers=own).status_code == 403
    # It has no trial, so it may not list allocations (it used to see every one).
    assert client.get("/api/v1/allocations", headers=own).status_code == 403
    r = client.post(
        "/api/v1/task/logs",
        json={"logs": [{"allocation_id": spec["allocation_id"], "seq": 1, "log": "hi"}]},
        headers=agent,
    )
    assert r.status_code == 200
    client.post(
        f"/api/v1/allocations/{spec['allocation_id']}/exited",
        json={"exit_code": 0, "message": None},
        headers=agent,
    )
    done = client.get(f"/api/v1/tasks/{task['id']}").json()["task"]
    assert done["state"] == "COMPLETED" and done["exit_code"] == 0
    logs = client.get(f"/api/v1/tasks/{task['id']}/logs").json()
    assert [ln["log"] for ln in logs["logs"]] == ["hi"] and logs["task_state"] == "COMPLETED"
    # The user session made for the task ends with it.
    assert client.get("/api/v1/me", headers=bearer(env["DET_USER_TOKEN"])).status_code == 401


def test_bad_requests_and_access(master):
    client, app = master
    assert client.get("/api/v1/tasks/nope").status_code == 404
    assert client.post("/api/v1/tasks/nope/kill").status_code == 404
    assert client.get("/proxy/nope/").status_code == 404
    r = client.post("/api/v1/commands", data={"config": "{}"})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "entrypoint"
    r = client.post("/api/v1/notebooks", data={"config": "resources: {resource_pool: gpu}"})
    assert r.status_code == 400 and "resources.resource_pool" in r.text
    r = client.post("/api/v1/tensorboards", data={"experiment_ids": "[99]"})
    assert r.status_code == 404 and "experiment 99" in r.text
    r = client.post("/api/v1/tensorboards", data={})
    assert r.status_code == 400
    nb = client.post("/api/v1/notebooks", data={}).json()["task"]
    assert nb["slots"] == 1 and nb["service_url"] == f"/proxy/{nb['id']}/"
    # Not ready yet: 503; no credential: 401; another user: 403, also for kill.
    assert client.get(f"/proxy/{nb['id']}/lab").status_code == 503
    admin = login(client, "admin")
    r = client.post(
        "/api/v1/users", json={"username": "bob", "password": "pw"}, headers=bearer(admin)
    )
    assert r.status_code == 201, r.text
    bob = bearer(login(client, "bob", "pw"))
    mine = client.headers.pop("Authorization")
    client.cookies.clear()
    assert client.get(f"/proxy/{nb['id']}/lab").status_code == 401
    client.headers["Authorization"] = mine
    r = client.get(f"/proxy/{nb['id']}/lab", headers=bob)
    assert r.status_code == 403 and "only the owner" in r.json()["detail"]
    assert client.post(f"/api/v1/tasks/{nb['id']}/kill", headers=bob).status_code == 403
    r = client.post(f"/api/v1/notebooks/{nb['id']}/kill", headers=bearer(admin))
    assert r.json()["task"]["state"] == "CANCELED"
    assert client.get(f"/proxy/{nb['id']}/lab", headers=bearer(admin)).status_code == 410


def test_queued_notebook_waits_for_free_slots(master):
    client, app = master
    _register(client, app, slots=1)
    ctx = app.state.ctx
    first = client.post("/api/v1/commands", data={"entrypoint": '"sleep 100"'}).json()["task"]
    second = client.post("/api/v1/notebooks", data={}).json()["task"]
    zero = client.post("/api/v1/notebooks", data={"config": "resources: {slots: 0}"}).json()
    loop.schedule_pass(ctx)
    states = {t["id"]: t["state"] for t in client.get("/api/v1/tasks").json()["tasks"]}
    assert states == {
        first["id"]: "ASSIGNED",
        second["id"]: "QUEUED",
        zero["task"]["id"]: "ASSIGNED",
    }


def test_notebook_idle_rule():
    status = {"connections": 0, "last_activity": "2026-01-01T00:00:10Z"}
    kernels = [
        {"execution_state": "idle", "connections": 0, "last_activity": "2026-01-01T00:00:20Z"}
    ]
    since = notebook_idle_since(status, kernels)
    assert since is not None and since == pytest.approx(1767225620.0)
    assert notebook_idle_since(status, [{**kernels[0], "connections": 1}]) is None
    assert notebook_idle_since(status, [{**kernels[0], "execution_state": "busy"}]) is None
    assert notebook_idle_since({**status, "connections": 2}, []) is None


def test_cli_overrides():
    assert parse_override("resources.slots=0") == (["resources", "slots"], 0)
    assert parse_override("description=a b") == (["description"], "a b")
    with pytest.raises(Exception, match="KEY=VALUE"):
        parse_override("novalue")


def test_core_tensorboard_upload(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    storage = SharedFSStorageManager(str(tmp_path / "shared"), "ckpts")
    train = TrainContext(None, trial_id=7, experiment_id=3, storage=storage, rank=1)  # type: ignore[arg-type]
    path = train.get_tensorboard_path()
    (path / "events.out.tfevents.1").write_bytes(b"x" * 10)
    (path / "skip.txt").write_text("no")
    copied = train.upload_tensorboard_files(
        selector=lambda p: p.name.startswith("events"), mangler=lambda p, r: p.with_suffix(f".r{r}")
    )
    dest = tmp_path / "shared" / "ckpts" / "tensorboard" / "experiment" / "3" / "trial" / "7"
    assert [str(p) for p in copied] == ["events.out.tfevents.r1"]
    assert (dest / "events.out.tfevents.r1").read_bytes() == b"x" * 10
    assert train.upload_tensorboard_files() != []  # skip.txt and the unmangled name
    assert train.upload_tensorboard_files() == []  # nothing changed since


def test_tensorboard_of_the_same_set_is_reused_with_200(master, tmp_path):
    """The second TensorBoard request over the same experiment answers 200 with the live
    task and ``reused`` true; both answers match the declared ``TaskCreated`` model."""
    client, _app = master
    config = (
        "name: tb\nentrypoint: model_def:Trial\nhyperparameters: {global_batch_size: 8}\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 10}}\n"
        f"checkpoint_storage: {{type: shared_fs, host_path: {tmp_path}}}\n"
    )
    r = client.post(
        "/api/v1/experiments",
        data={"config": config},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    first = client.post("/api/v1/tensorboards", data={"experiment_ids": f"[{exp_id}]"})
    assert first.status_code == 201, first.text
    assert first.json()["reused"] is False
    assert first.json()["task"]["experiment_ids"] == [exp_id]
    again = client.post("/api/v1/tensorboards", data={"experiment_ids": f"[{exp_id}]"})
    assert again.status_code == 200, again.text
    assert again.json() == {"task": first.json()["task"], "warnings": [], "reused": True}
    # A notebook (or shell, or command) may name the experiments and trials it covers:
    # kept on the task and shown as links on the Tasks page (issue 38).
    trial_id = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]["id"]
    nb = client.post(
        "/api/v1/notebooks",
        data={"experiment_ids": f"[{exp_id}, {exp_id}]", "trial_ids": f"[{trial_id}]"},
    )
    assert nb.status_code == 201, nb.text
    assert nb.json()["task"]["experiment_ids"] == [exp_id]
    assert nb.json()["task"]["trial_ids"] == [trial_id]
    plain = client.post("/api/v1/shells", data={})
    assert plain.json()["task"]["experiment_ids"] == [] == plain.json()["task"]["trial_ids"]
    r = client.post("/api/v1/notebooks", data={"experiment_ids": "[999]"})
    assert r.status_code == 404 and "experiment 999" in r.json()["detail"]
    r = client.post("/api/v1/commands", data={"entrypoint": '"true"', "trial_ids": '["x"]'})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "trial_ids"
