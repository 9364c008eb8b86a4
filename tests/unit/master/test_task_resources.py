"""Per-task resource use (issue 34 scope 3): an agent's samples of its tasks' process
trees ride on its heartbeat; the master keeps those of allocations placed on that agent,
one per allocation per 10 s, and ``GET /tasks/{id}/resource_metrics`` gives them with
the task's memory request and the over-request flag."""

from __future__ import annotations

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.models.task_resources import SAMPLE_BUCKET_SECONDS
from dauntless.master.testing import register_agent, sign_in


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18082), run_loop=False)
    with TestClient(app) as client:
        sign_in(client, "determined")
        yield client, app


def _running_notebook(client, app, memory: str | None) -> tuple[str, str, dict]:
    config = "resources: {slots: 0" + (f", memory: {memory}" if memory else "") + "}"
    r = client.post("/api/v1/commands", data={"entrypoint": '["sleep", "60"]', "config": config})
    assert r.status_code == 201, r.text
    task_id = r.json()["task"]["id"]
    agent = register_agent(client, app, {"id": "a1", "slots": [{"id": "cpu0", "type": "cpu"}]})
    assert loop.schedule_pass(app.state.ctx) == 1
    work = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=agent).json()
    (spec,) = work["start"]
    return task_id, spec["allocation_id"], agent


def _sample(alloc: str, rss: int, cpu: float | None = 50.0) -> dict:
    return {
        "allocation_id": alloc,
        "cpu_percent": cpu,
        "rss_bytes": rss,
        "gpu_memory_bytes": None,
        "processes": 2,
    }


def test_samples_are_stored_bounded_and_flag_use_above_the_request(master):
    client, app = master
    ctx = app.state.ctx
    task_id, alloc, agent = _running_notebook(client, app, "100M")
    now = [2_000_000.0]
    ctx.clock = lambda: now[0]
    beat = "/api/v1/agents/a1/heartbeat"
    # Three samples within one 10-second bucket, then one in the next: two rows.
    for t, rss in (
        (0.0, 10 << 20),
        (3.0, 20 << 20),
        (9.0, 30 << 20),
        (SAMPLE_BUCKET_SECONDS, 50 << 20),
    ):
        now[0] = 2_000_000.0 + t
        body = {"running": [alloc], "resources": [_sample(alloc, rss), _sample("nope.1", 1)]}
        assert client.post(beat, json=body, headers=agent).status_code == 200
    got = client.get(f"/api/v1/tasks/{task_id}/resource_metrics").json()
    assert [s["rss_bytes"] for s in got["samples"]] == [30 << 20, 50 << 20]
    assert got["memory_request_bytes"] == 100 << 20
    assert got["over_request"] is False and got["peak_rss_bytes"] == 50 << 20
    assert got["latest"]["agent_id"] == "a1" and got["latest"]["processes"] == 2
    now[0] += SAMPLE_BUCKET_SECONDS
    body = {"running": [alloc], "resources": [_sample(alloc, 150 << 20)]}
    assert client.post(beat, json=body, headers=agent).status_code == 200
    got = client.get(f"/api/v1/tasks/{task_id}/resource_metrics").json()
    assert got["over_request"] is True and got["latest"]["rss_bytes"] == 150 << 20
    page = client.get(
        f"/api/v1/tasks/{task_id}/resource_metrics", params={"after_id": 0, "limit": 1}
    ).json()
    assert len(page["samples"]) == 1 and page["next_after_id"] == page["samples"][0]["id"]


def test_another_agent_cannot_report_for_a_task_not_on_it(master):
    client, app = master
    task_id, alloc, _ = _running_notebook(client, app, None)
    other = register_agent(client, app, {"id": "a2", "slots": [{"id": "cpu0", "type": "cpu"}]})
    body = {"running": [], "resources": [_sample(alloc, 1 << 30)]}
    assert client.post("/api/v1/agents/a2/heartbeat", json=body, headers=other).status_code == 200
    got = client.get(f"/api/v1/tasks/{task_id}/resource_metrics").json()
    assert got["samples"] == [] and got["latest"] is None
    assert got["memory_request_bytes"] is None and got["over_request"] is False


def test_bad_samples_and_requests_are_refused(master):
    client, app = master
    task_id, alloc, agent = _running_notebook(client, app, None)
    bad = {"running": [alloc], "resources": [{**_sample(alloc, 1), "rss_bytes": -1}]}
    r = client.post("/api/v1/agents/a1/heartbeat", json=bad, headers=agent)
    assert r.status_code == 400 and "rss_bytes" in r.text
    assert client.get("/api/v1/tasks/nope/resource_metrics").status_code == 404
    r = client.post(
        "/api/v1/commands",
        data={"entrypoint": '["true"]', "config": "resources: {memory: lots}"},
    )
    assert r.status_code == 400 and "resources.memory" in r.text


def test_an_ended_tasks_samples_go_with_its_logs_at_retention(master):
    import time

    from dauntless.master.models.operations import delete_expired_logs

    client, app = master
    task_id, alloc, agent = _running_notebook(client, app, None)
    body = {"running": [alloc], "resources": [_sample(alloc, 1 << 20)]}
    assert client.post("/api/v1/agents/a1/heartbeat", json=body, headers=agent).status_code == 200
    url = f"/api/v1/tasks/{task_id}/resource_metrics"
    assert len(client.get(url).json()["samples"]) == 1
    r = client.post(
        f"/api/v1/allocations/{alloc}/exited",
        json={"exit_code": 0, "message": None},
        headers=agent,
    )
    assert r.status_code == 200, r.text
    db = app.state.ctx.db
    delete_expired_logs(db, time.time() + 86400, default_days=2)  # not yet
    assert len(client.get(url).json()["samples"]) == 1
    delete_expired_logs(db, time.time() + 3 * 86400, default_days=2)
    assert client.get(url).json()["samples"] == []
