"""Issue 35 through the master's API (in-process, SQLite): the remote search runner's
events and operations, custom methods run in the master (and failing), PBT clones
warm-started from their parents' checkpoints, a multi-objective search's Pareto front,
and the master's kept searchers."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import CustomSearchersConfig, MasterConfig, parse_experiment_config
from dauntless.master.app import create_app
from dauntless.master.errors import BadRequest
from dauntless.master.models import checkpoints, search
from dauntless.master.search_setup import custom_method_class
from dauntless.master.testing import sign_in

METHODS = (Path(__file__).parents[1] / "searcher" / "search_methods.py").read_bytes()


def context(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


CONTEXT = context({"search_methods.py": METHODS, "model_def.py": b""})


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search-master")
    config = MasterConfig(
        data_dir=str(tmp),
        port=18080,
        custom_searchers=CustomSearchersConfig(in_master="admins"),
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


def create(client, config: dict, ctx_bytes: bytes = CONTEXT):
    files = {"context": ("c.tar.gz", ctx_bytes, "application/gzip")}
    return client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "activate": "true"},
        files=files,
    )


def created(client, config: dict) -> int:
    r = create(client, config)
    assert r.status_code == 201, r.text
    return r.json()["experiment"]["id"]


def trials_of(client, exp_id):
    return sorted(
        client.get(f"/api/v1/experiments/{exp_id}").json()["trials"], key=lambda t: t["id"]
    )


def complete(client, trial_id, length, metric, metrics=None):
    if metrics is not None:
        r = client.post(
            f"/api/v1/trials/{trial_id}/metrics",
            json={
                "group": "validation",
                "steps_completed": length,
                "trial_run_id": 1,
                "metrics": metrics,
            },
        )
        assert r.status_code in (200, 201, 204), r.text
    r = client.post(
        f"/api/v1/trials/{trial_id}/searcher/completed_operation",
        json={"op": {"length": length}, "searcher_metric": metric},
    )
    assert r.status_code == 200, r.text


BASE = {
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
}


def test_remote_runner_events_and_operations(master):
    client, _ = master
    exp_id = created(client, {**BASE, "searcher": {"name": "custom", "metric": "loss"}})
    events = client.get(f"/api/v1/experiments/{exp_id}/searcher_events").json()
    assert events["searcherEvents"] == [{"id": 1, "initialOperations": {}}]
    assert events["experimentState"] == "ACTIVE"
    body = {
        "searcherOperations": [
            {"createTrial": {"requestId": "r1", "hyperparams": {"x": 0.5}}},
            {"trialOperation": {"validateAfter": {"requestId": "r1", "length": "5"}}},
        ],
        "triggeredByEvent": {"id": 1, "initialOperations": {}},
    }
    url = f"/api/v1/experiments/{exp_id}/searcher_operations"
    assert client.post(url, json=body).status_code == 200
    assert client.post(url, json=body).status_code == 200  # repeated: ignored
    [trial] = trials_of(client, exp_id)
    assert trial["hparams"] == {"x": 0.5} and trial["target_length"] == 5
    events = client.get(f"/api/v1/experiments/{exp_id}/searcher_events").json()["searcherEvents"]
    assert events == [{"id": 2, "trialCreated": {"requestId": "r1"}}]
    bad = {
        "searcherOperations": [{"closeTrial": {"requestId": "nope"}}],
        "triggeredByEvent": {"id": 2},
    }
    r = client.post(url, json=bad)
    assert r.status_code == 400 and "nope" in r.text
    complete(client, trial["id"], 5, 0.25)
    events = client.get(f"/api/v1/experiments/{exp_id}/searcher_events").json()["searcherEvents"]
    assert events[-1]["validationCompleted"] == {
        "requestId": "r1",
        "metric": 0.25,
        "validateAfterLength": 5,
    }
    done = {"searcherOperations": [{"shutDown": {}}], "triggeredByEvent": {"id": events[-1]["id"]}}
    assert client.post(url, json=done).status_code == 200
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] == "COMPLETED", body
    assert client.post(url, json=done).status_code == 409
    r = client.post("/api/v1/experiments/continue", json={"id": exp_id})
    assert r.status_code == 409 and "cannot continue its trials" in r.text
    other = created(
        client, {**BASE, "searcher": {"name": "random", "metric": "loss", "max_trials": 1}}
    )
    assert client.get(f"/api/v1/experiments/{other}/searcher_events").status_code == 400


def test_in_master_methods_are_gated_and_their_errors_fail_only_the_experiment(master):
    client, _ = master
    cfg = parse_experiment_config(
        {"searcher": {"name": "custom", "metric": "loss", "method": "search_methods:SeededRandom"}}
    )
    with pytest.raises(BadRequest) as off:
        custom_method_class("off", True, cfg, CONTEXT)
    assert off.value.errors[0][0] == "searcher.method" and "RemoteSearchRunner" in str(
        off.value.errors
    )
    with pytest.raises(BadRequest):
        custom_method_class("admins", False, cfg, CONTEXT)
    assert custom_method_class("all", False, cfg, CONTEXT).__name__ == "SeededRandom"
    missing = {**BASE, "searcher": {"name": "custom", "metric": "loss", "method": "nothere:X"}}
    r = create(client, missing)
    assert r.status_code == 400 and "no file nothere.py" in r.text

    broken = {
        **BASE,
        "searcher": {"name": "custom", "metric": "loss", "method": "search_methods:Broken"},
    }
    exp_id = created(client, broken)
    [trial] = trials_of(client, exp_id)
    assert trial["request_id"] == "trial-1" and trial["target_length"] == 10
    complete(client, trial["id"], 10, 0.5)
    body = client.get(f"/api/v1/experiments/{exp_id}").json()
    assert body["experiment"]["state"] in ("STOPPING_ERROR", "ERROR")
    summary = client.get(f"/api/v1/experiments/{exp_id}/searcher").json()
    assert "broken on purpose" in summary["error"] and "Traceback" in summary["error"]
    logs = client.get(f"/api/v1/trials/{trial['id']}/logs").json()["logs"]
    assert any("broken on purpose" in line["log"] for line in logs)
    assert client.get("/api/v1/master").status_code == 200  # the master goes on


def test_pbt_clones_start_from_their_parents_checkpoints(master):
    client, ctx = master
    config = {
        **BASE,
        "searcher": {
            "name": "pbt",
            "metric": "loss",
            "population_size": 2,
            "num_rounds": 2,
            "length_per_round": 4,
            "replace_function": {"truncate_fraction": 0.5},
            "explore_function": {"resample_probability": 0.0, "perturb_factor": 0.2},
        },
    }
    exp_id = created(client, config)
    exp = client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]
    assert exp["config"]["min_checkpoint_period"]["batches"] == 4  # set to the round
    first = trials_of(client, exp_id)
    for t, loss in zip(first, [0.2, 0.9], strict=True):
        r = client.post(
            "/api/v1/checkpoints",
            json={
                "uuid": f"ck-{t['id']}",
                "trial_id": t["id"],
                "allocation_id": None,
                "steps_completed": 4,
            },
        )
        assert r.status_code in (200, 201, 204), r.text
        complete(client, t["id"], 4, loss)
    trials = trials_of(client, exp_id)
    assert len(trials) == 3
    clone = trials[-1]
    assert clone["parent_id"] == first[0]["id"]
    assert clone["warm_start_checkpoint"] == f"ck-{first[0]['id']}"
    assert clone["target_length"] == 4
    x = first[0]["hparams"]["x"]
    assert clone["hparams"]["x"] in (pytest.approx(min(x * 1.2, 1.0)), pytest.approx(x * 0.8))
    with ctx.db.read() as s:
        assert f"ck-{first[0]['id']}" in checkpoints.warm_start_sources(s)
    summary = client.get(f"/api/v1/experiments/{exp_id}/searcher").json()
    assert {"trial_id": clone["id"], "parent_id": first[0]["id"]} in summary["lineage"]
    bad = {**config, "min_checkpoint_period": {"batches": 3}}
    r = create(client, bad)
    assert r.status_code == 400 and "min_checkpoint_period" in r.text


def test_multi_objective_front_and_kept_searcher(master):
    client, ctx = master
    config = {
        **BASE,
        "searcher": {
            "name": "nsgaii",
            "metrics": [{"name": "loss"}, {"name": "acc", "smaller_is_better": False}],
            "max_trials": 3,
            "max_concurrent_trials": 3,
            "max_length": {"batches": 2},
        },
    }
    exp_id = created(client, config)
    trials = trials_of(client, exp_id)
    values = [(0.1, 0.5), (0.2, 0.9), (0.3, 0.4)]  # the third is dominated by the first
    for t, (loss, acc) in zip(trials, values, strict=True):
        complete(client, t["id"], 2, loss, {"loss": loss, "acc": acc})
    summary = client.get(f"/api/v1/experiments/{exp_id}/searcher").json()
    assert summary["objectives"] == [
        {"name": "loss", "smaller_is_better": True},
        {"name": "acc", "smaller_is_better": False},
    ]
    assert summary["pareto_front"]["front"] == [trials[0]["id"], trials[1]["id"]]
    assert len(summary["pareto_front"]["points"]) == 3
    with ctx.db.read() as s:
        exp = search.read_experiment(s, exp_id)
        one = search.searcher_for(ctx, exp, read_only=True)
        assert search.searcher_for(ctx, exp, read_only=True) is one  # kept, not replayed
        exp.searcher_seq -= 1  # as after a rollback: the kept searcher is not the stored one
        assert search.searcher_for(ctx, exp, read_only=True) is not one
        s.rollback()
