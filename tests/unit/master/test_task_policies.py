"""preemption_timeout, log_policies and failure records (issue 18, scope 2 and 7)."""

from __future__ import annotations

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.models import metrics
from dauntless.master.testing import bearer, model_def_tarball, sign_in

CONFIG = """
name: policies
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
max_restarts: 3
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def master(tmp_path):
    # Agents are never lost here: the clock jumps by hours without heartbeats.
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    config = MasterConfig(data_dir=str(tmp_path), port=18080, agent_timeout=1e9)
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        for agent in ("a1", "a2"):
            client.post("/api/v1/agents", json={"id": agent, "slots": [{"id": "cpu0"}]})
        ctx = app.state.ctx
        ctx.clock = Clock()
        yield client, ctx


def _create(client, extra: str = "") -> int:
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG + extra}, files=files)
    assert r.status_code == 201, r.text
    return r.json()["experiment"]["id"]


def _spec(client, ctx) -> dict:
    # A restart is placed when the failed run's exit is reported; a first run here.
    loop.schedule_pass(ctx)
    for agent in ("a1", "a2"):
        start = client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": []}).json()
        if start["start"]:
            return start["start"][0]
    raise AssertionError("nothing started")


def _log(client, alloc: str, line: str, seq: int, stdtype: str = "stderr") -> None:
    r = client.post(
        "/api/v1/task/logs",
        json={
            "logs": [
                {
                    "allocation_id": alloc,
                    "seq": seq,
                    "timestamp": 1.0,
                    "stdtype": stdtype,
                    "rank_id": 0,
                    "log": line,
                }
            ]
        },
    )
    assert r.status_code == 200, r.text


def test_trial_ignoring_a_pause_is_killed_after_preemption_timeout(master):
    client, ctx = master
    exp_id = _create(client, "preemption_timeout: 30\n")
    spec = _spec(client, ctx)
    alloc, agent = spec["allocation_id"], spec["env"]["DET_AGENT_ID"]
    client.post(f"/api/v1/experiments/{exp_id}/pause")
    loop.schedule_pass(ctx)  # the request is stamped
    ctx.clock.now += 29
    loop.schedule_pass(ctx)
    hb = client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == []  # still within the timeout: asked, not killed
    ctx.clock.now += 2
    loop.schedule_pass(ctx)
    hb = client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == [alloc]
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": -9})
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] == "PAUSED"
    trial = body["trials"][0]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 0 and trial["failure"] is None


def test_default_preemption_timeout_is_an_hour(master):
    client, ctx = master
    exp_id = _create(client)
    spec = _spec(client, ctx)
    alloc, agent = spec["allocation_id"], spec["env"]["DET_AGENT_ID"]
    client.post(f"/api/v1/experiments/{exp_id}/cancel")
    loop.schedule_pass(ctx)
    ctx.clock.now += 3599
    loop.schedule_pass(ctx)
    hb = client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == []
    ctx.clock.now += 2
    loop.schedule_pass(ctx)
    hb = client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": [alloc]}).json()
    assert hb["kill"] == [alloc]
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": -15})
    assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] == ("CANCELED")


def test_cancel_retries_log_policy_makes_a_failure_final_and_failure_is_recorded(master):
    client, ctx = master
    exp_id = _create(
        client,
        "log_policies:\n  - {name: bad data, pattern: 'corrupt record', action: cancel_retries}\n",
    )
    spec = _spec(client, ctx)
    alloc = spec["allocation_id"]
    _log(client, alloc, "Traceback (most recent call last):", 1)
    _log(client, alloc, "ValueError: corrupt record 17", 2)
    _log(client, alloc, "launcher: rank 0 exited with 1", 3)
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 1, "message": "x"})
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    trial = body["trials"][0]
    assert trial["state"] == "ERROR", "max_restarts 3, yet cancel_retries ends it"
    assert trial["log_policy_matches"] == ["bad data"]
    assert trial["failure"]["log"] == "ValueError: corrupt record 17"
    assert trial["failure"]["run_id"] == 1 and trial["failure"]["exit_code"] == 1
    assert body["experiment"]["state"] == "ERROR"


def test_builtin_cuda_oom_labels_and_exclude_node_avoids_the_agent(master):
    client, ctx = master
    exp_id = _create(
        client, "log_policies:\n  - {pattern: 'ECC fault', action: {type: exclude_node}}\n"
    )
    spec = _spec(client, ctx)
    alloc, agent = spec["allocation_id"], spec["env"]["DET_AGENT_ID"]
    _log(client, alloc, "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB", 1)
    _log(client, alloc, "ECC fault on device 0", 2)
    client.post(f"/api/v1/allocations/{alloc}/exited", json={"exit_code": 1})
    trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 1
    assert trial["log_policy_matches"] == ["CUDA OOM", "ECC fault"]
    spec2 = _spec(client, ctx)
    assert spec2["env"]["DET_AGENT_ID"] != agent


def test_builtin_can_be_turned_off_and_bad_policies_are_refused(master):
    client, ctx = master
    _create(client, "log_policies:\n  - {name: CUDA OOM}\n")
    spec = _spec(client, ctx)
    _log(client, spec["allocation_id"], "CUDA out of memory", 1)
    trial = client.get(f"/api/v1/trials/{spec['trial_id']}").json()["trial"]
    assert trial["log_policy_matches"] == []
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post(
        "/api/v1/experiments",
        data={"config": CONFIG + "log_policies:\n  - {pattern: '(', action: reboot}\n"},
        files=files,
    )
    assert r.status_code == 400
    fields = {e["field"] for e in r.json()["errors"]}
    assert {"log_policies.0.pattern", "log_policies.0.action"} <= fields


def test_running_trial_progress_counts_in_the_experiment(master):
    client, ctx = master
    exp_id = _create(client)
    spec = _spec(client, ctx)
    token = bearer(spec["env"]["DET_SESSION_TOKEN"])
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/progress", json={"progress": 0.4}, headers=token
    )
    assert r.status_code == 200
    exp = client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert exp["progress"] == pytest.approx(0.4)


def test_grid_progress_adds_running_trials_over_planned_trials(master):
    client, ctx = master
    grid = CONFIG.replace("{name: single,", "{name: grid,").replace(
        "hyperparameters: {global_batch_size: 8}",
        "hyperparameters: {global_batch_size: 8, lr: {type: categorical, vals: [1, 2, 3, 4]}}",
    )
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    exp_id = client.post("/api/v1/experiments", data={"config": grid}, files=files).json()[
        "experiment"
    ]["id"]
    trials = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"]
    assert len(trials) == 4
    ctx.write(metrics.report_progress, trials[0]["id"], 0.5)
    ctx.write(metrics.report_progress, trials[1]["id"], 1.0)
    exp = client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert exp["progress"] == pytest.approx(1.5 / 4)


def test_asha_progress_counts_over_its_brackets_trials(master):
    """ASHA's planned trials are its brackets' (every bracket has at least one: here 3
    brackets for max_trials 2), the one definition of dauntless.searcher.planned_trials
    that the preview and the create checks use too (issue 38)."""
    client, ctx = master
    asha = CONFIG.replace(
        "{name: single, metric: loss, max_length: {batches: 30}}",
        "{name: adaptive_asha, metric: loss, max_length: {batches: 30}, max_trials: 2, "
        "bracket_rungs: [3, 2, 1]}",
    ).replace(
        "hyperparameters: {global_batch_size: 8}",
        "hyperparameters: {global_batch_size: 8, lr: {type: double, minval: 0.1, maxval: 1}}",
    )
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": asha}, files=files)
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    preview = client.post("/api/v1/preview-hp-search", json={"config": asha}).json()
    assert [b["trials"] for b in preview["summary"]["brackets"]] == [1, 1, 1]
    trials = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"]
    assert len(trials) == 3
    ctx.write(metrics.report_progress, trials[0]["id"], 0.6)
    exp = client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert exp["progress"] == pytest.approx(0.6 / 3)


def test_log_policy_matcher_keeps_a_bounded_memory_and_still_matches(master, monkeypatch):
    # Issue 37: nothing per finished trial stays in the master's memory; with a bound of
    # one allocation, the second allocation's lines clear the first's entry, and the
    # first's next line is matched after reading its allocation again.
    from dauntless.master import task_policies

    monkeypatch.setattr(task_policies, "MATCHER_ALLOCATIONS", 1)
    client, ctx = master
    policy = (
        "log_policies:\n  - {name: bad data, pattern: 'corrupt record', action: cancel_retries}\n"
    )
    first, second = _create(client, policy), _create(client, policy)
    loop.schedule_pass(ctx)
    allocs = [
        spec["allocation_id"]
        for agent in ("a1", "a2")
        for spec in client.post(f"/api/v1/agents/{agent}/heartbeat", json={"running": []}).json()[
            "start"
        ]
    ]
    assert len(allocs) == 2
    _log(client, allocs[0], "starting", 1)
    _log(client, allocs[1], "ValueError: corrupt record 3", 1)
    _log(client, allocs[0], "ValueError: corrupt record 9", 2)
    assert len(ctx.log_policies._alloc) == 1
    for exp_id in (first, second):
        trial = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"][0]
        assert trial["log_policy_matches"] == ["bad data"], exp_id
