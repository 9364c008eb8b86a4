"""An experiment's trial list (``GET /experiments/{id}`` and ``/experiments/{id}/trials``)
is read and written page by page (issue 37: built whole, the answer for 10,000 trials
grew the master by 26 MB that it kept)."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from dauntless.master import routes
from dauntless.master.db import MetricRow, TrialRow
from dauntless.master.models import trials

from .test_api import _create

CONFIG = """
name: many
entrypoint: python3 model_def.py
hyperparameters:
  x: {type: double, minval: 0, maxval: 1}
searcher:
  name: random
  metric: loss
  smaller_is_better: false
  max_trials: 5000
  max_concurrent_trials: 1
  max_length: {batches: 1}
max_restarts: 0
"""


def _add_trials(ctx, exp_id: int, n: int, prefix: str = "added") -> None:
    """``n`` ended trials (``n`` > 0), every third with a validation report (two, for
    the first); their request ids start with ``prefix``."""
    now = time.time()
    with ctx.db.write() as s:
        rows = [
            TrialRow(
                experiment_id=exp_id,
                request_id=f"{prefix}-{i:05d}",
                state="COMPLETED" if i % 7 else "ERROR",
                hparams={"x": i / n},
                seed=i,
                restarts=0,
                run_id=1,
                total_batches=1,
                searcher_op_length=1,
                searcher_completed_length=1,
                searcher_closed=True,
                best_validation=None if i % 3 else float(i % 101),
                start_time=now,
                end_time=now,
                failure=None if i % 7 else {"run_id": 1, "message": "exit 1"},
            )
            for i in range(n)
        ]
        s.add_all(rows)
        s.flush()
        for row in rows[::3]:
            s.add(_validation(row.id, 1, now))
        s.add(_validation(rows[0].id, 2, now))


def _validation(trial_id: int, batches: int, now: float) -> MetricRow:
    return MetricRow(
        trial_id=trial_id,
        kind="validation",
        total_batches=batches,
        values={"a": batches},
        reported_at=now,
    )


@pytest.fixture
def many(master):
    client, ctx = master
    r = _create(client, CONFIG)
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    _add_trials(ctx, exp_id, 1234)
    return client, ctx, exp_id


def _whole(ctx, exp_id: int) -> list[dict]:
    """The trial views built whole, as the routes built them before issue 37."""
    with ctx.db.read() as s:
        views = routes._trial_views(s, trials.experiment_trials(s, exp_id))
    return json.loads(json.dumps(views))


@pytest.mark.parametrize("page", [2, 7, 500, 5000])
def test_the_paged_list_is_the_whole_list(many, monkeypatch, page):
    client, ctx, exp_id = many
    monkeypatch.setattr(routes, "TRIAL_PAGE", page)
    whole = _whole(ctx, exp_id)
    assert len(whole) == 1235
    listed = client.get(f"/api/v1/experiments/{exp_id}/trials")
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    assert listed.json() == {"trials": whole}
    detail = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert detail["trials"] == whole
    exp = detail["experiment"]
    bests = [t["best_validation"] for t in whole if t["best_validation"] is not None]
    assert exp["num_trials"] == 1235
    assert exp["best_searcher_metric"] == max(bests) == 100.0  # smaller_is_better: false
    # The trial with two validations shows the later one; the others theirs or none.
    first = next(t for t in whole if t["request_id"] == "added-00000")
    assert (first["latest_validation"], first["latest_validation_batches"]) == ({"a": 2}, 2)
    assert next(t for t in whole if t["request_id"] == "added-00003")["latest_validation"] == {
        "a": 1
    }


def test_an_unknown_experiment_is_404_before_any_body(master):
    client, _ = master
    for path in ("/api/v1/experiments/77", "/api/v1/experiments/77/trials"):
        r = client.get(path)
        assert r.status_code == 404 and "77" in r.json()["detail"]


def test_page_must_be_positive(master):
    _, ctx = master
    with pytest.raises(ValueError, match="page must be >= 1"):
        routes.trial_list_response(ctx, 1, None, 0)


def test_the_peak_memory_of_a_list_is_a_page_not_the_list(master):
    client, ctx = master
    exp_id = _create(client, CONFIG).json()["experiment"]["id"]
    _add_trials(ctx, exp_id, 4000)
    path = f"/api/v1/experiments/{exp_id}"
    client.get(path)  # warm: the first request builds FastAPI's and pydantic's caches
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with client.stream("GET", path) as r:
            size = sum(len(chunk) for chunk in r.iter_bytes())
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert size > 1_500_000  # 4,001 trials of about 400 bytes of JSON each
    # The test client keeps the whole body (once as chunks, once joined); the server's
    # own share is a page: 1.6 times the body in all, measured; built whole, 11 times.
    assert peak < 3 * size, (peak, size)
