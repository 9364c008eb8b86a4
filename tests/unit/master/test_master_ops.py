"""Operating the master (issue 34 scope 4): its logs and config, the cluster message, log
retention; and its Prometheus pages' refusals and contents (scope 1). In-process masters
(the log retention test on SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
import time

import pytest
import yaml
from argon2 import PasswordHasher
from databases import migrated_sqlite
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select

from dauntless.config import MasterConfig
from dauntless.master import auth_secrets
from dauntless.master.app import create_app
from dauntless.master.db import Database, TaskLogRow
from dauntless.master.models.operations import delete_expired_logs
from dauntless.master.prom import ScrapeCache
from dauntless.master.testing import Cluster, bearer, login, serve


@pytest.fixture()
def world(tmp_path, monkeypatch):
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    config = MasterConfig(
        data_dir=str(tmp_path),
        port=18083,
        security={"cluster_secret": "the-cluster-s3cret"},
        checkpoint_storage={
            "type": "s3",
            "bucket": "b",
            "access_key": "AKIA-visible-nowhere",
            "secret_key": "aws-s3cret",
        },
    )
    app = create_app(config, run_loop=False)
    root = logging.getLogger()
    level = root.level
    with TestClient(app) as client:
        admin = login(client)
        r = client.post(
            "/api/v1/users",
            headers=bearer(admin),
            json={"username": "alice", "password": "alice-pw"},
        )
        assert r.status_code == 201, r.text
        yield client, admin, login(client, "alice", "alice-pw")
    root.setLevel(level)
    logging.getLogger("dauntless").setLevel(logging.NOTSET)


def test_master_logs_config_and_log_level(world) -> None:
    client, admin, alice = world
    logging.getLogger("dauntless.master").warning("ops-line-%d", 42)
    r = client.get("/api/v1/master/logs", params={"offset": -50}, headers=bearer(admin))
    assert r.status_code == 200, r.text
    lines = r.json()["logs"]
    assert any(x["message"].endswith("ops-line-42") and x["level"] == "WARNING" for x in lines)
    ids = [x["id"] for x in lines]
    assert ids == sorted(ids) and len(lines) <= 50
    later = client.get(
        "/api/v1/master/logs", params={"offset": ids[-1] + 1}, headers=bearer(admin)
    ).json()["logs"]
    assert all(x["id"] > ids[-1] for x in later)
    # A user without the cluster's permissions reads neither the logs nor the config.
    for path in ("/api/v1/master/logs", "/api/v1/master/config"):
        assert client.get(path, headers=bearer(alice)).status_code == 403

    r = client.get("/api/v1/master/config", headers=bearer(admin))
    assert r.status_code == 200, r.text
    config = r.json()["config"]
    text = r.text
    assert "s3cret" not in text and "AKIA" not in text
    assert config["security"]["cluster_secret"] == "********"
    assert config["checkpoint_storage"]["secret_key"] == "********"
    assert config["observability"] == {"enable_prometheus": True}

    patch = {"config": {"log": {"level": "debug"}}, "field_mask": {"paths": ["log.level"]}}
    assert (
        client.patch("/api/v1/master/config", json=patch, headers=bearer(alice)).status_code == 403
    )
    r = client.patch("/api/v1/master/config", json=patch, headers=bearer(admin))
    assert r.status_code == 200 and r.json()["config"]["log"]["level"] == "debug"
    assert logging.getLogger().level == logging.DEBUG
    r = client.get("/api/v1/master/config", headers=bearer(admin))
    assert r.json()["config"]["log"]["level"] == "debug"
    bad = {"config": {"log": {"level": "loud"}}, "field_mask": {"paths": ["log.level"]}}
    r = client.patch("/api/v1/master/config", json=bad, headers=bearer(admin))
    assert r.status_code == 400 and "log.level" in r.text
    other = {"config": {"log": {"level": "info"}}, "field_mask": {"paths": ["port"]}}
    r = client.patch("/api/v1/master/config", json=other, headers=bearer(admin))
    assert r.status_code == 400 and "field_mask.paths" in r.text


def test_cluster_message_shows_on_every_answer_until_cleared(world) -> None:
    client, admin, alice = world
    body = {"message": "Maintenance at 18:00 UTC", "duration": "1h"}
    assert (
        client.put("/api/v1/master/cluster_message", json=body, headers=bearer(alice)).status_code
        == 403
    )
    r = client.put("/api/v1/master/cluster_message", json=body, headers=bearer(admin))
    assert r.status_code == 200, r.text
    shown = r.json()["clusterMessage"]
    assert shown["message"] == body["message"] and shown["endTime"] is not None
    # Everyone sees it: in GET /master (open), GET /master/cluster_message, a header.
    assert client.get("/api/v1/master").json()["cluster_message"] == body["message"]
    r = client.get("/api/v1/me", headers=bearer(alice))
    assert r.headers["x-det-cluster-message"] == "Maintenance at 18%3A00 UTC"
    got = client.get("/api/v1/master/cluster_message", headers=bearer(alice)).json()
    assert got["clusterMessage"]["message"] == body["message"]
    # A new message replaces it; bad input is refused naming the field.
    both = {"message": "x", "duration": "1h", "end_time": "2099-01-01T00:00:00Z"}
    r = client.put("/api/v1/master/cluster_message", json=both, headers=bearer(admin))
    assert r.status_code == 400 and "duration" in r.text
    past = {"message": "x", "end_time": "2001-01-01T00:00:00Z"}
    r = client.put("/api/v1/master/cluster_message", json=past, headers=bearer(admin))
    assert r.status_code == 400 and "end_time" in r.text
    # Times past year 9999 (or before 1970) are refused naming the field, not a 500 (the
    # OpenAPI fuzzer found start_time 1e300 raising OverflowError).
    for field, value in (
        ("start_time", 1e300),
        ("end_time", -5.0),
        ("duration", "99999999999999h"),
    ):
        r = client.put(
            "/api/v1/master/cluster_message",
            json={"message": "x", field: value},
            headers=bearer(admin),
        )
        assert r.status_code == 400 and field in r.text, (field, r.text)
    long = {"message": "x" * 251}
    r = client.put("/api/v1/master/cluster_message", json=long, headers=bearer(admin))
    assert r.status_code == 400 and "message" in r.text
    r = client.put(
        "/api/v1/master/cluster_message", json={"message": "Second"}, headers=bearer(admin)
    )
    assert r.status_code == 200 and r.json()["clusterMessage"]["endTime"] is None
    assert client.get("/api/v1/master").json()["cluster_message"] == "Second"

    assert client.delete("/api/v1/master/cluster_message", headers=bearer(admin)).status_code == 200
    assert client.get("/api/v1/master").json()["cluster_message"] is None
    assert "x-det-cluster-message" not in client.get("/api/v1/me", headers=bearer(alice)).headers
    got = client.get("/api/v1/master/cluster_message", headers=bearer(alice)).json()
    assert got == {"clusterMessage": None}


def test_prometheus_pages_need_an_admin_and_can_be_turned_off(world, tmp_path) -> None:
    client, admin, alice = world
    for path in ("/prom/det-state-metrics", "/debug/prom/metrics"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=bearer(alice)).status_code == 403
        r = client.get(path, headers=bearer(admin))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = client.get("/debug/prom/metrics", headers=bearer(admin)).text
    assert (
        'det_http_request_duration_seconds_count{code="403",handler="/prom/det-state-metrics",method="GET"} 1.0'
        in text
    )
    assert "determined_healthy 1.0" in text and "det_metric_fold_backlog 0.0" in text
    assert 'det_db_query_duration_seconds_count{operation="select"}' in text
    assert "process_cpu_seconds_total" in text

    off = create_app(
        MasterConfig(
            data_dir=str(tmp_path / "off"), port=18084, observability={"enable_prometheus": False}
        ),
        run_loop=False,
    )
    with TestClient(off) as c:
        token = login(c)
        r = c.get("/prom/det-state-metrics", headers=bearer(token))
        assert r.status_code == 404 and "observability.enable_prometheus" in r.text


SINGLE = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
{extra}
"""


def test_log_retention_deletes_old_trial_logs_in_batches(tmp_path, db_url) -> None:
    with serve(str(tmp_path), db_url=db_url) as m, Cluster(m.url, m.app) as c:
        c.register_agent(slots=3)
        kept = c.create_experiment(SINGLE.format(name="kept", extra=""))
        short = c.create_experiment(
            SINGLE.format(name="short", extra="retention_policy: {log_retention_days: 0}")
        )
        later = c.create_experiment(SINGLE.format(name="later", extra=""))
        started = dict(c.start_trials(3))
        trial_of = {e: c.experiment(e)["trials"][0]["id"] for e in (kept, short, later)}
        for exp_id, trial_id in trial_of.items():
            alloc = started[trial_id]
            c.log(alloc, *[f"line {i} of {exp_id}" for i in range(7)])
            c.complete(trial_id, 10, 0.5)
            c.exited(alloc, 0)
        for exp_id in trial_of:
            c.wait_state(exp_id, "COMPLETED")
        # det e set log-retention <later> --days 0; a bad value is refused naming it.
        r = c.admin.put(f"/api/v1/experiments/{later}/retain_logs", json={"num_days": 0})
        assert r.status_code == 200, r.text
        r = c.admin.put(f"/api/v1/experiments/{later}/retain_logs", json={"num_days": -2})
        assert r.status_code == 400 and "num_days" in r.text
        db = m.app.state.ctx.db

        def lines(trial_id: int) -> int:
            with db.read() as s:
                return int(
                    s.scalar(
                        select(func.count())
                        .select_from(TaskLogRow)
                        .where(TaskLogRow.trial_id == trial_id)
                    )
                )

        assert all(lines(t) == 7 for t in trial_of.values())
        # Not yet: a day's retention keeps yesterday's... but 0 days expires at once.
        removed = delete_expired_logs(db, time.time() + 1, default_days=-1, batch=3)
        assert removed == 14
        assert lines(trial_of[kept]) == 7
        assert lines(trial_of[short]) == 0 and lines(trial_of[later]) == 0
        # The master's default applies to experiments that name none (kept: 30 days).
        assert delete_expired_logs(db, time.time() + 29 * 86400, default_days=30) == 0
        r = c.admin.post("/api/v1/cleanup_logs")
        assert r.status_code == 200 and r.json() == {"removedCount": 0}
        assert delete_expired_logs(db, time.time() + 31 * 86400, default_days=30) == 7


def test_retention_schedule_runs_in_the_background(tmp_path) -> None:
    policy = {"log_retention_days": 0, "schedule": "1s"}
    with serve(str(tmp_path), retention_policy=policy) as m, Cluster(m.url, m.app) as c:
        c.register_agent(slots=1)
        exp = c.create_experiment(SINGLE.format(name="gone", extra=""))
        ((trial_id, alloc),) = c.start_trials(1)
        c.log(alloc, "soon gone")
        c.complete(trial_id, 10, 0.5)
        c.exited(alloc, 0)
        c.wait_state(exp, "COMPLETED")
        deadline = time.time() + 60
        while time.time() < deadline:
            logs = c.admin.get(f"/api/v1/trials/{trial_id}/logs").json()["logs"]
            if not logs:
                break
            time.sleep(0.2)
        assert logs == []
    bad = yaml.safe_load("{log_retention_days: 1, schedule: '0 0 * * *'}")
    with pytest.raises(ValueError, match="schedule"):
        MasterConfig(data_dir=str(tmp_path), retention_policy=bad)


def test_prometheus_pages_count_slots_queue_and_labels(tmp_path, db_url) -> None:
    with serve(str(tmp_path), db_url=db_url) as m, Cluster(m.url, m.app) as c:
        c.register_agent(slots=1)
        exp = c.create_experiment(
            """
name: two
entrypoint: python3 train.py
labels: [nightly]
hyperparameters: {x: {type: double, minval: 0, maxval: 1}}
searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 2,
           max_length: {batches: 10}}
"""
        )
        ((trial_id, alloc),) = c.start_trials(1)
        c.report(trial_id, "training", 5, {"loss": 1.0})
        state = c.admin.get("/prom/det-state-metrics").text
        master = c.admin.get("/debug/prom/metrics").text
    lines = set(state.splitlines()) | set(master.splitlines())
    for line in (
        'det_slots{agent_id="agent-0",resource_pool="default",slot_type="cpu"} 1.0',
        'det_slots_used{agent_id="agent-0",resource_pool="default",slot_type="cpu"} 1.0',
        f'det_experiment_id_label{{experiment_id="{exp}",label="nightly"}} 1.0',
        f'det_job_id_experiment_id{{experiment_id="{exp}",job_id="experiment-{exp}"}} 1.0',
        'det_allocations{resource_pool="default",task_type="TRIAL"} 1.0',
        'det_trials{state="ACTIVE"} 2.0',
        'det_scheduler_queue_depth{resource_pool="default"} 1.0',
        'det_metric_reports_total{group="training"} 1.0',
    ):
        assert line in lines, (line, state, master)
    assert any(
        x.startswith('det_container_id_allocation_id{allocation_id="') and alloc in x for x in lines
    )


def test_prometheus_pages_show_each_change_at_the_next_scrape(tmp_path) -> None:
    """The pages keep what they read between scrapes (ScrapeCache) and read again after
    any change they show: agents, allocations, trials, queue; a heartbeat is none."""
    with serve(str(tmp_path)) as m, Cluster(m.url, m.app) as c:
        cache = m.app.state.ctx.prom.cache
        statements: list[str] = []
        event.listen(
            m.app.state.ctx.db.engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *a: statements.append(statement),
        )

        def scrape() -> set[str]:
            state = c.admin.get("/prom/det-state-metrics")
            master = c.admin.get("/debug/prom/metrics")
            assert state.status_code == master.status_code == 200, (state.text, master.text)
            return set(state.text.splitlines()) | set(master.text.splitlines())

        slots = '{agent_id="agent-0",resource_pool="default",slot_type="cpu"}'
        c.register_agent(slots=2)
        lines = scrape()
        assert f"det_slots_used{slots} 0.0" in lines and f"det_slots{slots} 2.0" in lines
        assert "det_metric_fold_backlog 0.0" in lines
        statements.clear()
        state = c.admin.get("/prom/det-state-metrics").text
        assert set(state.splitlines()) <= lines  # nothing changed: kept
        assert "det_metric_fold_backlog 0.0" in c.admin.get("/debug/prom/metrics").text
        # No read of the state, the fold backlog or the token (the control loop and the
        # fold read on their own meanwhile: only the pages' statements count).
        marks = ("GROUP BY experiments.state", "count(*) AS count_1 \nFROM metric_folds_pending")
        assert not [x for x in statements if any(k in x for k in (*marks, "user_sessions"))]

        exp = c.create_experiment(SINGLE.format(name="seen", extra=""))
        lines = scrape()
        assert 'det_trials{state="ACTIVE"} 1.0' in lines, lines
        ((trial_id, alloc),) = c.start_trials(1)
        lines = scrape()
        assert f"det_slots_used{slots} 1.0" in lines
        assert (
            f'det_job_id_experiment_id{{experiment_id="{exp}",job_id="experiment-{exp}"}} 1.0'
            in lines
        )
        c.heartbeat()  # sets last_heartbeat only (a bulk UPDATE): the pages stay kept
        assert cache.state() is not None
        c.report(trial_id, "training", 5, {"loss": 1.0})  # a pending fold: counted again
        assert cache.fold_backlog() is None
        c.complete(trial_id, 10, 0.5)
        c.exited(alloc, 0)
        c.wait_state(exp, "COMPLETED")
        lines = scrape()
        assert f"det_slots_used{slots} 0.0" in lines
        assert 'det_trials{state="COMPLETED"} 1.0' in lines
        assert not any(x.startswith("det_container_id_allocation_id{") for x in lines)


def test_scrape_cache_reads_again_after_its_max_age(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    db.migrate()
    now = [0.0]
    cache = ScrapeCache(db, clock=lambda: now[0], max_age=30.0)
    assert cache.state() is None and cache.fold_backlog() is None
    page, queued = cache.read_state()
    assert cache.state() == (page, queued) and queued == {}
    assert cache.read_fold_backlog() == 0 and cache.fold_backlog() == 0
    now[0] = 29.9
    assert cache.state() is not None
    now[0] = 30.0  # a change no session of this master made shows within max_age
    assert cache.state() is None
    with pytest.raises(ValueError, match="max_age"):
        ScrapeCache(db, max_age=0)
    db.dispose()


def test_usage_reports_sum_the_allocations_recorded_durations(tmp_path, db_url) -> None:
    config = """
name: used-{n}
entrypoint: python3 train.py
labels: [team-{n}]
resources: {{slots_per_trial: {n}}}
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
"""
    with serve(str(tmp_path), db_url=db_url) as m, Cluster(m.url, m.app) as c:
        c.register_agent(slots=3)
        exps = [c.create_experiment(config.format(n=n)) for n in (1, 2)]
        started = c.start_trials(2)
        time.sleep(1.0)
        for trial_id, alloc in started:
            c.complete(trial_id, 10, 0.5)
            c.exited(alloc, 0)
        for exp_id in exps:
            c.wait_state(exp_id, "COMPLETED")
        allocs = c.admin.get("/api/v1/allocations").json()["allocations"]
        expected = sum((a["ended_at"] - a["started_at"]) * len(a["slot_ids"]) for a in allocs)
        assert expected > 2.9  # 1 + 2 slots for over a second
    # The records survive a restart of the master.
    with serve(str(tmp_path), db_url=db_url) as m, Cluster(m.url, m.app) as c:
        summary = c.admin.get("/api/v1/resources/usage", params={"days": 1}).json()
        assert summary["total"] == pytest.approx(expected, rel=0.01)
        assert summary["by_username"] == {"admin": pytest.approx(expected, rel=0.01)}
        assert set(summary["by_experiment_label"]) == {"team-1", "team-2"}
        for n, exp_id in zip((1, 2), exps, strict=True):
            mine = sum(
                (a["ended_at"] - a["started_at"]) * len(a["slot_ids"])
                for a in allocs
                if a["experiment_id"] == exp_id
            )
            assert summary["by_experiment_label"][f"team-{n}"] == pytest.approx(mine, rel=0.01)
        assert summary["by_workspace"] == {"Uncategorized": pytest.approx(expected, rel=0.01)}
        today = time.strftime("%Y-%m-%d", time.gmtime())
        agg = c.admin.get(
            "/api/v1/resources/allocation/aggregated",
            params={"start_date": today, "end_date": today},
        ).json()["resource_entries"]
        assert sum(e["seconds"] for e in agg) == pytest.approx(expected, rel=0.01)
        raw = c.admin.get(
            "/api/v1/resources/allocation/raw",
            params={
                "timestamp_after": "2000-01-01T00:00:00Z",
                "timestamp_before": "2100-01-01T00:00:00Z",
            },
        ).json()["resource_entries"]
        assert sorted(e["slots"] for e in raw) == [1, 2]
        assert sum(e["seconds"] * e["slots"] for e in raw) == pytest.approx(expected, rel=0.01)
        bad = c.admin.get(
            "/api/v1/resources/allocation/raw",
            params={
                "timestamp_after": "2100-01-01T00:00:00Z",
                "timestamp_before": "2000-01-01T00:00:00Z",
            },
        )
        assert bad.status_code == 400 and "start time" in bad.text
        bad = c.admin.get(
            "/api/v1/resources/allocation/aggregated",
            params={"start_date": "yesterday", "end_date": today},
        )
        assert bad.status_code == 400 and "start_date" in bad.text
