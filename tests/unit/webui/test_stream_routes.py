"""The WebUI's API in-process: chart series (downsampled, stored, incremental), metric
names, allocations and the server-sent event streams."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import uuid

import pytest
from databases import fresh_postgres_database, migrated_sqlite, postgres_available
from fastapi.testclient import TestClient
from sqlalchemy import select

from dauntless.config import MasterConfig
from dauntless.master import loop, routes_stream
from dauntless.master.app import create_app
from dauntless.master.db import MetricRow, TaskLogRow, TrialRow
from dauntless.master.db.models import MetricSummaryRow
from dauntless.master.metric_series import fold_metric_reports
from dauntless.master.models import experiments
from dauntless.master.routes_stream import dumps_json, sse_event
from dauntless.master.testing import DEADLINE, bearer, login, sign_in, wait_for

CONFIG = """
name: charts
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
  lr: {type: double, minval: 0.001, maxval: 0.1}
searcher:
  name: random
  metric: accuracy
  smaller_is_better: false
  max_trials: 3
  max_length: {batches: 100000}
max_restarts: 1
"""


@pytest.fixture()
def master(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18081), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db_master(request, tmp_path):
    """A master on SQLite, or on a fresh PostgreSQL database when one answers."""
    with contextlib.ExitStack() as stack:
        db_url = None
        if request.param == "postgres":
            if not postgres_available():
                pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
            db_url = stack.enter_context(fresh_postgres_database(migrated=True))
        else:
            migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
        app = create_app(MasterConfig(data_dir=str(tmp_path), db_url=db_url), run_loop=False)
        with TestClient(app) as client:
            sign_in(client)
            yield client, app.state.ctx


def _experiment(client) -> int:
    r = client.post("/api/v1/experiments", data={"config": CONFIG, "activate": "false"})
    assert r.status_code == 201, r.text
    return r.json()["experiment"]["id"]


def _trial(ctx, exp_id: int, lr: float) -> int:
    with ctx.db.write() as s:
        t = TrialRow(
            experiment_id=exp_id,
            request_id=uuid.uuid4().hex,
            state="ACTIVE",
            hparams={"lr": lr, "global_batch_size": 8},
            seed=1,
            start_time=time.time(),
        )
        s.add(t)
        s.flush()
        return t.id


def _metrics(ctx, trial_id: int, kind: str, points: list[tuple[int, dict]]) -> None:
    """Store reports as the master does: the rows, and their summaries in one transaction
    (values as given, so SQLite holds a NaN as the bare word an older master wrote)."""
    with ctx.db.write() as s:
        s.add_all(
            MetricRow(
                trial_id=trial_id, kind=kind, total_batches=b, values=v, reported_at=time.time()
            )
            for b, v in points
        )
        fold_metric_reports(s, trial_id, kind, points)


def _dialect(ctx) -> str:
    return ctx.db.engine.dialect.name


def _events(text: str) -> list[tuple[str, dict, str | None]]:
    out = []
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line.startswith(":") or ": " not in line:
                continue
            key, value = line.split(": ", 1)
            fields[key] = value
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return out


def test_series_are_downsampled_per_trial_with_extremes(any_db_master):
    client, ctx = any_db_master
    exp_id = _experiment(client)
    trials = [_trial(ctx, exp_id, lr) for lr in (0.01, 0.02, 0.03)]
    for i, t in enumerate(trials):
        pts = [(b, {"loss": 1.0 / b + i, "batches": b}) for b in range(10, 30_010, 10)]
        pts[1234] = (pts[1234][0], {"loss": 99.0 + i})  # a spike each
        _metrics(ctx, t, "training", pts)
    _metrics(ctx, trials[0], "validation", [(100, {"accuracy": 0.5}), (200, {"accuracy": 0.7})])

    r = client.get(
        f"/api/v1/experiments/{exp_id}/metrics",
        params={"group": "training", "name": "loss", "max_points": 200},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["trial_id"] for s in body["series"]] == trials
    assert body["downsampling"].startswith("M4")
    for i, s in enumerate(body["series"]):
        assert 0 < len(s["batches"]) <= 200 and len(s["batches"]) == len(s["values"])
        assert s["raw_points"] == 3000 and s["downsampled"] is True
        assert max(s["values"]) == 99.0 + i
        assert s["batches"][0] == 10 and s["batches"][-1] == 30_000
        assert s["batches"] == sorted(s["batches"])

    # default name: the searcher metric; short series come back whole
    body = client.get(f"/api/v1/experiments/{exp_id}/metrics").json()
    assert body["name"] == "accuracy" and body["group"] == "validation"
    assert body["series"] == [
        {
            "trial_id": trials[0],
            "batches": [100, 200],
            "values": [0.5, 0.7],
            "raw_points": 2,
            "downsampled": False,
        }
    ]

    # only some trials
    body = client.get(
        f"/api/v1/experiments/{exp_id}/metrics",
        params={"group": "training", "name": "loss", "trial_id": [trials[2]]},
    ).json()
    assert [s["trial_id"] for s in body["series"]] == [trials[2]]


def test_series_follow_new_reports_and_skip_bad_values(any_db_master):
    client, ctx = any_db_master
    exp_id = _experiment(client)
    t1 = _trial(ctx, exp_id, 0.01)
    _metrics(ctx, t1, "validation", [(10, {"accuracy": 0.1}), (20, {"accuracy": 0.2})])
    url = f"/api/v1/experiments/{exp_id}/metrics"
    assert client.get(url).json()["series"][0]["values"] == [0.1, 0.2]
    # later reports, a second trial, a string, and (SQLite stores it as the bare word NaN,
    # which its JSON functions refuse; PostgreSQL refuses to store it) a NaN
    t2 = _trial(ctx, exp_id, 0.02)
    nan = float("nan") if _dialect(ctx) == "sqlite" else None
    _metrics(
        ctx,
        t1,
        "validation",
        [
            (30, {"accuracy": 0.3}),
            (40, {"accuracy": nan, "loss": 1.0}),
            (50, {"accuracy": "n/a"}),
            (60, {"accuracy": 0.6}),
        ],
    )
    _metrics(ctx, t2, "validation", [(10, {"accuracy": 0.9})])
    series = {s["trial_id"]: s for s in client.get(url).json()["series"]}
    assert series[t1]["batches"] == [10, 20, 30, 60]
    assert series[t1]["values"] == [0.1, 0.2, 0.3, 0.6]
    assert series[t2]["values"] == [0.9]
    with ctx.db.read() as s:  # one summary per (trial, group, name), updated in place
        stored = s.execute(
            select(MetricSummaryRow.trial_id, MetricSummaryRow.name).where(
                MetricSummaryRow.name != ""
            )
        ).all()
    assert sorted(stored) == sorted([(t1, "accuracy"), (t1, "loss"), (t2, "accuracy")])


def test_metric_names_and_errors(any_db_master):
    client, ctx = any_db_master
    exp_id = _experiment(client)
    t = _trial(ctx, exp_id, 0.01)
    _metrics(
        ctx, t, "training", [(10, {"loss": 2.0}), (20, {"loss": 1.0, "lr_now": 0.1, "note": "x"})]
    )
    nan = float("nan") if _dialect(ctx) == "sqlite" else 0.25
    _metrics(ctx, t, "validation", [(20, {"accuracy": 0.5, "validation_loss": nan})])
    names = client.get(f"/api/v1/experiments/{exp_id}/metrics/names").json()
    assert names == {"training": ["loss", "lr_now"], "validation": ["accuracy", "validation_loss"]}
    assert client.get("/api/v1/experiments/99/metrics/names").status_code == 404
    assert client.get("/api/v1/experiments/99/metrics").status_code == 404
    r = client.get(f"/api/v1/experiments/{exp_id}/metrics", params={"name": 'a"b'})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "name"
    for bad in ({"group": "test"}, {"max_points": 2}, {"max_points": 5000}):
        assert client.get(f"/api/v1/experiments/{exp_id}/metrics", params=bad).status_code == 400


SINGLE = """
name: one
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8, lr: 0.1}
searcher: {name: single, metric: accuracy, max_length: {batches: 20}}
max_restarts: 1
"""


def test_allocations_say_which_trial_holds_which_slots(master):
    client, ctx = master
    client.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}, {"id": "cpu1"}]})
    r = client.post("/api/v1/experiments", data={"config": SINGLE})
    exp_id = r.json()["experiment"]["id"]
    assert loop.schedule_pass(ctx) == 1
    first = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    client.post(f"/api/v1/allocations/{first['allocation_id']}/exited", json={"exit_code": 137})
    # The restart was placed when the exit was reported (this pass places nothing more).
    assert loop.schedule_pass(ctx) == 0
    second = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"][0]
    trial_id = first["trial_id"]

    every = client.get("/api/v1/allocations", params={"trial_id": trial_id}).json()["allocations"]
    assert [(a["id"], a["run_id"], a["exit_code"]) for a in every] == [
        (first["allocation_id"], 1, 137),
        (second["allocation_id"], 2, None),
    ]
    assert every[0]["state"] == "TERMINATED" and every[1]["state"] != "TERMINATED"
    live = client.get("/api/v1/allocations", params={"active": "true"}).json()["allocations"]
    assert [(a["id"], a["experiment_id"], a["slot_ids"]) for a in live] == [
        (second["allocation_id"], exp_id, second["slot_ids"])
    ]
    done = client.get("/api/v1/allocations", params={"active": "false"}).json()["allocations"]
    assert [a["id"] for a in done] == [first["allocation_id"]]

    events = _events(client.get("/api/v1/stream/cluster", params={"max_seconds": 0.2}).text)
    name, data, _ = events[0]
    assert name == "cluster"
    held = {sl["id"]: sl["allocation_id"] for sl in data["agents"][0]["slots"]}
    assert held[second["slot_ids"][0]] == second["allocation_id"]
    assert "last_heartbeat" not in data["agents"][0]
    assert [a["trial_id"] for a in data["allocations"]] == [trial_id]
    if "resource_pools" in data:
        assert (
            data["resource_pools"] == client.get("/api/v1/resource-pools").json()["resource_pools"]
        )


def _reads_of(monkeypatch, name: str) -> threading.Semaphore:
    """Count the calls of ``routes_stream.<name>`` (a stream's read): the semaphore is
    released once each time a call has returned, so a test can wait for the Nth read."""
    done = threading.Semaphore(0)
    original = getattr(routes_stream, name)

    def noted(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:
            done.release()

    monkeypatch.setattr(routes_stream, name, noted)
    return done


def test_experiments_stream_sends_changes_only(master, monkeypatch):
    client, ctx = master
    exp_id = _experiment(client)
    reads = _reads_of(monkeypatch, "experiments_page")

    def rename() -> None:
        assert reads.acquire(timeout=30)  # after the stream's first event
        experiments.patch_experiment(ctx, exp_id, "renamed", None, None)

    thread = threading.Thread(target=rename)
    thread.start()
    r = client.get("/api/v1/stream/experiments", params={"max_seconds": 2.0})
    thread.join()
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.startswith("retry: ")
    events = _events(r.text)
    assert [e[0] for e in events] == ["experiments", "experiments"]  # 4+ polls, 2 changes
    assert events[0][1]["experiments"][0]["name"] == "charts"
    assert events[1][1]["experiments"][0]["name"] == "renamed"
    assert events[1][1]["total"] == 1
    # archived=true holds none; all holds the one
    only = _events(
        client.get(
            "/api/v1/stream/experiments", params={"archived": "true", "max_seconds": 0.1}
        ).text
    )
    assert only[0][1] == {"experiments": [], "total": 0}
    every = _events(
        client.get(
            "/api/v1/stream/experiments", params={"archived": "all", "max_seconds": 0.1}
        ).text
    )
    assert every[0][1]["total"] == 1


def test_experiment_stream_and_unknown_objects(master):
    client, ctx = master
    exp_id = _experiment(client)
    t = _trial(ctx, exp_id, 0.05)
    events = _events(
        client.get(f"/api/v1/stream/experiments/{exp_id}", params={"max_seconds": 0.1}).text
    )
    assert events[0][0] == "experiment"
    assert events[0][1] == client.get(f"/api/v1/experiments/{exp_id}").json()
    assert t in [tr["id"] for tr in events[0][1]["trials"]]
    assert client.get("/api/v1/stream/experiments/99").status_code == 404
    assert client.get("/api/v1/stream/trials/99/logs").status_code == 404
    assert client.get("/api/v1/stream/experiments", params={"archived": "maybe"}).status_code == 400


def _best(ctx, trial_id: int, value: float | None) -> None:
    with ctx.db.write() as s:
        s.get(TrialRow, trial_id).best_validation = value


def test_experiment_stream_sends_a_summary_with_the_first_chart_first(master):
    """With chart_* parameters the first event is the experiment and the chart's series
    (the best N trials by the searcher metric), before the full body (issue 22)."""
    client, ctx = master
    exp_id = _experiment(client)  # accuracy, larger is better
    trials = []
    for i, best in enumerate([0.5, 0.9, None, 0.7, 0.9]):
        t = _trial(ctx, exp_id, 0.01 * (i + 1))
        _best(ctx, t, best)
        if best is not None:
            _metrics(ctx, t, "validation", [(b, {"accuracy": best * b / 30}) for b in (10, 20, 30)])
        trials.append(t)
    url = f"/api/v1/stream/experiments/{exp_id}"

    def stream(**params) -> list[tuple[str, dict, str | None]]:
        r = client.get(url, params={"max_seconds": 0.1, **params})
        assert r.status_code == 200, r.text
        return _events(r.text)

    events = stream(chart_group="validation", chart_top=3)
    assert [e[0] for e in events] == ["summary", "experiment"]
    summary, full = events[0][1], events[1][1]
    assert full == client.get(f"/api/v1/experiments/{exp_id}").json()
    assert summary["experiment"] == full["experiment"]
    assert "trials" not in summary
    # Best first, ties by id, the trial without a value last (and out of the top 3).
    assert summary["chart_trial_ids"] == [trials[1], trials[4], trials[3]]
    chart = client.get(
        f"/api/v1/experiments/{exp_id}/metrics",
        params={"group": "validation", "trial_id": summary["chart_trial_ids"]},
    ).json()
    assert summary["chart"] == chart
    assert summary["chart"]["name"] == "accuracy"
    assert [s["trial_id"] for s in chart["series"]] == sorted(summary["chart_trial_ids"])
    # At most chart_all_up_to trials: every one; no chart_top: every one.
    count = len(full["trials"])  # ours, and any the searcher created
    assert count >= 5
    assert stream(chart_group="validation", chart_top=2, chart_all_up_to=count - 1)[0][1][
        "chart_trial_ids"
    ] == [trials[1], trials[4]]
    for params in ({"chart_top": 2, "chart_all_up_to": count}, {}):
        summary = stream(chart_group="validation", **params)[0][1]
        assert summary["chart_trial_ids"] is None
        assert len(summary["chart"]["series"]) == 4  # one trial has no values
    # Chosen trials (another experiment's ids are left out), another metric and group.
    events = stream(chart_group="training", chart_name="loss", chart_trial_id=[trials[0], 10_000])
    summary = events[0][1]
    assert summary["chart_trial_ids"] == [trials[0]]
    assert (summary["chart"]["group"], summary["chart"]["name"]) == ("training", "loss")
    assert summary["chart"]["series"] == []
    # No chart_group: no summary, as before.
    assert [e[0] for e in stream(chart_top=3)] == ["experiment"]
    # Bad parameters are refused before the stream starts, naming the field.
    r = client.get(url, params={"chart_group": "validation", "chart_name": 'a"b'})
    assert r.status_code == 400 and "chart_name" in r.text
    r = client.get(url, params={"chart_group": "test"})
    assert r.status_code == 400 and "chart_group" in r.text
    r = client.get(url, params={"chart_group": "validation", "chart_top": 0})
    assert r.status_code == 400 and "chart_top" in r.text
    r = client.get("/api/v1/stream/experiments/99", params={"chart_group": "validation"})
    assert r.status_code == 404


def _end_streams_when(monkeypatch, done) -> list[int]:
    """End every stream at the end of the poll in which ``done()`` first holds (as the
    master's stopping ends it); returns a list that grows by one each poll. Tests count
    polls with it instead of timing them."""
    polls: list[int] = []
    ended = routes_stream._ended

    async def counted(request, credential):
        polls.append(1)
        return b"" if done() else await ended(request, credential)

    monkeypatch.setattr(routes_stream, "_ended", counted)
    return polls


def test_an_idle_experiment_stream_does_not_rebuild_its_body(master, monkeypatch):
    """Polls read the body again only after a committed change (or STALE_SECONDS).

    Counted in polls, not seconds: each stream ends after a number of polls or once it
    read what the test waits for; max_seconds is a deadline for failure only."""
    client, ctx = master
    exp_id = _experiment(client)
    t = _trial(ctx, exp_id, 0.05)
    reads: list[int] = []
    original = routes_stream.experiment_detail_json

    def counted(request, exp_id):
        try:
            yield from original(request, exp_id)
        finally:
            reads.append(1)  # once the read is done

    monkeypatch.setattr(routes_stream, "experiment_detail_json", counted)
    monkeypatch.setattr(routes_stream, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(routes_stream, "STALE_SECONDS", 3600.0)  # no rereads by the clock
    url = f"/api/v1/stream/experiments/{exp_id}"
    end = {"polls": 20, "reads": 0}
    polls = _end_streams_when(
        monkeypatch, lambda: len(polls) >= end["polls"] or 0 < end["reads"] <= len(reads)
    )
    params = {"max_seconds": DEADLINE}
    events = _events(client.get(url, params=params).text)
    assert len(polls) == 20
    assert len(reads) == 1, f"{len(reads)} reads of an unchanged body in 20 polls"
    assert [e[0] for e in events] == ["experiment"]

    def report() -> None:
        wait_for("the stream's first read", lambda: reads)
        _metrics(ctx, t, "validation", [(10, {"accuracy": 0.25})])

    # This stream ends once it read the body a second time: after the report's change.
    reads.clear()
    polls.clear()
    end.update(polls=10**9, reads=2)
    thread = threading.Thread(target=report)
    thread.start()
    events = _events(client.get(url, params=params).text)
    thread.join()
    assert len(reads) == 2  # the first, and one after the report
    assert [e[0] for e in events] == ["experiment", "experiment"]
    mine = [tr for tr in events[1][1]["trials"] if tr["id"] == t]
    assert mine[0]["latest_validation"] == {"accuracy": 0.25}
    # Changes the master's ORM does not see still show, STALE_SECONDS late at most: with
    # no change at all, the stream reads the body again (it ends after that second read).
    monkeypatch.setattr(routes_stream, "STALE_SECONDS", 0.3)
    reads.clear()
    polls.clear()
    client.get(url, params=params)
    assert len(reads) == 2
    # The experiments list stream works the same way.
    monkeypatch.setattr(routes_stream, "STALE_SECONDS", 3600.0)
    calls: list[int] = []
    page = routes_stream.experiments_page
    monkeypatch.setattr(routes_stream, "experiments_page", lambda *a: calls.append(1) or page(*a))
    polls.clear()
    end.update(polls=10, reads=0)
    client.get("/api/v1/stream/experiments", params=params)
    assert len(polls) == 10 and len(calls) == 1


def test_logs_stream_follows_new_lines_and_resumes(master, monkeypatch):
    client, ctx = master
    exp_id = _experiment(client)
    t = _trial(ctx, exp_id, 0.05)

    def add(*texts: str) -> None:
        with ctx.db.write() as s:
            s.add_all(
                TaskLogRow(
                    trial_id=t, allocation_id="al", timestamp=time.time(), stdtype="stdout", log=x
                )
                for x in texts
            )

    add("one", "two")
    # Each read of the stream, with the lines it returned.
    reads = threading.Semaphore(0)
    returned: list[list[str]] = []
    read = routes_stream.get_trial_logs

    def noted(*args, **kwargs):
        try:
            body = read(*args, **kwargs)
            returned.append([line["log"] for line in body["logs"]])
            return body
        finally:
            reads.release()

    monkeypatch.setattr(routes_stream, "get_trial_logs", noted)

    def later() -> None:
        for _ in range(2):  # the route's check that the trial exists, the stream's first read
            assert reads.acquire(timeout=DEADLINE)
        add("three")
        # Once a read of the open stream has returned the new line, end the stream (as the
        # master's stopping does): it sends that batch first, then ends.
        while ["three"] not in returned:
            assert reads.acquire(timeout=DEADLINE)
        routes_stream._stopping.set()

    # Proven by ordering, not a clock: the line is added only after the stream sent the
    # first batch, and the stream ends only after it read the new line, so the new line
    # reaching the client shows the open stream followed it. max_seconds is a deadline
    # for failure only (the stream would otherwise stay open).
    thread = threading.Thread(target=later)
    thread.start()
    try:
        events = _events(
            client.get(f"/api/v1/stream/trials/{t}/logs", params={"max_seconds": DEADLINE}).text
        )
        thread.join()
    finally:
        routes_stream._stopping.clear()
    logs = [e for e in events if e[0] == "logs"]
    assert [[line["log"] for line in e[1]["logs"]] for e in logs] == [["one", "two"], ["three"]]
    assert logs[0][1]["trial_state"] == "ACTIVE"
    assert int(logs[0][2]) == logs[0][1]["logs"][-1]["id"]
    # a reconnecting EventSource sends Last-Event-ID: only later lines come
    resumed = _events(
        client.get(
            f"/api/v1/stream/trials/{t}/logs",
            params={"max_seconds": 0.1},
            headers={"Last-Event-ID": logs[0][2]},
        ).text
    )
    assert [line["log"] for e in resumed if e[0] == "logs" for line in e[1]["logs"]] == ["three"]
    # a state change with no new line is its own event
    with ctx.db.write() as s:
        s.get(TrialRow, t).state = "PAUSED"
    quiet = _events(
        client.get(
            f"/api/v1/stream/trials/{t}/logs", params={"max_seconds": 0.1, "after_id": logs[1][2]}
        ).text
    )
    assert quiet == [("state", {"trial_state": "PAUSED"}, logs[1][2])]


def test_event_framing():
    assert sse_event("logs", '{"a":1}', 7) == b'event: logs\nid: 7\ndata: {"a":1}\n\n'
    assert sse_event("x", "a\nb") == b"event: x\ndata: a\ndata: b\n\n"
    with pytest.raises(ValueError, match="event"):
        sse_event("two\nlines", "{}")
    assert dumps_json({"v": [float("nan"), 1.5, float("inf")]}) == '{"v":[null,1.5,null]}'


def test_a_termination_signal_ends_open_streams(master, monkeypatch):
    client, _ = master
    seen: list[int] = []
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        routes_stream._watch_for_shutdown()
        routes_stream._watch_for_shutdown()  # wraps once only
        assert not routes_stream._stopping.is_set()
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]  # the server's own handler still runs
        assert routes_stream._stopping.is_set()
        # A stream with no max_seconds ends after its first event once the master is
        # stopping: one read, and the request returns (the join's timeout is a deadline
        # for failure only; without the stop the stream would stay open).
        reads = _reads_of(monkeypatch, "experiments_page")
        out: dict[str, str] = {}

        def watch() -> None:
            out["text"] = client.get("/api/v1/stream/experiments").text  # no max_seconds

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        watcher.join(timeout=DEADLINE)
        assert not watcher.is_alive(), "the stream went on after the termination signal"
        assert reads.acquire(timeout=0) and not reads.acquire(timeout=0)  # exactly one read
        events = _events(out["text"])
        assert [e[0] for e in events] == ["experiments"]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        routes_stream._stopping.clear()


def test_a_stream_ends_when_its_token_is_revoked(master, monkeypatch):
    client, _ = master
    monkeypatch.setattr(routes_stream, "REAUTH_SECONDS", 0.2)
    token = login(client)
    out: dict[str, str] = {}

    def watch() -> None:
        out["text"] = client.get("/api/v1/stream/experiments", headers=bearer(token)).text

    reads = _reads_of(monkeypatch, "experiments_page")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert reads.acquire(timeout=30)  # the stream is open and sent its first event
    assert watcher.is_alive()  # no max_seconds: open until something ends it
    assert client.post("/api/v1/auth/logout", headers=bearer(token)).status_code == 200
    watcher.join(timeout=10)
    assert not watcher.is_alive(), "the stream outlived its revoked token"
    events = _events(out["text"])
    assert [e[0] for e in events] == ["experiments", "unauthorized"]
    assert events[-1][1]["detail"].startswith("the token (id ")  # "... has been revoked"
    assert events[-1][1]["detail"].endswith(" has been revoked")
    # The client's reconnection is refused; the master's own session still streams.
    assert client.get("/api/v1/stream/experiments", headers=bearer(token)).status_code == 401
    assert client.get("/api/v1/stream/experiments", params={"max_seconds": 0.1}).status_code == 200
