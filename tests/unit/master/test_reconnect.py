"""An agent that reconnects after a master outage keeps its tasks (issue 18, scope 1)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

CONFIG = """
name: reconnect
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
max_restarts: 0
"""


@pytest.fixture()
def master(tmp_path, db_url):
    app = create_app(
        MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url), run_loop=False
    )
    with TestClient(app) as client:
        sign_in(client)
        client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]})
        yield client, app.state.ctx


def _start(client, ctx) -> dict:
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx) == 1
    return client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]


def test_reregistering_agent_keeps_the_tasks_it_reports(master):
    client, ctx = master
    spec = _start(client, ctx)
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    r = client.post(
        "/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}], "running": [alloc]}
    )
    assert r.status_code == 200
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [alloc]}).json()
    assert hb == {"start": [], "kill": [], "agent_timeout": ctx.config.agent_timeout}
    trial = client.get(f"/api/v1/trials/{tid}").json()["trial"]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 0
    assert client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json() == {
        "preempt": False
    }


def test_reregistering_agent_without_the_task_loses_it_and_unknown_ones_are_killed(master):
    client, ctx = master
    spec = _start(client, ctx)
    tid = spec["trial_id"]
    r = client.post(
        "/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}], "running": ["stray"]}
    )
    assert r.status_code == 200
    trial = client.get(f"/api/v1/trials/{tid}").json()["trial"]
    assert trial["restarts"] == 1 and trial["state"] == "ERROR"  # max_restarts: 0
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": ["stray"]}).json()
    assert hb["kill"] == ["stray"]


def test_ids_of_deleted_experiments_and_trials_are_never_reused(master):
    client, ctx = master
    spec = _start(client, ctx)
    exp_id, tid = int(spec["experiment_id"]), spec["trial_id"]
    client.post(f"/api/v1/experiments/{exp_id}/kill")
    client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": -9})
    assert client.delete(f"/api/v1/experiments/{exp_id}").status_code == 200
    spec2 = _start(client, ctx)
    assert int(spec2["experiment_id"]) > exp_id and spec2["trial_id"] > tid


def test_migration_0004_keeps_rows_and_foreign_keys(tmp_path):
    """Upgrading a SQLite database with data from 0003 rebuilds experiments and trials
    with AUTOINCREMENT and keeps every row (no cascade through the rebuilt tables)."""
    from alembic import command
    from sqlalchemy import text

    from dauntless.master.db.engine import _alembic_config, make_engine, upgrade

    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    command.upgrade(_alembic_config(engine), "0003")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO experiments (id, name, state, archived, owner, config, "
                "original_config, seed, searcher_shutdown, progress, start_time) VALUES "
                "(5, 'e', 'COMPLETED', 0, 'determined', '{}', '', 1, 0, 1.0, 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO trials (id, experiment_id, request_id, state, hparams, seed, "
                "restarts, run_id, total_batches, searcher_closed, start_time) VALUES "
                "(9, 5, 'r', 'COMPLETED', '{}', 1, 0, 1, 10, 1, 0)"
            )
        )
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM trials")).scalars().all() == [9]
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name='trials'")).scalar()
        assert "AUTOINCREMENT" in ddl
        conn.execute(text("DELETE FROM experiments WHERE id = 5"))  # cascades to trials
        assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 0
    engine.dispose()


def test_ids_out_of_range_wrong_methods_and_trial_internals(master):
    """Ids beyond the stored range answer 400 (never 500), a wrong method 405, and a
    trial's internals only its token and admins."""
    from dauntless.master.testing import bearer, login

    client, ctx = master
    spec = _start(client, ctx)
    huge = str(2**70)
    for path in (
        f"/api/v1/experiments/{huge}",
        f"/api/v1/trials/{huge}",
        f"/api/v1/trials/{2**31}/metrics",
        f"/api/v1/trials/1/logs?after_id={huge}",
        f"/api/v1/experiments?offset={huge}",
        f"/api/v1/allocations?trial_id={huge}",
    ):
        r = client.get(path)
        assert r.status_code == 400, (path, r.status_code, r.text)
    r = client.post(
        "/api/v1/trials/1/metrics",
        json={"group": "training", "steps_completed": 2**40, "metrics": {}},
    )
    assert r.status_code == 400 and "steps_completed" in r.text
    r = client.get("/api/v1/agents/a1/heartbeat")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = client.delete("/api/v1/master")
    assert r.status_code == 405
    r = client.post(f"/api/v1/experiments/{spec['experiment_id']}/trials")
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    # A second, ordinary user.
    assert (
        client.post("/api/v1/users", json={"username": "bob", "password": "pw"}).status_code == 201
    )
    bob = bearer(login(client, "bob", "pw"))
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    for path in (
        f"/api/v1/trials/{tid}/searcher/operation",
        f"/api/v1/allocations/{alloc}/signals/preemption",
        f"/api/v1/allocations/{alloc}/rendezvous",
    ):
        assert client.get(path, headers=bob).status_code == 403, path
        assert client.get(path).status_code == 200, path  # the admin
        token = spec["env"]["DET_SESSION_TOKEN"]
        assert client.get(path, headers=bearer(token)).status_code == 200, path
    assert client.get("/api/v1/allocations", headers=bob).json() == {"allocations": []}
    mine = client.get("/api/v1/allocations", headers=bearer(spec["env"]["DET_SESSION_TOKEN"]))
    assert [a["id"] for a in mine.json()["allocations"]] == [alloc]
    assert len(client.get("/api/v1/allocations").json()["allocations"]) == 1


def _agent(client) -> dict:
    (agent,) = [a for a in client.get("/api/v1/agents").json()["agents"] if a["id"] == "a1"]
    return agent


def test_heartbeat_without_a_running_part_ends_it_only_after_the_grace(master):
    """Most heartbeats change nothing and write only the agent's beat (issue 37); one
    that leaves out a part older than LOST_ALLOCATION_GRACE still ends it."""
    from dauntless.master.models.agents import LOST_ALLOCATION_GRACE

    client, ctx = master
    t0 = ctx.clock()
    ctx.clock = lambda: t0
    spec = _start(client, ctx)
    alloc, tid = spec["allocation_id"], spec["trial_id"]
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [alloc]}).json()
    assert (hb["start"], hb["kill"]) == ([], [])
    agent = _agent(client)
    assert agent["last_heartbeat"] == t0 and agent["state"] == "ACTIVE"
    # Within the grace the agent may simply not have started it yet: nothing happens.
    ctx.clock = lambda: t0 + LOST_ALLOCATION_GRACE / 2
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()
    assert (hb["start"], hb["kill"]) == ([], [])
    assert client.get(f"/api/v1/trials/{tid}").json()["trial"]["restarts"] == 0
    assert _agent(client)["last_heartbeat"] == t0 + LOST_ALLOCATION_GRACE / 2
    ctx.clock = lambda: t0 + LOST_ALLOCATION_GRACE + 1
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()
    assert (hb["start"], hb["kill"]) == ([], [])
    trial = client.get(f"/api/v1/trials/{tid}").json()["trial"]
    assert trial["restarts"] == 1 and trial["state"] == "ERROR"  # max_restarts: 0
    # Reported again afterwards, the ended part is killed.
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == [alloc]
