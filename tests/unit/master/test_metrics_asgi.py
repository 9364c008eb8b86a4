"""Trials' training reports stored before FastAPI's routing, without a worker thread
(issue 37): the fast path is taken, answers as the route does and acknowledges only
what is committed; every request it may not answer (another trial's, an unknown or
void token, a validation report, an invalid or oversized body, a failed transaction)
gets the route's answer as before. On SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from dauntless.config import MasterConfig
from dauntless.master import loop, metrics_asgi
from dauntless.master.app import create_app
from dauntless.master.body_limits import MAX_JSON_BODY_BYTES
from dauntless.master.db import AllocationRow, MetricRow
from dauntless.master.testing import bearer, model_def_tarball, register_agent, sign_in

CONFIG = """
name: reports
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 1000}}
max_restarts: 0
"""


@contextlib.contextmanager
def _running_trial(tmp_path, db_url):
    """A master (no control loop) with one running trial: (client signed in as admin,
    app, the trial's id, its token's headers, agent a1's headers, its allocation)."""
    config = MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url)
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        a1 = register_agent(client, app, {"id": "a1", "slots": [{"id": "cpu0"}]})
        files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
        r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
        assert r.status_code == 201, r.text
        assert loop.schedule_pass(app.state.ctx, maintenance=False) == 1
        r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a1)
        (spec,) = r.json()["start"]
        trial = bearer(spec["env"]["DET_SESSION_TOKEN"])
        yield client, app, int(spec["trial_id"]), trial, a1, str(spec["allocation_id"])


@pytest.fixture()
def master(tmp_path, db_url):
    with _running_trial(tmp_path, db_url) as world:
        yield world


def _answered(app) -> int:
    return int(app.state.fast_metric_reports.answered)


def _report(step: int, group: str = "training") -> dict:
    return {"group": group, "steps_completed": step, "trial_run_id": 1, "metrics": {"loss": 0.5}}


def _stored(app, trial_id: int) -> list[tuple[str, int]]:
    with app.state.ctx.db.read() as s:
        rows = s.execute(
            select(MetricRow.kind, MetricRow.total_batches)
            .where(MetricRow.trial_id == trial_id)
            .order_by(MetricRow.total_batches)
        )
        return [(kind, batches) for kind, batches in rows]


def _warm(client, app, trial_id: int, trial: dict) -> int:
    """Let FastAPI match both routes once (steps 1 and 2); the fast path's count."""
    r = client.post(f"/api/v1/trials/{trial_id}/metrics", json=_report(1), headers=trial)
    assert r.status_code == 200, r.text
    r = client.post(
        f"/api/v1/trials/{trial_id}/metrics/batch", json={"reports": [_report(2)]}, headers=trial
    )
    assert r.status_code == 200, r.text
    return _answered(app)


def test_training_reports_are_stored_before_routing_as_the_route_answers(master):
    client, app, trial_id, trial, _, _ = master
    one = f"/api/v1/trials/{trial_id}/metrics"
    many = f"/api/v1/trials/{trial_id}/metrics/batch"
    routed_one = client.post(one, json=_report(1), headers=trial)
    routed_many = client.post(many, json={"reports": [_report(2), _report(1)]}, headers=trial)
    assert _answered(app) == 0  # the routes' first requests: learnt from FastAPI
    assert (routed_one.content, routed_many.content) == (
        b'{"stored":true}',
        b'{"stored":[true,false]}',
    )
    fast_one = client.post(one, json=_report(3), headers=trial)
    fast_dup = client.post(one, json=_report(3), headers=trial)
    fast_many = client.post(many, json={"reports": [_report(4), _report(2)]}, headers=trial)
    assert _answered(app) == 3
    assert fast_one.content == routed_one.content
    assert fast_dup.content == b'{"stored":false}'
    assert fast_many.content == routed_many.content
    for name in ("content-type", "content-length"):
        assert fast_one.headers[name] == routed_one.headers[name]
        assert fast_many.headers[name] == routed_many.headers[name]
    # Acknowledged: committed, visible to another session.
    assert _stored(app, trial_id) == [("training", b) for b in (1, 2, 3, 4)]
    # The request metrics name the route's template; the ingest metrics count it.
    text = client.get("/debug/prom/metrics").text
    line = (
        'det_http_request_duration_seconds_count{code="200",handler='
        '"/api/v1/trials/{trial_id}/metrics",method="POST"} 3.0'
    )
    assert line in text, [x for x in text.splitlines() if "trials" in x]
    assert 'det_metric_reports_total{group="training"} 7.0' in text
    assert "det_metric_report_ack_seconds_count 5.0" in text
    # The trial's reports show in its metrics as ever.
    r = client.get(f"/api/v1/trials/{trial_id}/metrics", params={"group": "training"})
    assert [m["total_batches"] for m in r.json()["metrics"]] == [1, 2, 3, 4]


def test_reports_the_fast_path_may_not_answer_get_the_routes_answer(master, tmp_path):
    client, app, trial_id, trial, a1, _ = master
    answered = _warm(client, app, trial_id, trial)
    one = f"/api/v1/trials/{trial_id}/metrics"
    # Another trial's id: 403 naming the trial, nothing stored.
    r = client.post(f"/api/v1/trials/{trial_id + 1}/metrics", json=_report(5), headers=trial)
    assert r.status_code == 403 and f"only its own trial (trial {trial_id}" in r.text
    # An unknown token, an agent's credential: the route's 401 and 403.
    r = client.post(one, json=_report(5), headers=bearer("not-a-token"))
    assert r.status_code == 401, r.text
    r = client.post(one, json=_report(5), headers=a1)
    assert r.status_code == 403 and "agents may not call" in r.text
    # Bodies the route refuses: 400 naming the field; an unknown field too.
    r = client.post(one, json={**_report(5), "steps_completed": -1}, headers=trial)
    assert r.status_code == 400 and "steps_completed" in r.text
    r = client.post(one, json={**_report(5), "extra": 1}, headers=trial)
    assert r.status_code == 400 and "extra" in r.text
    r = client.post(f"{one}/batch", json={"reports": []}, headers=trial)
    assert r.status_code == 400 and "reports" in r.text
    # Over the JSON limit: 413 from the body limits, before either path.
    padded = b'{"group": "training"}' + b" " * MAX_JSON_BODY_BYTES
    r = client.post(one, content=padded, headers={**trial, "content-type": "application/json"})
    assert r.status_code == 413, r.text
    # A leading zero names the trial too, as the route reads it: the route stores it.
    r = client.post(f"/api/v1/trials/0{trial_id}/metrics", json=_report(6), headers=trial)
    assert r.status_code == 200 and r.json() == {"stored": True}
    # A validation report feeds the searcher in a transaction of its own: the route.
    r = client.post(one, json=_report(7, "validation"), headers=trial)
    assert r.status_code == 200 and r.json() == {"stored": True}
    assert _answered(app) == answered
    assert _stored(app, trial_id) == [
        ("training", 1),
        ("training", 2),
        ("training", 6),
        ("validation", 7),
    ]
    # The trial's own token and a valid training report: the fast path again.
    assert client.post(one, json=_report(8), headers=trial).json() == {"stored": True}
    assert _answered(app) == answered + 1


def test_a_void_token_gets_the_routes_401_after_its_part_ended(master):
    client, app, trial_id, trial, a1, alloc = master
    answered = _warm(client, app, trial_id, trial)
    body = {"running": [], "exited": [{"allocation_id": alloc, "exit_code": 0}]}
    r = client.post("/api/v1/agents/a1/heartbeat", json=body, headers=a1)
    assert r.status_code == 200, r.text
    with app.state.ctx.db.read() as s:
        assert s.get_one(AllocationRow, alloc).state == "TERMINATED"
    r = client.post(f"/api/v1/trials/{trial_id}/metrics", json=_report(5), headers=trial)
    assert r.status_code == 401 and "has ended" in r.text
    assert _answered(app) == answered and _stored(app, trial_id)[-1] == ("training", 2)


def test_a_failed_transaction_is_stored_by_the_route_or_not_acknowledged(master, monkeypatch):
    client, app, trial_id, trial, _, _ = master
    answered = _warm(client, app, trial_id, trial)
    fast = app.state.fast_metric_reports
    one = f"/api/v1/trials/{trial_id}/metrics"
    calls = []

    def fails_once(s, batches):
        calls.append(len(batches))
        raise OperationalError("INSERT", {}, Exception("the database went away"))

    # The fast path's transaction fails: the route stores the report alone.
    monkeypatch.setattr(metrics_asgi, "store_training_rows", fails_once)
    r = client.post(one, json=_report(5), headers=trial)
    assert r.status_code == 200 and r.json() == {"stored": True}
    assert calls == [1] and fast.handed_on == 1 and _answered(app) == answered
    # Both fail (the database is down): an error, no acknowledgement, nothing stored.
    from dauntless.master.models import metrics as model_metrics

    monkeypatch.setattr(model_metrics, "store_training_rows", fails_once)
    errors = TestClient(app, raise_server_exceptions=False)
    r = errors.post(one, json=_report(6), headers=trial)
    assert r.status_code == 500 and fast.handed_on == 2 and _answered(app) == answered
    assert _stored(app, trial_id)[-1] == ("training", 5)
    with app.state.ctx.db.read() as s:
        n = s.scalar(
            select(func.count()).select_from(MetricRow).where(MetricRow.trial_id == trial_id)
        )
    assert n == 3
