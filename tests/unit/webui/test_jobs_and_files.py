"""The job queue (``GET /job-queues``, ``PATCH /jobs/{id}``, ``det job``) and the model
definition's files one by one, on a real master in-process."""

from __future__ import annotations

import io
import tarfile

import httpx
import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.cli import main
from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.models import metrics
from dauntless.master.testing import bearer, login, serve, sign_in

CONFIG = """
name: {name}
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
  lr: {{type: double, minval: 0.001, maxval: 0.1}}
searcher:
  name: random
  metric: accuracy
  smaller_is_better: false
  max_trials: 3
  max_length: {{batches: 1000}}
resources: {resources}
"""


def _context() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("model_def.py", b"print('hi')\n"), ("data/blob.bin", b"\xff\xfe\x00")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18082), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app


def _create(client, name: str, resources: str = "{}") -> int:
    files = {"context": ("context.tar.gz", _context(), "application/gzip")}
    config = CONFIG.format(name=name, resources=resources)
    r = client.post("/api/v1/experiments", data={"config": config}, files=files)
    assert r.status_code == 201, r.text
    return r.json()["experiment"]["id"]


def _jobs(client, **params):
    r = client.get("/api/v1/job-queues", params=params)
    assert r.status_code == 200, r.text
    return r.json()["jobs"]


def test_queue_order_priority_updates_and_refusals(master):
    client, app = master
    first = _create(client, "first")
    second = _create(client, "second", "{priority: 10}")
    jobs = _jobs(client)
    assert [j["job_id"] for j in jobs] == [f"experiment-{second}", f"experiment-{first}"]
    assert [j["queue_position"] for j in jobs] == [1, 2]
    j1 = jobs[1]
    assert (j1["priority"], j1["effective_priority"], j1["weight"]) == (None, 42, 1.0)
    assert (j1["requested_slots"], j1["allocated_slots"], j1["state"]) == (3, 0, "QUEUED")
    assert j1["resource_pool"] == "default" and j1["type"] == "EXPERIMENT"

    r = client.patch(f"/api/v1/jobs/experiment-{first}", json={"priority": 5})
    assert r.status_code == 200, r.text
    assert r.json()["job"]["queue_position"] == 1
    assert [j["job_id"] for j in _jobs(client)][0] == f"experiment-{first}"
    config = client.get(f"/api/v1/experiments/{first}").json()["experiment"]["config"]
    assert config["resources"]["priority"] == 5

    r = client.patch(f"/api/v1/jobs/experiment-{first}", json={"weight": 2})
    assert r.status_code == 400 and "weight" in r.text, r.text
    r = client.patch(f"/api/v1/jobs/experiment-{first}", json={"weight": 2, "priority": 3})
    assert r.status_code == 400 and "priority" in r.text, r.text
    r = client.patch(f"/api/v1/jobs/experiment-{first}", json={"priority": 100})
    assert r.status_code == 400 and "priority" in r.text, r.text
    assert client.patch("/api/v1/jobs/experiment-999", json={"priority": 3}).status_code == 404
    assert client.get("/api/v1/job-queues", params={"resource_pool": "gpu"}).status_code == 404

    # Another user may read the queue but not reorder someone else's job.
    r = client.post("/api/v1/users", json={"username": "bob", "password": "pw-bob-123"})
    assert r.status_code == 201, r.text
    bob = bearer(login(client, "bob", "pw-bob-123"))
    assert client.get("/api/v1/job-queues", headers=bob).status_code == 200
    r = client.patch(f"/api/v1/jobs/experiment-{first}", json={"priority": 1}, headers=bob)
    assert r.status_code == 403, r.text

    # Once placed, the job is SCHEDULED and holds its slot; paused, it leaves the queue.
    r = client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0", "type": "cpu"}]})
    assert r.status_code == 200, r.text
    loop.schedule_pass(app.state.ctx)
    head = _jobs(client)[0]
    assert (head["job_id"], head["state"], head["allocated_slots"]) == (
        f"experiment-{first}",
        "SCHEDULED",
        1,
    )
    assert client.post(f"/api/v1/experiments/{second}/pause").status_code == 200
    assert [j["job_id"] for j in _jobs(client)] == [f"experiment-{first}"]


def test_task_job_priority_update(master):
    """A queued command is a job of its own; its priority is stored in the task's config,
    and the loop is woken for a new placement."""
    client, app = master
    task = client.post("/api/v1/commands", data={"entrypoint": '"sleep 100"'}).json()["task"]
    job_id = f"task-{task['id']}"
    [job] = [j for j in _jobs(client) if j["job_id"] == job_id]
    assert (job["type"], job["state"], job["priority"]) == ("COMMAND", "QUEUED", None)
    app.state.ctx.wake.clear()
    r = client.patch(f"/api/v1/jobs/{job_id}", json={"priority": 7})
    assert r.status_code == 200, r.text
    assert (r.json()["job"]["priority"], r.json()["job"]["effective_priority"]) == (7, 7)
    assert app.state.ctx.wake.is_set()
    [job] = [j for j in _jobs(client) if j["job_id"] == job_id]
    assert job["priority"] == 7
    r = client.patch("/api/v1/jobs/task-nope", json={"priority": 3})
    assert r.status_code == 404 and "task-nope" in r.text, r.text


def test_model_def_tree_and_files(master):
    client, _app = master
    exp = _create(client, "files")
    r = client.get(f"/api/v1/experiments/{exp}/model_def/tree")
    assert r.status_code == 200, r.text
    files = {f["path"]: f for f in r.json()["files"]}
    assert files["model_def.py"] == {"path": "model_def.py", "size": 12, "type": "file"}
    assert files["data/blob.bin"]["size"] == 3
    r = client.get(f"/api/v1/experiments/{exp}/model_def/file", params={"path": "model_def.py"})
    assert r.status_code == 200 and r.text == "print('hi')\n"
    assert r.headers["content-type"].startswith("text/plain")
    r = client.get(f"/api/v1/experiments/{exp}/model_def/file", params={"path": "data/blob.bin"})
    assert r.content == b"\xff\xfe\x00"
    assert r.headers["content-type"] == "application/octet-stream"
    r = client.get(f"/api/v1/experiments/{exp}/model_def/file", params={"path": "nope.py"})
    assert r.status_code == 404 and "nope.py" in r.text
    assert client.get("/api/v1/experiments/999/model_def/tree").status_code == 404


def test_det_job_list_and_update(tmp_path, capsys):
    with serve(str(tmp_path), run_loop=False) as live:
        url = live.url
        with httpx.Client(base_url=url) as client:
            sign_in(client)
            exp = _create(client, "cli-job")
        capsys.readouterr()
        assert main(["-m", url, "-u", "admin", "job", "list"]) == 0
        out = capsys.readouterr().out
        assert f"experiment-{exp}" in out and "42 (default)" in out and "0/3" in out
        assert (
            main(
                ["-m", url, "-u", "admin", "job", "update", f"experiment-{exp}", "--priority", "7"]
            )
            == 0
        )
        assert "priority 7, queue position 1" in capsys.readouterr().out


def test_batch_metrics_are_placed_per_batch_and_downsampled(master):
    client, app = master
    exp = _create(client, "batches")
    trial = client.get(f"/api/v1/experiments/{exp}").json()["trials"][0]["id"]
    ctx = app.state.ctx
    # Two training reports of 3000 batches each, with one dict per batch.
    for run, end in ((1, 3000), (1, 6000)):
        per_batch = [{"loss": float(i), "flag": True} for i in range(end - 3000, end)]
        metrics.report_metrics(ctx, trial, "training", end, run, {"loss": 1.0}, per_batch)
    r = client.get(f"/api/v1/trials/{trial}/batch-metrics", params={"max_points": 100})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["names"] == ["loss"]  # bools are not metrics
    (s,) = body["series"]
    assert s["raw_points"] == 6000 and s["downsampled"] and len(s["batches"]) <= 100
    # Batch b (1-based) carried the value b - 1; M4 keeps the first and last points.
    assert (s["batches"][0], s["values"][0]) == (1, 0.0)
    assert (s["batches"][-1], s["values"][-1]) == (6000, 5999.0)
    assert client.get("/api/v1/trials/999/batch-metrics").status_code == 404


def test_checkpoints_carry_the_validation_at_their_batch(tmp_path):
    """GET /experiments/{id}/checkpoints reads only the validation reports at the
    checkpoints' batch counts; each checkpoint still gets its searcher metric."""
    from dauntless.master.seeding import seed_experiment

    db_url = f"sqlite:///{tmp_path}/m.db"
    exp = seed_experiment(db_url, name="s", trials=3, points=4, storage_dir=str(tmp_path / "c"))
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18083, db_url=db_url), False)
    with TestClient(app) as client:
        sign_in(client)
        ckpts = client.get(f"/api/v1/experiments/{exp}/checkpoints").json()["checkpoints"]
        assert len(ckpts) == 3
        for c in ckpts:
            (m,) = [
                r
                for r in client.get(f"/api/v1/trials/{c['trial_id']}/metrics").json()["metrics"]
                if r["group"] == "validation" and r["total_batches"] == c["total_batches"]
            ]
            assert c["searcher_metric"] == m["values"]["validation_loss"]
