"""Training reports of several requests stored together (one group-commit transaction):
each request's flags, rows and trial batch count are what storing it alone gives. On
SQLite and PostgreSQL."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from dauntless.master.db import MetricRow, TrialRow
from dauntless.master.db.models import MetricFoldPendingRow
from dauntless.master.errors import NotFound
from dauntless.master.metric_store import finite_json, store_training_rows, training_rows
from dauntless.master.models import metrics
from dauntless.master.models.metrics import MetricsIn

CONFIG = """
name: unit
entrypoint: python3 train.py
hyperparameters: {lr: 0.1}
searcher: {name: single, metric: loss, max_length: {batches: 100}}
"""


def _trial(client) -> int:
    r = client.post("/api/v1/experiments", data={"config": CONFIG})
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    return int(client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"][0]["id"])


def _report(batches: int, **values: float) -> MetricsIn:
    return MetricsIn("training", batches, 1, {**values, "batches": batches}, None)


def _stored(ctx, tid: int) -> list[tuple]:
    with ctx.db.read() as s:
        return [
            (r.total_batches, r.values, r.epoch, r.trial_run_id, r.batch_metrics)
            for r in s.scalars(
                select(MetricRow).where(MetricRow.trial_id == tid).order_by(MetricRow.total_batches)
            )
        ]


def test_requests_stored_together_as_each_alone(master):
    client, ctx = master
    t1, t2, t3 = _trial(client), _trial(client), _trial(client)
    # Stored alone first: t1 at 1 (the batch below repeats it).
    assert metrics.report_metrics_batch(ctx, t1, [_report(1, loss=1.0)]) == [True]
    requests = [
        (t1, [_report(1, loss=9.0), _report(2, loss=0.5), _report(2, loss=8.0)]),
        (t2, [_report(5, loss=float("inf"), epochs=2)]),
        (t1, [_report(2, loss=7.0), _report(3, loss=0.25)]),  # a second request of t1
    ]
    with ctx.db.write() as s:
        flags = store_training_rows(
            s, [(tid, training_rows(tid, reports, 100.0)) for tid, reports in requests]
        )
    assert flags == [[False, True, False], [True], [False, True]]
    assert _stored(ctx, t1) == [
        (1, {"loss": 1.0, "batches": 1}, None, 1, None),
        (2, {"loss": 0.5, "batches": 2}, None, 1, None),
        (3, {"loss": 0.25, "batches": 3}, None, 1, None),
    ]
    # NaN and infinities stored as null; epoch from an "epochs" metric
    assert _stored(ctx, t2) == [(5, {"loss": None, "epochs": 2, "batches": 5}, 2.0, 1, None)]
    # The same reports stored alone, request by request, give the same rows.
    for reports in ([_report(1, loss=1.0)], requests[0][1], requests[2][1]):
        metrics.report_metrics_batch(ctx, t3, reports)
    assert _stored(ctx, t3) == _stored(ctx, t1)
    with ctx.db.read() as s:
        batches = {t.id: t.total_batches for t in s.scalars(select(TrialRow))}
        pending = s.scalar(select(func.count()).select_from(MetricFoldPendingRow))
    assert (batches[t1], batches[t2], batches[t3]) == (3, 5, 3)
    assert pending == 3 + 1 + 3  # every stored report is queued for the fold, once


def test_an_unknown_trial_fails_the_batch_and_stores_nothing(master):
    client, ctx = master
    tid = _trial(client)
    with pytest.raises(NotFound, match=f"trial {tid + 99} not found"):
        with ctx.db.write() as s:
            store_training_rows(
                s,
                [
                    (tid, training_rows(tid, [_report(1, loss=1.0)], 1.0)),
                    (tid + 99, training_rows(tid + 99, [_report(1, loss=1.0)], 1.0)),
                ],
            )
    assert _stored(ctx, tid) == []
    # Through the group commit each request gets its own answer.
    assert metrics.report_metrics_batch(ctx, tid, [_report(1, loss=1.0)]) == [True]
    with pytest.raises(NotFound):
        metrics.report_metrics_batch(ctx, tid + 99, [_report(1, loss=1.0)])


def _reference(value):
    """finite_json as it was before its first look (issue 37): always a copy."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _reference(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_reference(v) for v in value]
    return value


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSONISH)
def test_finite_json_replaces_what_it_did_and_keeps_a_plain_value_itself(value):
    out = finite_json(value)
    expected = _reference(value)
    # Equal, NaN included (as None); the same type at every level.
    assert repr(out) == repr(expected)
    if out is not value:  # a copy only where something had to change
        assert repr(value) != repr(expected)


def test_a_report_without_nan_is_stored_from_its_own_values():
    values = {"loss": 0.5, "nested": {"a": [1.0, 2]}, "ok": True}
    assert finite_json(values) is values
    assert finite_json({"x": [1.0, float("nan")]}) == {"x": [1.0, None]}
    assert finite_json({"x": float("-inf"), "t": (1.0,)}) == {"x": None, "t": [1.0]}
