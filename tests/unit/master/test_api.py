"""The master's REST API in-process (ASGI), with the scheduling loop driven by hand."""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import select, update

from dauntless.master import context_archive, loop, routes_cluster
from dauntless.master.db import AllocationRow, MetricRow
from dauntless.master.models import allocations, metrics
from dauntless.master.testing import DEADLINE, model_def_tarball

CONFIG = """
name: unit
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
  lr: 0.1
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: 20}
max_restarts: 1
"""


def _create(client, config=CONFIG, context=True):
    files = (
        {"context": ("context.tar.gz", model_def_tarball(), "application/gzip")}
        if context
        else None
    )
    return client.post("/api/v1/experiments", data={"config": config}, files=files)


def _register(client, agent_id="a1", slots=1):
    r = client.post(
        "/api/v1/agents",
        json={"id": agent_id, "slots": [{"id": f"cpu{i}", "type": "cpu"} for i in range(slots)]},
    )
    assert r.status_code == 200, r.text
    return r.json()["agent"]


def test_master_info(master):
    client, _ = master
    body = client.get("/api/v1/master").json()
    assert body["version"] and body["cluster_id"]


def test_config_errors_name_fields(master):
    client, _ = master
    r = _create(client, CONFIG.replace("max_length: {batches: 20}", "max_lenght: 3"))
    assert r.status_code == 400
    fields = {e["field"] for e in r.json()["errors"]}
    assert "searcher.max_lenght" in fields
    # max_length is optional since 0.38; a trial class without it is refused naming it.
    r = _create(client, CONFIG.replace("  max_length: {batches: 20}\n", ""))
    assert r.status_code == 400
    (err,) = r.json()["errors"]
    assert err["field"] == "searcher.max_length" and "Trainer.fit(max_length=" in err["message"]
    r = _create(client, CONFIG + "\nunknown_top: 1\n")
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "unknown_top"
    r = _create(client, CONFIG.replace("lr: 0.1", "lr: {type: double, minval: 1, maxval: 0}"))
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "hyperparameters.lr"
    assert client.get("/api/v1/experiments").json()["total"] == 0


def test_unknown_objects_are_404(master):
    client, _ = master
    for path in [
        "/api/v1/experiments/9",
        "/api/v1/trials/9",
        "/api/v1/checkpoints/x",
        "/api/v1/trials/9/logs",
        "/api/v1/experiments/9/model_def",
    ]:
        r = client.get(path)
        assert r.status_code == 404, path
        assert "not found" in r.json()["detail"]
    r = client.post("/api/v1/agents/ghost/heartbeat", json={"running": []})
    assert r.status_code == 404


def test_bad_bodies_are_400(master):
    client, _ = master
    r = client.post("/api/v1/agents", json={"id": "a", "slots": [], "extra": 1})
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "extra"
    r = client.post("/api/v1/agents", json={"id": "a", "resource_pool": "gpu", "slots": []})
    assert r.status_code == 400 and "resource pool" in r.json()["detail"]


def test_single_trial_lifecycle(master):
    client, ctx = master
    r = _create(client)
    assert r.status_code == 201, r.text
    exp = r.json()["experiment"]
    assert exp["state"] == "ACTIVE" and exp["num_trials"] == 1
    assert exp["config"]["checkpoint_storage"]["type"] == "shared_fs"
    assert isinstance(exp["config"]["reproducibility"]["experiment_seed"], int)
    trial = client.get(f"/api/v1/experiments/{exp['id']}/trials").json()["trials"][0]
    assert trial["hparams"] == {"global_batch_size": 8, "lr": 0.1}

    # Nothing runs without an agent.
    assert loop.schedule_pass(ctx) == 0
    _register(client)
    assert loop.schedule_pass(ctx) == 1
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()
    (spec,) = hb["start"]
    assert spec["trial_id"] == trial["id"] and spec["entrypoint"] == "model_def:Trial"
    assert spec["env"]["DET_TRIAL_SEED"] == str(trial["seed"])
    assert spec["env"]["DET_LATEST_CHECKPOINT"] == ""
    alloc = spec["allocation_id"]
    agents = client.get("/api/v1/agents").json()["agents"]
    assert agents[0]["slots"][0]["allocation_id"] == alloc
    # The agent downloads the context.
    md = client.get(spec["context_url"])
    assert md.status_code == 200 and md.content == model_def_tarball()

    tid = trial["id"]
    op = client.get(f"/api/v1/trials/{tid}/searcher/operation").json()
    assert op == {"op": {"length": 20}, "completed": False}
    for batches in (10, 20):
        r = client.post(
            f"/api/v1/trials/{tid}/metrics",
            json={
                "group": "training",
                "steps_completed": batches,
                "trial_run_id": 1,
                "metrics": {"loss": 1.0 / batches, "batches": batches},
            },
        )
        assert r.json()["stored"] is True
    # A retried report is stored once.
    r = client.post(
        f"/api/v1/trials/{tid}/metrics",
        json={
            "group": "training",
            "steps_completed": 20,
            "trial_run_id": 1,
            "metrics": {"loss": 9},
        },
    )
    assert r.json()["stored"] is False
    client.post(
        f"/api/v1/trials/{tid}/metrics",
        json={
            "group": "validation",
            "steps_completed": 20,
            "trial_run_id": 1,
            "metrics": {"accuracy": 0.97, "batches": 20},
        },
    )
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": "c1",
            "trial_id": tid,
            "allocation_id": alloc,
            "steps_completed": 20,
            "resources": {"state-dict.pth": 100},
            "metadata": {"steps_completed": 20},
        },
    )
    assert r.status_code == 200
    # Completing the wrong length is refused; the right one closes the single trial.
    r = client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 19}, "searcher_metric": 0.97},
    )
    assert r.status_code == 400
    r = client.post(
        f"/api/v1/trials/{tid}/searcher/completed_operation",
        json={"op": {"length": 20}, "searcher_metric": 0.97},
    )
    assert r.status_code == 200
    assert client.get(f"/api/v1/trials/{tid}/searcher/operation").json()["completed"] is True

    client.post(
        "/api/v1/task/logs",
        json={
            "logs": [
                {"allocation_id": alloc, "stdtype": "stdout", "log": f"line {i}"} for i in range(3)
            ]
        },
    )
    logs = client.get(f"/api/v1/trials/{tid}/logs").json()["logs"]
    assert [x["log"] for x in logs] == ["line 0", "line 1", "line 2"]
    after = client.get(f"/api/v1/trials/{tid}/logs", params={"after_id": logs[1]["id"]}).json()
    assert [x["log"] for x in after["logs"]] == ["line 2"]

    r = client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 0})
    assert r.status_code == 200
    body = client.get(f"/api/v1/experiments/{exp['id']}").json()
    assert body["experiment"]["state"] == "COMPLETED"
    assert body["experiment"]["best_searcher_metric"] == pytest.approx(0.97)
    (t,) = body["trials"]
    assert t["state"] == "COMPLETED" and t["latest_checkpoint"] == "c1"
    assert t["latest_validation"]["accuracy"] == pytest.approx(0.97)
    ck = client.get("/api/v1/checkpoints/c1").json()["checkpoint"]
    assert ck["storage_path"].endswith("/checkpoints/c1")
    metrics = client.get(f"/api/v1/trials/{tid}/metrics", params={"group": "training"}).json()
    assert [m["values"]["loss"] for m in metrics["metrics"]] == [0.1, 0.05]


def test_metrics_batch_stores_each_report_once_in_order(master):
    client, ctx = master
    exp_id = _create(client).json()["experiment"]["id"]
    tid = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]
    path = f"/api/v1/trials/{tid}/metrics"

    def report(group, batches, **values):
        return {
            "group": group,
            "steps_completed": batches,
            "trial_run_id": 1,
            "metrics": {**values, "batches": batches},
            "batch_metrics": [{"loss": v} for v in values.values()] or None,
        }

    assert client.post(path, json=report("training", 10, loss=1.0)).json()["stored"] is True
    body = {
        "reports": [
            report("training", 10, loss=9.0),  # already stored alone
            report("training", 20, loss=0.5),
            report("training", 20, loss=8.0),  # repeated within the batch
            report("validation", 20, accuracy=0.9),  # the same batch count, another group
            report("training", 30, loss=float("nan")),  # Python's json writes NaN; stored as null
            report("validation", 30, accuracy=0.95),
        ]
    }
    r = client.post(
        path + "/batch", content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["stored"] == [False, True, False, True, True, True]
    training = client.get(path, params={"group": "training"}).json()["metrics"]
    assert [(m["total_batches"], m["values"]["loss"]) for m in training] == [
        (10, 1.0),
        (20, 0.5),
        (30, None),
    ]
    with ctx.db.read() as s:
        rows = s.scalars(
            select(MetricRow).where(MetricRow.trial_id == tid, MetricRow.kind == "training")
        ).all()
        assert sorted((r.total_batches, r.batch_metrics) for r in rows) == [
            (10, [{"loss": 1.0}]),
            (20, [{"loss": 0.5}]),
            (30, [{"loss": None}]),
        ]
    validation = client.get(path, params={"group": "validation"}).json()["metrics"]
    assert [m["values"]["accuracy"] for m in validation] == [0.9, 0.95]
    trial = client.get(f"/api/v1/trials/{tid}").json()["trial"]
    assert trial["total_batches"] == 30
    assert metrics.report_metrics_batch(ctx, tid, []) == []

    # Bad batches are refused whole, naming the field; nothing of them is stored.
    for body, field in (
        ({"reports": []}, "reports"),
        ({"reports": [report("training", 40, loss=1.0)] * 1001}, "reports"),
        (
            {
                "reports": [
                    report("training", 50, loss=1.0),
                    {**report("training", 60, loss=1.0), "steps_completed": -1},
                ]
            },
            "steps_completed",
        ),
    ):
        r = client.post(path + "/batch", json=body)
        assert r.status_code == 400 and field in r.text, r.text
    training = client.get(path, params={"group": "training"}).json()["metrics"]
    assert [m["total_batches"] for m in training] == [10, 20, 30]
    assert (
        client.post(
            f"/api/v1/trials/{tid + 99}/metrics/batch", json={"reports": [report("training", 1)]}
        ).status_code
        == 404
    )


def test_failed_trial_restarts_then_errors(master):
    client, ctx = master
    exp_id = _create(client).json()["experiment"]["id"]
    _register(client)
    for attempt in range(2):  # max_restarts: 1 -> the second failure is final
        # The first run is placed by this pass, the restart by the exit report itself.
        assert loop.schedule_pass(ctx) == (1 if attempt == 0 else 0)
        spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
        assert spec["env"]["DET_TRIAL_RUN_ID"] == str(attempt + 1)
        client.post(f"/api/v1/allocations/{spec['allocation_id']}/exited", json={"exit_code": 3})
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["trials"][0]["restarts"] == 2
    assert body["trials"][0]["state"] == "ERROR"
    assert body["experiment"]["state"] == "ERROR"
    assert loop.schedule_pass(ctx) == 0


def test_lost_agent_restarts_trial_elsewhere(master, monkeypatch):
    client, ctx = master
    _create(client)
    _register(client, "a1")
    loop.schedule_pass(ctx)
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": "c-early",
            "trial_id": spec["trial_id"],
            "steps_completed": 5,
            "resources": {},
            "metadata": {},
        },
    )
    _register(client, "a2")
    # a1 stops heartbeating: after agent_timeout it is lost and the trial moves to a2.
    clock = [ctx.clock()]
    monkeypatch.setattr(ctx, "clock", lambda: clock[0])
    clock[0] += ctx.config.agent_timeout + 1
    client.post("/api/v1/agents/a2/heartbeat", json={"running": []})
    assert loop.schedule_pass(ctx) == 1
    agents = {a["id"]: a for a in client.get("/api/v1/agents").json()["agents"]}
    assert agents["a1"]["state"] == "LOST"
    spec2 = client.post("/api/v1/agents/a2/heartbeat", json={"running": []}).json()["start"][0]
    assert spec2["trial_id"] == spec["trial_id"]
    assert spec2["env"]["DET_LATEST_CHECKPOINT"] == "c-early"
    assert spec2["env"]["DET_STEPS_COMPLETED"] == "5"
    trial = client.get(f"/api/v1/trials/{spec['trial_id']}").json()["trial"]
    assert trial["restarts"] == 1
    # If a1 comes back still running the old task, it is told to kill it.
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [spec["allocation_id"]]})
    assert hb.json()["kill"] == [spec["allocation_id"]]


def test_context_too_large_is_refused(master, monkeypatch):
    client, _ = master
    monkeypatch.setattr(context_archive, "MAX_CONTEXT_BYTES", 10)
    r = _create(client)
    assert r.status_code == 413 and "95 MiB" in r.json()["detail"]
    assert r.json()["errors"] == [{"field": "context", "message": "at most 10 bytes"}]


def test_resent_log_batches_are_stored_once(master):
    client, ctx = master
    _create(client)
    _register(client)
    loop.schedule_pass(ctx)
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    batch = {
        "logs": [
            {"allocation_id": spec["allocation_id"], "seq": i, "log": f"l{i}"} for i in (1, 2, 3)
        ]
    }
    assert client.post("/api/v1/task/logs", json=batch).json() == {"stored": 3}
    # The agent did not see the answer and sends the batch again, plus one new line.
    batch["logs"].append({"allocation_id": spec["allocation_id"], "seq": 4, "log": "l4"})
    assert client.post("/api/v1/task/logs", json=batch).json() == {"stored": 1}
    logs = client.get(f"/api/v1/trials/{spec['trial_id']}/logs").json()["logs"]
    assert [x["log"] for x in logs] == ["l1", "l2", "l3", "l4"]


def test_agent_and_slot_switches_and_pools(master):
    client, ctx = master
    _register(client, "a1", slots=2)
    pools = client.get("/api/v1/resource-pools").json()["resource_pools"]
    assert pools == [
        {
            "name": "default",
            "description": "",
            "scheduler": "priority",
            "preemption": False,
            "agents": 1,
            "agents_lost": 0,
            "slots_total": 2,
            "slots_used": 0,
            "slots_disabled": 0,
            "slots_free": 2,
            "provider": None,
            "min_instances": None,
            "max_instances": None,
            "instances": None,
        }
    ]
    r = client.post("/api/v1/agents/a1/slots/cpu1/disable")
    assert [s["enabled"] for s in r.json()["agent"]["slots"]] == [True, False]
    assert client.post("/api/v1/agents/a1/slots/cpu9/disable").status_code == 404
    exp_id = _create(client).json()["experiment"]["id"]
    assert loop.schedule_pass(ctx) == 1
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    assert spec["slot_ids"] == ["cpu0"]  # never the disabled slot
    pool = client.get("/api/v1/resource-pools").json()["resource_pools"][0]
    assert (pool["slots_used"], pool["slots_disabled"], pool["slots_free"]) == (1, 1, 0)
    # Draining keeps the running trial; disabling without drain preempts it.
    client.post("/api/v1/agents/a1/disable", json={"drain": True})
    alloc = spec["allocation_id"]
    assert not client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json()["preempt"]
    client.post("/api/v1/agents/a1/disable")
    assert client.get(f"/api/v1/allocations/{alloc}/signals/preemption").json()["preempt"]
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 0})
    assert loop.schedule_pass(ctx) == 0  # nowhere to go while a1 is disabled
    trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 0
    client.post("/api/v1/agents/a1/enable")
    assert loop.schedule_pass(ctx) == 1
    r = client.patch(
        f"/api/v1/experiments/{exp_id}", json={"resources": {"priority": 10, "max_slots": 4}}
    )
    assert r.json()["experiment"]["config"]["resources"]["priority"] == 10
    r = client.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"priority": 100}})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "resources.priority"


def test_distributed_allocation_spans_agents_and_fails_together(master):
    client, ctx = master
    _register(client, "a1", slots=1)
    _register(client, "a2", slots=1)
    exp_id = _create(
        client,
        CONFIG.replace("max_restarts: 1", "max_restarts: 1\nresources: {slots_per_trial: 2}"),
    )
    exp_id = exp_id.json()["experiment"]["id"]
    assert loop.schedule_pass(ctx) == 1
    s1 = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    s2 = client.post("/api/v1/agents/a2/heartbeat", json={"running": []}).json()["start"][0]
    e1, e2 = s1["env"], s2["env"]
    assert e1["DET_ALLOCATION_ID"] == e2["DET_ALLOCATION_ID"] == s1["allocation_id"]
    assert s2["allocation_id"] != s1["allocation_id"]
    assert (e1["DET_PART_INDEX"], e1["DET_RANK_OFFSET"], e1["DET_WORLD_SIZE"]) == ("0", "0", "2")
    assert (e2["DET_PART_INDEX"], e2["DET_RANK_OFFSET"], e2["DET_NUM_PARTS"]) == ("1", "1", "2")
    group = e1["DET_ALLOCATION_ID"]
    assert client.get(f"/api/v1/allocations/{group}/rendezvous").json() == {"rendezvous": None}
    client.post(
        f"/api/v1/allocations/{group}/rendezvous", json={"addr": "127.0.0.1", "port": 29500}
    )
    rdv = client.get(f"/api/v1/allocations/{group}/rendezvous").json()["rendezvous"]
    assert rdv == {"addr": "127.0.0.1", "port": 29500, "world_size": 2, "num_parts": 2}
    # Rank 1's agent dies: the chief part is told to die too, and the trial restarts once.
    client.post(f"/api/v1/allocations/{s2['allocation_id']}/exited", json={"exit_code": 137})
    hb = client.post("/api/v1/agents/a1/heartbeat", json={"running": [s1["allocation_id"]]})
    assert hb.json()["kill"] == [s1["allocation_id"]]
    assert client.get(f"/api/v1/allocations/{group}/signals/preemption").json()["preempt"]
    trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    assert trial["restarts"] == 0  # not until every part has exited
    client.post(f"/api/v1/allocations/{s1['allocation_id']}/exited", json={"exit_code": -15})
    trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    assert trial["restarts"] == 1 and trial["state"] == "ACTIVE"
    # The restart was placed when the last part's exit was reported.
    assert loop.schedule_pass(ctx) == 0
    live = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    assert live["run_id"] == 2


def test_non_finite_metrics_are_stored_as_null(master):
    client, ctx = master
    _create(client)
    _register(client)
    loop.schedule_pass(ctx)
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    tid = spec["trial_id"]
    body = '{"group": "training", "steps_completed": 5, "metrics": {"loss": NaN, "x": Infinity, "n": [1.0, -Infinity]}}'
    r = client.post(
        f"/api/v1/trials/{tid}/metrics", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    (m,) = client.get(f"/api/v1/trials/{tid}/metrics").json()["metrics"]
    assert m["values"] == {"loss": None, "x": None, "n": [1.0, None]}


def _long_poll(client, alloc, timeout_seconds):
    """Start a preemption long poll in a thread; returns (thread, result dict)."""
    result = {}

    def poll():
        r = client.get(
            f"/api/v1/allocations/{alloc}/signals/preemption",
            params={"timeout_seconds": timeout_seconds},
        )
        result["body"] = r.json()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread, result


def _running_allocation(client, ctx):
    exp_id = _create(client).json()["experiment"]["id"]
    _register(client)
    assert loop.schedule_pass(ctx) == 1
    spec = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    return exp_id, spec["allocation_id"]


def test_preemption_long_poll_reads_the_allocation_only_when_it_changes(master, monkeypatch):
    client, ctx = master
    exp_id, alloc = _running_allocation(client, ctx)
    reads = []
    read = allocations.preemption_signal

    def counted(session, allocation_id):
        reads.append(allocation_id)
        return read(session, allocation_id)

    monkeypatch.setattr(allocations, "preemption_signal", counted)
    # Count the long poll's in-memory checks of the allocation's version.
    checks = threading.Semaphore(0)
    versions = ctx.allocation_versions
    version = versions.version

    def counted_version(key):
        checks.release()
        return version(key)

    monkeypatch.setattr(versions, "version", counted_version)
    # No periodic re-read: only a change of the allocation's version can make it read again.
    monkeypatch.setattr(routes_cluster, "PREEMPTION_REREAD_SECONDS", 3600.0)
    # The longest timeout the route takes: the poll answers at its timeout with the signal
    # it read first (false), so {"preempt": True} can only come from the change: the
    # in-memory check saw the new version and read the allocation again. No clock needed.
    thread, result = _long_poll(client, alloc, 60)
    for _ in range(7):  # the version read with the allocation, then six checks
        assert checks.acquire(timeout=30), "the long poll stopped checking"
    # Six in-memory checks, no change: still the first read only.
    assert reads == [alloc] and not result
    assert client.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    thread.join(DEADLINE)  # a deadline for failure only
    assert result["body"] == {"preempt": True}
    assert reads == [alloc, alloc]


def test_preemption_long_poll_rereads_for_changes_the_orm_does_not_see(master, monkeypatch):
    client, ctx = master
    _, alloc = _running_allocation(client, ctx)
    monkeypatch.setattr(routes_cluster, "PREEMPTION_REREAD_SECONDS", 0.5)
    first_read = threading.Event()
    read = allocations.preemption_signal

    def noted(session, allocation_id):
        try:
            return read(session, allocation_id)
        finally:
            first_read.set()

    monkeypatch.setattr(allocations, "preemption_signal", noted)
    # The longest timeout the route takes: at its timeout the poll answers with what it
    # last read (false), so {"preempt": True} shows the periodic reread found the change.
    thread, result = _long_poll(client, alloc, 60)
    # The change comes after the poll's first read (which saw no signal), so only a
    # reread can find it.
    assert first_read.wait(30), "the long poll never read the allocation"
    with ctx.db.write() as s:  # a bulk UPDATE: no ORM object changes, no version bump
        s.execute(
            update(AllocationRow)
            .where(AllocationRow.group_id == alloc)
            .values(preempt_requested=True)
        )
    thread.join(DEADLINE)  # a deadline for failure only
    assert result["body"] == {"preempt": True}


def test_completed_operation_answers_the_next_operation(master):
    """The completion's answer is what the GET would say next, also for a repeat."""
    client, ctx = master
    _register(client)
    exp_id = _create(client).json()["experiment"]["id"]
    loop.schedule_pass(ctx)
    client.post("/api/v1/agents/a1/heartbeat", json={"running": []})
    tid = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]
    assert client.get(f"/api/v1/trials/{tid}/searcher/operation").json()["op"] == {"length": 20}
    body = {"op": {"length": 20}, "searcher_metric": 0.5}
    r = client.post(f"/api/v1/trials/{tid}/searcher/completed_operation", json=body)
    assert r.status_code == 200
    assert r.json() == {"op": None, "completed": True}
    assert r.json() == client.get(f"/api/v1/trials/{tid}/searcher/operation").json()
    again = client.post(f"/api/v1/trials/{tid}/searcher/completed_operation", json=body)
    assert again.json() == {"op": None, "completed": True}


def test_searcher_events_reuse_the_trial_rows_they_hold(master):
    """A completed operation that closes the trial, and an exit whose searcher creates
    the next trial and gives it an operation, select no trial by its request id: the
    rows the event holds (the reporting trial, the one just created) are used, so the
    completion writes the trial's row in one UPDATE (issue 37: statements per trial)."""
    from sqlalchemy import event

    client, ctx = master
    _register(client)
    config = CONFIG.replace("name: single", "name: random\n  max_trials: 2").replace(
        "max_length: {batches: 20}", "max_length: {batches: 20}\n  max_concurrent_trials: 1"
    )
    exp_id = _create(client, config).json()["experiment"]["id"]
    loop.schedule_pass(ctx)
    (first,) = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]
    tid = first["trial_id"]
    statements: list[str] = []
    event.listen(
        ctx.db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: statements.append(" ".join(statement.split())),
    )
    body = {"op": {"length": 20}, "searcher_metric": 0.5}
    r = client.post(f"/api/v1/trials/{tid}/searcher/completed_operation", json=body)
    assert r.status_code == 200 and r.json() == {"op": None, "completed": True}
    by_request = [q for q in statements if "trials.request_id = " in q]
    assert by_request == []
    trial_updates = [q for q in statements if q.startswith("UPDATE trials SET")]
    assert len(trial_updates) == 1, trial_updates
    assert "searcher_completed_length" in trial_updates[0]
    assert "searcher_closed" in trial_updates[0]
    statements.clear()
    r = client.post(
        "/api/v1/agents/a1/heartbeat",
        json={"running": [], "exited": [{"allocation_id": first["allocation_id"], "exit_code": 0}]},
    )
    assert r.status_code == 200, r.text
    (second,) = r.json()["start"]
    assert second["trial_id"] != tid
    assert [q for q in statements if "trials.request_id = " in q] == []
    # The new trial's first operation is written by its INSERT, not by an UPDATE after it.
    updates = [q for q in statements if q.startswith("UPDATE trials SET")]
    assert not any("searcher_op_length" in q for q in updates), updates
    assert any(q.startswith("INSERT INTO trials") for q in statements)
    assert client.get(f"/api/v1/trials/{second['trial_id']}/searcher/operation").json() == {
        "op": {"length": 20},
        "completed": False,
    }
    trials = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    assert {t["id"]: t["state"] for t in trials}[tid] == "COMPLETED"


def test_a_trial_end_reads_no_row_it_holds_and_no_gc_for_nothing(master):
    """An exit of a one-part run reads no sibling parts (the part is its own group) and
    reads each trial with its experiment in one statement, the scheduler and the task
    spec read a project's workspace in the statement that finds it, and the checkpoint
    GC the end asks for, with no checkpoint to collect, probes once without loading the
    experiment or taking the write lock (issue 37: statements per trial)."""
    from sqlalchemy import event

    client, ctx = master
    _register(client)
    config = CONFIG.replace("name: single", "name: random\n  max_trials: 2").replace(
        "max_length: {batches: 20}", "max_length: {batches: 20}\n  max_concurrent_trials: 1"
    )
    exp_id = _create(client, config).json()["experiment"]["id"]
    loop.schedule_pass(ctx)
    (first,) = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]
    body = {"op": {"length": 20}, "searcher_metric": 0.5}
    r = client.post(f"/api/v1/trials/{first['trial_id']}/searcher/completed_operation", json=body)
    assert r.status_code == 200, r.text
    statements: list[str] = []
    event.listen(
        ctx.db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: statements.append(" ".join(statement.split())),
    )
    r = client.post(
        "/api/v1/agents/a1/heartbeat",
        json={"running": [], "exited": [{"allocation_id": first["allocation_id"], "exit_code": 0}]},
    )
    assert r.status_code == 200, r.text
    (second,) = r.json()["start"]
    assert second["trial_id"] != first["trial_id"]
    assert [q for q in statements if "WHERE allocations.group_id = " in q] == []
    # The exit's trial and the handed-over trial each come with their experiment.
    assert [q for q in statements if q.startswith("SELECT experiments.")] == []
    # The project's workspace came with the project, read once for the scheduler and
    # the spec: the exit, the placement and the beat are one transaction, which also
    # reads the trial, the agent and the owner once.
    assert len([q for q in statements if "FROM projects LEFT OUTER JOIN workspaces" in q]) == 1
    assert [q for q in statements if q.startswith("SELECT workspaces.")] == []
    assert [q for q in statements if q.startswith("SELECT agents.id")] == [
        q for q in statements if q.startswith("SELECT agents.id") and "agents.state = " in q
    ]
    assert [q for q in statements if q.startswith("SELECT agents.state ")] == []
    assert len([q for q in statements if q.startswith("SELECT users.")]) == 1
    assert len([q for q in statements if q.startswith("SELECT trials.id")]) == 2
    # The experiment's new progress goes out with its searcher_seq, in one UPDATE.
    (exp_update,) = [q for q in statements if q.startswith("UPDATE experiments SET")]
    assert "searcher_seq" in exp_update and "progress" in exp_update
    assert exp_id in ctx.gc_due  # the end asked for a collection
    statements.clear()
    loop.run_gc(ctx, deletions=False)
    assert not ctx.gc_due
    (probe,) = statements
    assert probe.startswith("SELECT checkpoints.uuid FROM checkpoints"), probe
    trials = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    assert {t["id"]: t["state"] for t in trials}[first["trial_id"]] == "COMPLETED"


def test_heartbeat_carries_exits_and_answers_the_freed_slots_work(master):
    """An exit reported in a heartbeat ends the run as /exited does, and the same answer
    hands out the trial that took the slot; unknown allocations are skipped."""
    client, ctx = master
    _register(client)
    config = CONFIG.replace("name: single", "name: random\n  max_trials: 2").replace(
        "max_length: {batches: 20}", "max_length: {batches: 20}\n  max_concurrent_trials: 1"
    )
    exp_id = _create(client, config).json()["experiment"]["id"]
    loop.schedule_pass(ctx)
    (first,) = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]
    r = client.post(
        "/api/v1/agents/a1/heartbeat",
        json={
            "running": [],
            "exited": [
                {"allocation_id": first["allocation_id"], "exit_code": 1, "message": "boom"},
                {"allocation_id": "no-such-allocation", "exit_code": 0},
            ],
        },
    )
    assert r.status_code == 200, r.text
    (second,) = r.json()["start"]
    assert second["allocation_id"] != first["allocation_id"]
    trials = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    failed = next(t for t in trials if t["id"] == first["trial_id"])
    # max_restarts 1: the failed run restarts, so the next start may be its own retry.
    assert failed["restarts"] == 1
    assert second["context_sha256"] == first["context_sha256"] != ""
    bad = client.post(
        "/api/v1/agents/a1/heartbeat", json={"running": [], "exited": [{"exit_code": 0}]}
    )
    assert bad.status_code == 400
    assert "allocation_id" in bad.text
