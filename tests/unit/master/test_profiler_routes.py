"""The system-metrics profiler's routes (issue 34 scope 2): a trial's reports are stored
per group and agent, bounded to one row per 10-second bucket of the master's clock, read
back in pages and as series, and refused with the field named when malformed."""

from __future__ import annotations

from dauntless.config import PROFILER_BUCKET_SECONDS, PROFILING_GROUPS
from dauntless.core import max_rows_per_hour
from dauntless.master.routes_profiler import Group

from .test_api import _create


def _trial(client) -> int:
    exp_id = _create(client).json()["experiment"]["id"]
    return client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]


def _report(i: float, agent: str = "a1") -> dict:
    return {
        "reports": [
            {"group": "cpu", "agent_id": agent, "metrics": {"cpu_util_simple": i}},
            {"group": "memory", "agent_id": agent, "metrics": {"memory_free": 1e9}},
            {
                "group": "gpu",
                "agent_id": agent,
                "metrics": {"GPU-1": {"gpu_util": 50.0, "gpu_free_memory": 2e9}},
            },
            {
                "group": "timing",
                "agent_id": agent,
                "metrics": {
                    "dataloader_next": {"mean_seconds": 0.01, "total_seconds": 0.1, "count": 10},
                    "dataloader_share": 0.25,
                },
            },
        ]
    }


def test_groups_of_the_route_are_the_config_groups():
    assert set(Group.__args__) == set(PROFILING_GROUPS)


def test_reports_are_bounded_to_one_row_per_bucket_and_read_back(master):
    client, ctx = master
    tid = _trial(client)
    path = f"/api/v1/trials/{tid}/profiler/metrics"
    now = [1_000_000.0]
    ctx.clock = lambda: now[0]
    # A profiler reporting every 2.5 s (4 times per bucket) for 200 s of the master's clock.
    seconds = 200
    posted = 0
    for k in range(seconds * 2 // 5):
        now[0] = 1_000_000.0 + k * 2.5
        r = client.post(path, json=_report(k * 2.5))
        assert r.status_code == 200, r.text
        assert r.json() == {"stored": 4}
        posted += 1
    rows = []
    after = 0
    while True:
        page = client.get(path, params={"after_id": after, "limit": 5000}).json()
        if not page["metrics"]:
            break
        rows += page["metrics"]
        after = page["next_after_id"]
    per_group = {g: sum(1 for r in rows if r["group"] == g) for g in ("cpu", "memory", "gpu")}
    buckets = seconds // PROFILER_BUCKET_SECONDS
    assert posted > buckets  # more reports than buckets: the bound is what limits rows
    assert per_group == {"cpu": buckets, "memory": buckets, "gpu": buckets}
    assert len(rows) <= max_rows_per_hour(agents=1, gpus_per_agent=1)
    # The latest report of a bucket wins.
    cpu = [r for r in rows if r["group"] == "cpu"]
    assert cpu[0]["values"] == {"cpu_util_simple": 7.5}
    assert cpu[0]["time"] == 1_000_007.5
    series = client.get(f"/api/v1/trials/{tid}/profiler/available_series").json()["series"]
    by = {(s["group"], s["agent_id"]): s for s in series}
    assert set(by) == {("cpu", "a1"), ("memory", "a1"), ("gpu", "a1"), ("timing", "a1")}
    assert by[("gpu", "a1")]["names"] == ["GPU-1/gpu_free_memory", "GPU-1/gpu_util"]
    assert by[("cpu", "a1")]["latest"] == {"cpu_util_simple": cpu[-1]["values"]["cpu_util_simple"]}
    only = client.get(path, params={"group": "timing", "limit": 2}).json()["metrics"]
    assert [r["group"] for r in only] == ["timing", "timing"]
    assert only[0]["values"]["dataloader_share"] == 0.25


def test_max_rows_per_hour_counts_groups_and_agents():
    buckets = 3600 // PROFILER_BUCKET_SECONDS
    assert max_rows_per_hour() == 5 * buckets  # no gpu group without GPUs
    assert max_rows_per_hour(agents=2, gpus_per_agent=8) == 2 * 6 * buckets


def test_bad_reports_are_refused_naming_the_field(master):
    client, _ = master
    tid = _trial(client)
    path = f"/api/v1/trials/{tid}/profiler/metrics"
    bad_group = {"reports": [{"group": "disco", "agent_id": "a", "metrics": {}}]}
    r = client.post(path, json=bad_group)
    assert r.status_code == 400 and "group" in r.text
    bad_value = {"reports": [{"group": "cpu", "agent_id": "a", "metrics": {"x": "high"}}]}
    r = client.post(path, json=bad_value)
    assert r.status_code == 400 and "reports[0].metrics.x" in r.text
    too_many = {
        "reports": [{"group": "cpu", "agent_id": "a", "metrics": {str(i): 1 for i in range(65)}}]
    }
    r = client.post(path, json=too_many)
    assert r.status_code == 400 and "at most 64" in r.text
    r = client.post("/api/v1/trials/999999/profiler/metrics", json=_report(1))
    assert r.status_code == 404
    assert client.get("/api/v1/trials/999999/profiler/available_series").status_code == 404
