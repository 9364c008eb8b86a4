"""Determined 0.38 configs on the master's API (in-process): create warnings and
refusals, type-less checkpoint storage, warm start, ASHA stopping from reported
validation metrics, continue and fork."""

from __future__ import annotations

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

SCRIPT = """
name: script
entrypoint: python3 train.py
hyperparameters:
  lr: 0.1
searcher:
  name: single
  metric: loss
"""


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


def _create(client, config, **data):
    files = {"context": ("context.tar.gz", model_def_tarball(), "application/gzip")}
    return client.post("/api/v1/experiments", data={"config": config, **data}, files=files)


def _start(client, ctx, n=1):
    r = client.post(
        "/api/v1/agents",
        json={"id": "a1", "slots": [{"id": f"cpu{i}", "type": "cpu"} for i in range(n)]},
    )
    assert r.status_code == 200, r.text
    loop.schedule_pass(ctx)
    return client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]


def _validate(client, trial_id, steps, metrics):
    r = client.post(
        f"/api/v1/trials/{trial_id}/metrics",
        json={
            "group": "validation",
            "steps_completed": steps,
            "trial_run_id": 1,
            "metrics": metrics,
        },
    )
    assert r.status_code == 200, r.text


def _preempt(client, alloc):
    return client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json()["preempt"]


def test_038_single_without_max_length_runs_until_the_trial_exits(master):
    client, ctx = master
    r = _create(client, SCRIPT)
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == []
    exp = r.json()["experiment"]
    (spec,) = _start(client, ctx)
    tid = spec["trial_id"]
    # No searcher operation: the trial's code decides its length.
    op = client.get(f"/api/v1/trials/{tid}/searcher/operation").json()
    assert op == {"op": None, "completed": False}
    _validate(client, tid, 7, {"loss": 0.5})
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0})
    body = client.get(f"/api/v1/experiments/{exp['id']}").json()
    assert body["experiment"]["state"] == "COMPLETED"
    assert body["trials"][0]["state"] == "COMPLETED"


def test_create_answers_warnings_for_deprecated_and_ignored_fields(master):
    client, _ = master
    config = SCRIPT.replace("  metric: loss\n", "  metric: loss\n  max_length: {batches: 4}\n")
    config += "tensorboard_storage: {type: shared_fs}\nscheduling_unit: 5\n"
    r = _create(client, config)
    assert r.status_code == 201, r.text
    fields = sorted(w.split(":")[0] for w in r.json()["warnings"])
    assert fields == ["scheduling_unit", "searcher.max_length", "tensorboard_storage"]


def test_fields_that_cannot_be_honoured_are_refused_by_name(master):
    client, _ = master
    r = _create(client, SCRIPT + "environment: {pod_spec: {spec: {}}}\n")
    assert r.status_code == 400
    (err,) = r.json()["errors"]
    assert err["field"] == "environment.pod_spec" and "Kubernetes" in err["message"]
    assert client.get("/api/v1/experiments").json()["total"] == 0


def test_checkpoint_storage_without_type_takes_the_default(master, tmp_path):
    client, ctx = master
    r = _create(client, SCRIPT + "checkpoint_storage: {save_trial_best: 3}\n")
    assert r.status_code == 201, r.text
    storage = r.json()["experiment"]["config"]["checkpoint_storage"]
    assert storage["type"] == "shared_fs" and storage["host_path"] == str(tmp_path)
    assert storage["save_trial_best"] == 3


def test_warm_start_source_must_exist_and_starts_every_trial(master):
    client, ctx = master
    for field, value in (("source_trial_id", 999), ("source_checkpoint_uuid", "nope")):
        config = SCRIPT.replace("  metric: loss\n", f"  metric: loss\n  {field}: {value}\n")
        r = _create(client, config)
        assert r.status_code == 400, r.text
        assert r.json()["errors"][0]["field"] == f"searcher.{field}"
    # A source trial with a checkpoint.
    exp = _create(client, SCRIPT).json()["experiment"]
    (spec,) = _start(client, ctx)
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": "src-ckpt",
            "trial_id": spec["trial_id"],
            "allocation_id": spec["allocation_id"],
            "steps_completed": 5,
            "resources": {"state_dict.pth": 1},
            "metadata": {"steps_completed": 5},
        },
    )
    assert r.status_code == 200, r.text
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0})
    assert client.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]["state"] == (
        "COMPLETED"
    )
    warm = SCRIPT.replace(
        "  metric: loss\n",
        f"  metric: loss\n  source_trial_id: {spec['trial_id']}\n",
    ).replace("name: single", "name: random\n  max_trials: 2")
    r = _create(client, warm)
    assert r.status_code == 201, r.text
    assert r.json()["experiment"]["config"]["searcher"]["source_checkpoint_uuid"] == "src-ckpt"
    loop.schedule_pass(ctx)
    r = client.post("/api/v1/agents", json={"id": "a2", "slots": [{"id": "x", "type": "cpu"}]})
    loop.schedule_pass(ctx)
    started = client.post("/api/v1/agents/a2/heartbeat", json={"running": []}).json()["start"]
    assert started and all(s["env"]["DET_LATEST_CHECKPOINT"] == "src-ckpt" for s in started)
    assert all(s["env"]["DET_STEPS_COMPLETED"] == "0" for s in started)


def test_asha_038_stops_a_running_trial_through_preemption(master):
    client, ctx = master
    config = """
entrypoint: python3 train.py
hyperparameters:
  lr: {type: double, minval: 0, maxval: 1}
searcher:
  name: adaptive_asha
  metric: loss
  max_trials: 2
  max_time: 4
  time_metric: epochs
  divisor: 2
  mode: aggressive
  max_concurrent_trials: 2
"""
    r = _create(client, config)
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    a, b = sorted(_start(client, ctx, 2), key=lambda s: s["trial_id"])
    _validate(client, a["trial_id"], 10, {"loss": 0.1, "epochs": 2})
    assert not _preempt(client, a["allocation_id"])
    _validate(client, b["trial_id"], 10, {"loss": 0.9, "epochs": 2})
    # b is in the bottom half of rung 0: the searcher stops it via the preemption path.
    assert _preempt(client, b["allocation_id"]) and not _preempt(client, a["allocation_id"])
    client.post(f"/api/v1/allocations/{b['allocation_id']}/exited", json={"exit_code": 0})
    trials = {
        t["id"]: t for t in client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    }
    assert trials[b["trial_id"]]["state"] == "COMPLETED"
    assert trials[b["trial_id"]]["searcher_closed"] is True
    _validate(client, a["trial_id"], 20, {"loss": 0.05, "epochs": 4})
    assert _preempt(client, a["allocation_id"])  # top rung: done
    client.post(f"/api/v1/allocations/{a['allocation_id']}/exited", json={"exit_code": 0})
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] == "COMPLETED"


def test_asha_038_missing_time_metric_errors_the_experiment(master):
    client, ctx = master
    config = """
entrypoint: python3 train.py
searcher: {name: adaptive_asha, metric: loss, max_trials: 1, max_time: 4, time_metric: my_time}
"""
    exp_id = _create(client, config).json()["experiment"]["id"]
    (spec,) = _start(client, ctx)
    _validate(client, spec["trial_id"], 3, {"loss": 0.3})
    exp = client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert exp["state"] in ("STOPPING_ERROR", "ERROR")
    logs = client.get(f"/api/v1/trials/{spec['trial_id']}/logs").json()["logs"]
    assert any("searcher error" in x["log"] and "'my_time'" in x["log"] for x in logs), logs
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": -9})
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] == "ERROR"


def test_continue_and_fork(master):
    client, ctx = master
    config = SCRIPT.replace("  metric: loss\n", "  metric: loss\n  max_length: {batches: 5}\n")
    exp_id = _create(client, config).json()["experiment"]["id"]
    (spec,) = _start(client, ctx)
    tid = spec["trial_id"]
    client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 5}, "searcher_metric": 0.5},
    )
    r = client.post("/api/v1/experiments/continue", json={"id": exp_id})
    assert r.status_code == 409  # not finished yet
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0})
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] == "COMPLETED"
    r = client.post(
        "/api/v1/experiments/continue",
        json={"id": exp_id, "overrideConfig": "searcher: {max_length: {batches: 9}}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["experiment"]["state"] == "ACTIVE"
    op = client.get(f"/api/v1/trials/{tid}/searcher/operation").json()
    assert op == {"op": {"length": 9}, "completed": False}
    bad = client.post(
        "/api/v1/experiments/continue", json={"id": exp_id, "overrideConfig": "searcher: 3"}
    )
    assert bad.status_code in (400, 409)
    assert client.post("/api/v1/experiments/continue", json={"id": 999}).status_code == 404
    # Ids beyond what the database stores are refused, not a 500 (found by schemathesis).
    assert client.post("/api/v1/experiments/continue", json={"id": 2**70}).status_code == 400
    assert client.put(f"/api/v1/experiments/{2**70}/labels/x").status_code == 400
    assert client.get("/api/v1/tasks/t/logs", params={"after_id": 2**70}).status_code == 400

    # Fork: parent_id reuses the parent's model definition.
    r = client.post(
        "/api/v1/experiments",
        data={"config": config.replace("lr: 0.1", "lr: 0.2"), "parent_id": exp_id},
    )
    assert r.status_code == 201, r.text
    child = r.json()["experiment"]["id"]
    md = client.get(f"/api/v1/experiments/{child}/model_def")
    assert md.status_code == 200 and md.content == model_def_tarball()
    r = client.post("/api/v1/experiments", data={"config": config, "parent_id": 999})
    assert r.status_code == 404


def test_validate_only_refuses_and_warns_like_create(master):
    client, _ = master
    r = client.post(
        "/api/v1/experiments",
        data={
            "config": SCRIPT + "resources: {is_single_node: true}\n",
            "validate_only": "true",
        },
    )
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "resources.is_single_node"
    r = client.post(
        "/api/v1/experiments",
        data={"config": SCRIPT + "data_layer: {type: shared_fs}\n", "validate_only": "true"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["experiment"] is None
    assert [w.split(":")[0] for w in r.json()["warnings"]] == ["data_layer"]
    assert client.get("/api/v1/experiments").json()["total"] == 0


def test_continue_asha_reopens_an_errored_trial(master):
    client, ctx = master
    config = """
entrypoint: python3 train.py
searcher: {name: adaptive_asha, metric: loss, max_trials: 1, max_time: 4, time_metric: epochs}
max_restarts: 0
"""
    exp_id = _create(client, config).json()["experiment"]["id"]
    (spec,) = _start(client, ctx)
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 1})
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] == "ERROR"
    r = client.post("/api/v1/experiments/continue", json={"id": exp_id})
    assert r.status_code == 200, r.text
    loop.schedule_pass(ctx)
    (again,) = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]
    assert again["trial_id"] == spec["trial_id"]
    _validate(client, spec["trial_id"], 8, {"loss": 0.2, "epochs": 4})
    assert _preempt(client, again["allocation_id"])  # the top rung: done
    client.post(f"/api/v1/allocations/{again['allocation_id']}/exited", json={"exit_code": 0})
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] == "COMPLETED"
    assert body["trials"][0]["state"] == "COMPLETED"
