"""Experiment and trial lifecycle through the REST API, and the checkpoint GC rule."""

from __future__ import annotations

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.gc import CheckpointFacts, GCPolicy, checkpoints_to_delete
from dauntless.master.testing import sign_in

CONFIG = """
name: life
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
"""


@pytest.fixture()
def master(tmp_path, db_url):
    app = create_app(
        MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url), run_loop=False
    )
    with TestClient(app) as client:
        sign_in(client)
        client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]})
        yield client, app.state.ctx, tmp_path


def _start(client, ctx, config=CONFIG):
    exp = client.post("/api/v1/experiments", data={"config": config}).json()["experiment"]
    assert loop.schedule_pass(ctx) == 1
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    return exp["id"], spec


def _checkpoint(client, tmp_path, trial_id, uuid, batches, loss=None):
    d = tmp_path / "checkpoints" / uuid
    d.mkdir(parents=True)
    (d / "state-dict.pth").write_bytes(b"x")
    if loss is not None:
        client.post(
            f"/api/v1/trials/{trial_id}/metrics",
            json={"group": "validation", "steps_completed": batches, "metrics": {"loss": loss}},
        )
    r = client.post(
        "/api/v1/checkpoints",
        json={"uuid": uuid, "trial_id": trial_id, "steps_completed": batches, "resources": {}},
    )
    assert r.status_code == 200
    return d


def _state(client, exp_id):
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    return body["experiment"]["state"], body["trials"][0]["state"]


def test_pause_checkpoints_and_activate_resumes(master):
    client, ctx, tmp = master
    exp_id, spec = _start(client, ctx)
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    assert client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json() == {
        "preempt": False
    }
    r = client.post(f"/api/v1/experiments/{exp_id}/pause")
    assert r.status_code == 200 and r.json()["experiment"]["state"] == "PAUSED"
    assert client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json() == {"preempt": True}
    _checkpoint(client, tmp, tid, "paused-ck", 12)
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 0})
    assert _state(client, exp_id) == ("PAUSED", "ACTIVE")
    assert loop.schedule_pass(ctx) == 0  # a paused experiment's trials wait
    assert client.get(f"/api/v1/trials/{tid}").json()["trial"]["restarts"] == 0
    client.post(f"/api/v1/experiments/{exp_id}/activate")
    assert loop.schedule_pass(ctx) == 1
    spec2 = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    assert spec2["env"]["DET_LATEST_CHECKPOINT"] == "paused-ck"
    assert spec2["env"]["DET_STEPS_COMPLETED"] == "12"
    assert spec2["env"]["DET_TRIAL_RUN_ID"] == "2"


def test_cancel_is_graceful_and_kill_is_immediate(master):
    client, ctx, _ = master
    exp_id, spec = _start(client, ctx)
    client.post(f"/api/v1/experiments/{exp_id}/cancel")
    assert _state(client, exp_id) == ("STOPPING_CANCELED", "STOPPING_CANCELED")
    alloc = spec["allocation_id"]
    assert client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json()["preempt"]
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == []  # graceful: the trial is asked, not killed
    client.post(f"/api/v1/experiments/{exp_id}/kill")
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == [alloc]
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": -15})
    assert _state(client, exp_id) == ("CANCELED", "CANCELED")


def test_cancel_paused_experiment_without_running_trials(master):
    client, ctx, _ = master
    exp = client.post("/api/v1/experiments", data={"config": CONFIG, "activate": "false"}).json()
    exp_id = exp["experiment"]["id"]
    assert exp["experiment"]["state"] == "PAUSED"
    assert loop.schedule_pass(ctx) == 0
    client.post(f"/api/v1/experiments/{exp_id}/cancel")
    assert _state(client, exp_id) == ("CANCELED", "CANCELED")


def test_illegal_requests_answer_409_naming_the_state(master):
    client, ctx, _ = master
    exp_id, spec = _start(client, ctx)
    for action in ("archive", "unarchive"):
        r = client.post(f"/api/v1/experiments/{exp_id}/{action}")
        assert r.status_code == 409 and "ACTIVE" in r.json()["detail"]
    r = client.delete(f"/api/v1/experiments/{exp_id}")
    assert r.status_code == 409 and "ACTIVE" in r.json()["detail"]
    client.post(f"/api/v1/experiments/{exp_id}/kill")
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 1})
    for action in ("pause", "activate", "cancel"):
        r = client.post(f"/api/v1/experiments/{exp_id}/{action}")
        assert r.status_code == 409, action
        assert "CANCELED" in r.json()["detail"] and "allowed" in r.json()["detail"]
    r = client.post(f"/api/v1/trials/{spec['trial_id']}/kill")
    assert r.status_code == 409
    assert client.post(f"/api/v1/experiments/{exp_id}/fly").status_code == 404


def test_archive_hides_and_keeps(master):
    client, ctx, _ = master
    exp_id, spec = _start(client, ctx)
    client.post(f"/api/v1/experiments/{exp_id}/kill")
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 1})
    assert client.post(f"/api/v1/experiments/{exp_id}/archive").json()["experiment"]["archived"]
    assert client.get("/api/v1/experiments").json()["experiments"] == []
    archived = client.get("/api/v1/experiments", params={"archived": "true"}).json()
    assert [e["id"] for e in archived["experiments"]] == [exp_id]
    client.post(f"/api/v1/experiments/{exp_id}/unarchive")
    assert len(client.get("/api/v1/experiments").json()["experiments"]) == 1


def test_trial_kill_tells_the_searcher(master):
    client, ctx, _ = master
    exp_id, spec = _start(client, ctx)
    r = client.post(f"/api/v1/trials/{spec['trial_id']}/kill")
    assert r.json()["trial"]["state"] == "STOPPING_KILLED"
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": -9})
    # The single searcher's only trial ended: the experiment ends too.
    state, trial_state = _state(client, exp_id)
    assert trial_state == "CANCELED" and state in ("COMPLETED", "CANCELED")


def test_gc_policy_and_delete(master):
    client, ctx, tmp = master
    exp_id, spec = _start(client, ctx)
    tid = spec["trial_id"]
    dirs = [
        _checkpoint(client, tmp, tid, f"ck{i}", b, loss)
        for i, (b, loss) in enumerate([(10, 0.5), (20, 0.2), (30, 0.4)])
    ]
    client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 30}, "searcher_metric": 0.4},
    )
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0})
    assert _state(client, exp_id) == ("COMPLETED", "COMPLETED")
    loop.run_gc(ctx)  # defaults keep the trial's best (ck1) and latest (ck2)
    states = {
        c["uuid"]: c["state"]
        for c in client.get(f"/api/v1/experiments/{exp_id}/checkpoints").json()["checkpoints"]
    }
    assert states == {"ck0": "DELETED", "ck1": "COMPLETED", "ck2": "COMPLETED"}
    assert [d.exists() for d in dirs] == [False, True, True]
    r = client.get("/api/v1/checkpoints/ck0/download")
    assert r.status_code == 409
    assert client.get("/api/v1/checkpoints/ck1/download").status_code == 200

    r = client.patch(
        f"/api/v1/experiments/{exp_id}",
        json={
            "checkpoint_storage": {
                "save_experiment_best": 0,
                "save_trial_best": 0,
                "save_trial_latest": 0,
            }
        },
    )
    assert r.status_code == 200
    assert r.json()["experiment"]["config"]["checkpoint_storage"]["save_trial_latest"] == 0
    states = {
        c["uuid"]: c["state"]
        for c in client.get(f"/api/v1/experiments/{exp_id}/checkpoints").json()["checkpoints"]
    }
    assert set(states.values()) == {"DELETED"}
    assert not any(d.exists() for d in dirs)
    r = client.patch(
        f"/api/v1/experiments/{exp_id}", json={"checkpoint_storage": {"save_trial_best": -1}}
    )
    assert r.status_code == 400

    r = client.patch(f"/api/v1/experiments/{exp_id}", json={"name": "renamed", "description": "d"})
    assert r.json()["experiment"]["name"] == "renamed"
    assert client.delete(f"/api/v1/experiments/{exp_id}").status_code == 200
    assert client.get(f"/api/v1/experiments/{exp_id}").status_code == 404
    assert client.get(f"/api/v1/trials/{tid}").status_code == 404


def test_delete_removes_checkpoints_from_storage(master):
    client, ctx, tmp = master
    exp_id, spec = _start(client, ctx)
    d = _checkpoint(client, tmp, spec["trial_id"], "keep-me", 5, 0.3)
    client.post(f"/api/v1/experiments/{exp_id}/kill")
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 1})
    assert d.exists()
    assert client.delete(f"/api/v1/experiments/{exp_id}").status_code == 200
    assert not d.exists()
    assert client.get("/api/v1/checkpoints/keep-me").status_code == 404


def _facts(*rows):
    return [CheckpointFacts(u, t, b, m) for u, t, b, m in rows]


def test_gc_rule_defaults_keep_best_and_latest_per_trial():
    facts = _facts(
        ("a", 1, 10, 0.9),
        ("b", 1, 20, 0.1),
        ("c", 1, 30, 0.5),
        ("d", 2, 10, 0.3),
        ("e", 2, 20, None),
    )
    assert checkpoints_to_delete(facts, GCPolicy(), smaller_is_better=True) == {"a"}
    # Larger is better flips which is best.
    assert checkpoints_to_delete(facts, GCPolicy(), smaller_is_better=False) == {"b"}


def test_gc_rule_experiment_best_and_zeros():
    facts = _facts(("a", 1, 10, 0.9), ("b", 1, 20, 0.1), ("d", 2, 10, 0.3), ("e", 2, 20, 0.2))
    keep_two = GCPolicy(save_experiment_best=2, save_trial_best=0, save_trial_latest=0)
    assert checkpoints_to_delete(facts, keep_two, True) == {"a", "d"}
    zeros = GCPolicy(0, 0, 0)
    assert checkpoints_to_delete(facts, zeros, True) == {"a", "b", "d", "e"}
    with pytest.raises(ValueError, match="save_trial_best"):
        GCPolicy(save_trial_best=-1)


@pytest.mark.parametrize("first", ["pause", "cancel", "kill", "complete"])
def test_every_action_in_every_state_is_2xx_or_409_never_500(tmp_path, first):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        sign_in(client)
        ctx = app.state.ctx
        client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]})
        exp_id, spec = _start(client, ctx)
        if first == "complete":
            tid = spec["trial_id"]
            client.post(
                f"/api/v1/trials/{tid}/searcher/completed_operation",
                json={"op": {"length": 30}, "searcher_metric": 1.0},
            )
            client.post(
                f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0}
            )
        else:
            client.post(f"/api/v1/experiments/{exp_id}/{first}")
        actions = ["pause", "activate", "cancel", "kill", "archive", "unarchive"]
        for a in actions + actions[::-1]:
            r = client.post(f"/api/v1/experiments/{exp_id}/{a}")
            assert r.status_code in (200, 409), (first, a, r.status_code, r.text)
            if r.status_code == 409:
                assert "allowed" in r.json()["detail"] or "can be" in r.json()["detail"]
        r = client.post(f"/api/v1/trials/{spec['trial_id']}/kill")
        assert r.status_code in (200, 409), r.text
        r = client.post(
            f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0}
        )
        assert r.status_code == 200
        r = client.delete(f"/api/v1/experiments/{exp_id}")
        assert r.status_code in (200, 409), r.text


def test_trial_that_finishes_its_work_while_the_experiment_pauses(master):
    """The pause reaches the trial after it trained its whole length: it validates,
    completes its operation and exits 0 as preempted. Its exit is recorded (no 409 the
    agent would retry forever), and the experiment, with nothing left to resume,
    completes."""
    client, ctx, tmp = master
    exp_id, spec = _start(client, ctx)
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    r = client.post(f"/api/v1/experiments/{exp_id}/pause")
    assert r.status_code == 200 and r.json()["experiment"]["state"] == "PAUSED"
    _checkpoint(client, tmp, tid, "last-ck", 30, loss=0.5)
    r = client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 30}, "searcher_metric": 0.5},
    )
    assert r.status_code == 200, r.text
    r = client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 0})
    assert r.status_code == 200, r.text
    assert _state(client, exp_id) == ("COMPLETED", "COMPLETED")
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["progress"] == 1.0 and body["experiment"]["end_time"]
    assert loop.schedule_pass(ctx) == 0
