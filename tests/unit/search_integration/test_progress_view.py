"""Visible search progress: the trial view's searcher fields and the CLI's describe /
list-trials, against a real in-process master driven through a small ASHA search."""

from __future__ import annotations

import re
from typing import Any

import pytest
from databases import migrated_sqlite
from fastapi.testclient import TestClient

from dauntless.cli import experiment as experiment_cmd
from dauntless.cli import main
from dauntless.cli._render import (
    batches_cell,
    full_length_batches,
    stopped_early,
    trial_row,
)
from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import sign_in

# 4 trials, divisor 2, rungs of 2 and 4 batches, all 4 running at once.
ASHA = """
name: tiny-asha
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
  lr: {type: log, base: 10, minval: -4, maxval: -1}
searcher:
  name: adaptive_asha
  metric: accuracy
  smaller_is_better: false
  max_trials: 4
  max_time: 4
  time_metric: batches
  divisor: 2
  max_rungs: 2
  mode: aggressive
  max_concurrent_trials: 4
reproducibility:
  experiment_seed: 3
"""


class _InProcessSession:
    """What the CLI's commands need of a Session, answered by the in-process master."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def __enter__(self) -> _InProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get_experiment(self, experiment_id: int) -> Any:
        r = self.client.get(f"/api/v1/experiments/{experiment_id}")
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture()
def master(tmp_path, monkeypatch):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        monkeypatch.setattr(
            experiment_cmd, "open_session", lambda args, **kw: _InProcessSession(client)
        )
        yield client, app.state.ctx


def _validate(client, trial_id: int, batches: int, accuracy: float) -> None:
    r = client.post(
        f"/api/v1/trials/{trial_id}/metrics",
        json={
            "group": "validation",
            "steps_completed": batches,
            "trial_run_id": 1,
            "metrics": {"accuracy": accuracy, "batches": batches},
        },
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"/api/v1/trials/{trial_id}/searcher/completed_operation",
        json={"op": {"length": batches}, "searcher_metric": accuracy},
    )
    assert r.status_code == 200, r.text


def _trials(client, exp_id: int) -> dict[int, dict[str, Any]]:
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    return {t["id"]: t for t in body["trials"]}


def _row(text: str, trial_id: int) -> list[str]:
    line = next(x for x in text.splitlines() if x.split()[:1] == [str(trial_id)])
    return re.split(r"\s{2,}", line.strip())


def test_describe_shows_rungs_targets_and_early_stops(master, capsys):
    client, ctx = master
    r = client.post("/api/v1/experiments", data={"config": ASHA})
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    r = client.post(
        "/api/v1/agents",
        json={"id": "a1", "slots": [{"id": f"cpu{i}", "type": "cpu"} for i in range(4)]},
    )
    assert r.status_code == 200, r.text
    assert loop.schedule_pass(ctx) == 4
    specs = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}).json()["start"]
    alloc = {s["trial_id"]: s["allocation_id"] for s in specs}
    t1, t2, t3, t4 = sorted(alloc)

    trials = _trials(client, exp_id)
    assert all(t["target_length"] == 2 and t["searcher_closed"] is False for t in trials.values())
    # Rung 0 (2 batches): the first result is promoted; then each is kept only if it is
    # in the top max(n // 2, 1) of the n results so far.
    for tid, acc in ((t1, 0.5), (t2, 0.4), (t3, 0.9), (t4, 0.1)):
        _validate(client, tid, 2, acc)
    trials = _trials(client, exp_id)
    assert {tid: (t["target_length"], t["searcher_closed"]) for tid, t in trials.items()} == {
        t1: (4, False),
        t2: (2, True),
        t3: (4, False),
        t4: (2, True),
    }
    code = main(["experiment", "describe", str(exp_id)])
    out = capsys.readouterr().out
    assert code == 0
    assert _row(out, t1)[1:4:2] == ["ACTIVE", "2/4"]  # training on to the next rung
    assert re.search(r"^Stopped early:\s+0 of 4 trials$", out, re.M), out

    # The stopped trials exit (their harness sees the searcher closed them).
    for tid in (t2, t4):
        client.post(f"/api/v1/allocations/{alloc[tid]}/exited", json={"exit_code": 0})
    for tid, acc in ((t1, 0.6), (t3, 0.95)):
        _validate(client, tid, 4, acc)
        client.post(f"/api/v1/allocations/{alloc[tid]}/exited", json={"exit_code": 0})
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] == "COMPLETED" and body["experiment"]["progress"] == 1.0
    trials = {t["id"]: t for t in body["trials"]}
    assert all(t["searcher_closed"] and t["state"] == "COMPLETED" for t in trials.values())
    assert {tid: t["total_batches"] for tid, t in trials.items()} == {t1: 4, t2: 2, t3: 4, t4: 2}

    code = main(["experiment", "describe", str(exp_id)])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"^Progress:\s+100\.0%$", out, re.M)
    assert re.search(r"^Trial states:\s+COMPLETED 4$", out, re.M)
    assert re.search(r"^Trial length:\s+4 batches$", out, re.M)
    assert re.search(r"^Stopped early:\s+2 of 4 trials$", out, re.M)
    section = out[out.index("\nTrials\n") : out.index("Latest validation metrics")]
    assert _row(section, t2)[1:4:2] == ["COMPLETED (stopped early)", "2"]
    assert _row(section, t4)[1] == "COMPLETED (stopped early)"
    assert _row(section, t1)[1:4:2] == ["COMPLETED", "4"]
    assert _row(section, t3)[4] == "0.95"  # best validation
    assert f"lr={trials[t1]['hparams']['lr']:.6g}" in " ".join(_row(section, t1))

    code = main(["experiment", "list-trials", str(exp_id)])
    out = capsys.readouterr().out
    assert code == 0 and out.count("(stopped early)") == 2


def test_full_length_from_the_config():
    assert full_length_batches({"searcher": {"max_time": 160, "time_metric": "batches"}}, {}) == 160
    # Another time metric cannot be turned into batches here.
    assert full_length_batches({"searcher": {"max_time": 3, "time_metric": "epochs"}}, {}) is None
    cfg = {
        "records_per_epoch": 1438,
        "searcher": {"max_length": {"batches": None, "records": None, "epochs": 15}},
    }
    assert full_length_batches(cfg, {"global_batch_size": 32}) == 674
    assert full_length_batches(cfg, {}) is None  # no batch size to convert with
    records = {"searcher": {"max_length": {"records": 640}}}
    assert full_length_batches(records, {"global_batch_size": 64}) == 10
    assert full_length_batches({"searcher": {"max_length": {"batches": 7}}}, None) == 7
    assert full_length_batches({}, {}) is None and full_length_batches(None, None) is None


def test_stopped_early_and_batches_cells():
    done = {"state": "COMPLETED", "total_batches": 10, "searcher_closed": True}
    assert stopped_early(done, 160) is True
    assert stopped_early(done, 10) is False  # trained to the full length
    assert stopped_early(done, None) is False
    assert stopped_early({**done, "state": "ERROR"}, 160) is False
    assert stopped_early({**done, "searcher_closed": False}, 160) is False
    # Masters that do not send searcher_closed: judged by batches alone.
    assert stopped_early({"state": "COMPLETED", "total_batches": 3}, 160) is True

    assert batches_cell({"state": "ACTIVE", "total_batches": 37, "target_length": 40}) == "37/40"
    assert batches_cell({"state": "ACTIVE", "total_batches": 0, "target_length": None}) == "0"
    assert batches_cell({"state": "COMPLETED", "total_batches": 40, "target_length": 40}) == "40"

    config = {"searcher": {"name": "adaptive_asha", "max_time": 160, "time_metric": "batches"}}
    trial = {
        "id": 4,
        "state": "COMPLETED",
        "hparams": {"lr": 0.1},
        "total_batches": 10,
        "target_length": 10,
        "searcher_closed": True,
        "best_validation": 0.5,
        "restarts": 0,
        "latest_checkpoint": "ck",
    }
    assert trial_row(trial, config)[:4] == ["4", "COMPLETED (stopped early)", "lr=0.1", "10"]
    assert trial_row(trial)[1] == "COMPLETED"  # without the config nothing is judged
    assert trial_row({**trial, "total_batches": 160}, config)[1] == "COMPLETED"
