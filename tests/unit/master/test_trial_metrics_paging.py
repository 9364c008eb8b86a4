"""``GET /trials/{id}/metrics`` pages (cursor on ``total_batches``) and downsamples (M4)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from .test_api import _create


@pytest.fixture
def bare(master):
    client, _ctx = master
    exp_id = _create(client).json()["experiment"]["id"]
    tid = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]
    return client, f"/api/v1/trials/{tid}/metrics"


@pytest.fixture
def trial(bare):
    client, path = bare
    reports = [
        {
            "group": "training",
            "steps_completed": b,
            "trial_run_id": 1,
            "metrics": {"loss": 1.0 / b, "lr": 0.1, "spike": 100.0 if b == 777 else 0.0},
        }
        for b in range(1, 1001)
    ]
    reports += [
        {"group": "validation", "steps_completed": b, "trial_run_id": 1, "metrics": {"acc": b}}
        for b in range(100, 1001, 100)
    ]
    for i in range(0, len(reports), 500):
        r = client.post(path + "/batch", json={"reports": reports[i : i + 500]})
        assert r.status_code == 200, r.text
    return client, path


def test_pages_cover_every_report_once_and_keep_a_count_together(trial):
    client, path = trial
    seen, cursor, pages = [], -1, 0
    while cursor is not None:
        body = client.get(path, params={"after_batches": cursor, "limit": 150}).json()
        seen += [(m["group"], m["total_batches"]) for m in body["metrics"]]
        cursor = body["next_after_batches"]
        pages += 1
        if cursor is not None:  # both groups' reports at the page's last count are in it
            last = [m for m in body["metrics"] if m["total_batches"] == cursor]
            assert len(last) == (2 if cursor % 100 == 0 else 1)
    assert len(seen) == len(set(seen)) == 1000 + 10
    assert pages == 7
    whole = client.get(path).json()
    assert [(m["group"], m["total_batches"]) for m in whole["metrics"]] == seen
    assert whole["next_after_batches"] is None


def test_names_and_group_filter_a_page(trial):
    client, path = trial
    body = client.get(
        path, params={"group": "training", "after_batches": 10, "limit": 5, "names": "loss"}
    ).json()
    assert [m["total_batches"] for m in body["metrics"]] == [11, 12, 13, 14, 15]
    assert all(set(m["values"]) == {"loss"} for m in body["metrics"])
    assert body["next_after_batches"] == 15


def test_downsample_returns_m4_series_that_keep_extremes(trial):
    client, path = trial
    body = client.get(path, params={"downsample": 64, "group": "training"}).json()
    assert body["metrics"] == [] and body["downsampling"].startswith("M4")
    series = {s["name"]: s for s in body["series"]}
    assert set(series) == {"loss", "lr", "spike"}
    spike = series["spike"]
    assert spike["raw_points"] == 1000 and spike["downsampled"]
    assert len(spike["batches"]) <= 64 and 100.0 in spike["values"]
    assert spike["batches"][spike["values"].index(100.0)] == 777
    assert spike["batches"][0] == 1 and spike["batches"][-1] == 1000
    both = client.get(path, params={"downsample": 8, "names": "acc"}).json()["series"]
    assert [(s["group"], s["name"]) for s in both] == [("validation", "acc")]


@pytest.mark.parametrize(
    "params",
    [
        {"downsample": 4},
        {"downsample": 5000},
        {"downsample": 64, "limit": 10},
        {"limit": 0},
        {"after_batches": -2},
        {"names": "bad name\n", "downsample": 64},
    ],
)
def test_bad_paging_parameters_are_refused(bare, params):
    client, path = bare
    r = client.get(path, params=params)
    assert r.status_code in (400, 422), r.text


def test_a_page_reads_what_older_masters_stored_and_big_integers(master):
    """A page is encoded by orjson; a bare ``NaN`` that an older master wrote into SQLite
    reads as null, and an integer beyond 64 bits (which orjson refuses) still answers,
    through FastAPI's own encoder."""
    client, ctx = master
    exp_id = _create(client).json()["experiment"]["id"]
    tid = client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"]
    path = f"/api/v1/trials/{tid}/metrics"
    big = 2**70 + 1
    reports = [
        {"group": "training", "steps_completed": 1, "trial_run_id": 1, "metrics": {"loss": 1.5}},
        {"group": "training", "steps_completed": 2, "trial_run_id": 1, "metrics": {"n": 3}},
    ]
    assert client.post(path + "/batch", json={"reports": reports}).status_code == 200
    nan = ctx.db.engine.dialect.name == "sqlite"  # PostgreSQL's json type refuses NaN
    if nan:
        with ctx.db.write() as s:
            s.execute(
                text('UPDATE metrics SET "values" = \'{"loss": NaN}\' WHERE total_batches = 1')
            )
    first = {"loss": None} if nan else {"loss": 1.5}
    body = client.get(path, params={"after_batches": -1, "limit": 10}).json()
    assert [m["values"] for m in body["metrics"]] == [first, {"n": 3}]
    with ctx.db.write() as s:
        s.execute(text(f'UPDATE metrics SET "values" = \'{{"n": {big}}}\' WHERE total_batches = 2'))
    r = client.get(path)
    assert r.status_code == 200, r.text
    assert [m["values"] for m in r.json()["metrics"]] == [first, {"n": big}]
