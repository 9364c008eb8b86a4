"""Durable checkpoint GC: decided in the database (DELETING), carried out after a master
restart, and retried with backoff while the store fails."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from object_stores import list_keys, start_fake_gcs

from dauntless.config import MasterConfig
from dauntless.master import checkpoint_gc, loop
from dauntless.master.app import create_app
from dauntless.master.testing import sign_in
from dauntless.storage import GCSStorageManager

CONFIG = """
name: gc
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
"""


def _client(tmp_path):
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    return app, TestClient(app)


def _run_trial(client, ctx, config, checkpoints):
    """Create an experiment, report checkpoints ``[(uuid, batches, loss)]`` and end its
    trial COMPLETED; returns the experiment id."""
    exp = client.post("/api/v1/experiments", data={"config": config}).json()["experiment"]
    assert loop.schedule_pass(ctx) == 1
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    tid = spec["trial_id"]
    for uuid, batches, loss in checkpoints:
        client.post(
            f"/api/v1/trials/{tid}/metrics",
            json={"group": "validation", "steps_completed": batches, "metrics": {"loss": loss}},
        )
        r = client.post(
            "/api/v1/checkpoints",
            json={"uuid": uuid, "trial_id": tid, "steps_completed": batches, "resources": {}},
        )
        assert r.status_code == 200
    client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 30}, "searcher_metric": checkpoints[-1][2]},
    )
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 0})
    return exp["id"]


def _states(client, exp_id):
    rows = client.get(f"/api/v1/experiments/{exp_id}/checkpoints").json()["checkpoints"]
    return {c["uuid"]: c["state"] for c in rows}


def test_gc_due_when_the_master_died_runs_after_it_starts(tmp_path):
    app, client = _client(tmp_path)
    with client:
        sign_in(client)
        client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]})
        for uuid in ("ck0", "ck1", "ck2"):
            d = tmp_path / "checkpoints" / uuid
            d.mkdir(parents=True)
            (d / "state-dict.pth").write_bytes(b"x")
        exp_id = _run_trial(
            client,
            app.state.ctx,
            CONFIG,
            [("ck0", 10, 0.5), ("ck1", 20, 0.2), ("ck2", 30, 0.4)],
        )
        # The trial ended, so GC is due; the master dies before its loop runs it.
        assert _states(client, exp_id) == {
            "ck0": "COMPLETED",
            "ck1": "COMPLETED",
            "ck2": "COMPLETED",
        }
    app, client = _client(tmp_path)  # a new master process on the same database
    with client:
        sign_in(client)
        loop.run_gc(app.state.ctx)
        assert _states(client, exp_id) == {"ck0": "DELETED", "ck1": "COMPLETED", "ck2": "COMPLETED"}
    assert not (tmp_path / "checkpoints" / "ck0").exists()
    assert (tmp_path / "checkpoints" / "ck1").exists()


def test_delete_is_retried_until_the_store_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_gc, "RETRY_BASE_SECONDS", 0.2)
    try:
        server = start_fake_gcs(tmp_path / "store")
    except Exception as exc:  # StoreUnavailable or a missing client library
        pytest.skip(f"fake-gcs-server cannot start here: {exc}")
    port = int(server.endpoint.rsplit(":", 1)[1])
    storage_cfg = server.storage()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.endpoint)
    store = GCSStorageManager(storage_cfg["bucket"])
    for uuid in ("g0", "g1"):
        with store.store_path(uuid) as path:
            (path / "state-dict.pth").write_bytes(b"w" * 100)
    config = CONFIG + f"checkpoint_storage: {{type: gcs, bucket: {storage_cfg['bucket']}}}\n"
    app, client = _client(tmp_path / "master")
    try:
        with client:
            sign_in(client)
            ctx = app.state.ctx
            # The retries wait on the manager's clock, which the test moves itself.
            now = [time.time()]
            monkeypatch.setattr(ctx, "clock", lambda: now[0])
            client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]})
            server.stop()  # the store is down when GC runs
            monkeypatch.setattr("dauntless.storage._object.MAX_ATTEMPTS", 1)
            monkeypatch.setattr("dauntless.storage._object.READ_TIMEOUT", 1.0)
            exp_id = _run_trial(client, ctx, config, [("g0", 10, 0.5), ("g1", 20, 0.2)])
            loop.run_gc(ctx)
            assert _states(client, exp_id) == {"g0": "DELETING", "g1": "COMPLETED"}
            assert ctx.deletions.retries["g0"].failures >= 1
            server = start_fake_gcs(tmp_path / "store", port=port)  # back, same objects
            assert list_keys(server, storage_cfg) == ["g0/state-dict.pth", "g1/state-dict.pth"]
            ctx.deletions.process()  # its backoff has not passed: not tried again yet
            assert _states(client, exp_id) == {"g0": "DELETING", "g1": "COMPLETED"}
            now[0] += 3600.0  # past any backoff
            ctx.deletions.process()
            assert _states(client, exp_id) == {"g0": "DELETED", "g1": "COMPLETED"}
            assert list_keys(server, storage_cfg) == ["g1/state-dict.pth"]
    finally:
        server.stop()
