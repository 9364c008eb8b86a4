"""``POST /api/v1/preview-hp-search`` in-process: answers, determinism, and 400s."""

from __future__ import annotations

import pytest
import yaml
from databases import migrated_sqlite
from fastapi.testclient import TestClient

import dauntless.searcher._preview as searcher_preview
from dauntless.config import MasterConfig
from dauntless.master import routes_search
from dauntless.master.app import create_app
from dauntless.master.errors import BadRequest
from dauntless.master.testing import sign_in

ASHA = """
name: asha
hyperparameters:
  global_batch_size: 32
  lr: {type: log, base: 10, minval: -4, maxval: -1}
  hidden_size: {type: int, minval: 8, maxval: 256}
  dropout: {type: double, minval: 0.0, maxval: 0.5}
searcher:
  name: adaptive_asha
  metric: accuracy
  smaller_is_better: false
  max_trials: 16
  max_time: 160
  time_metric: batches
  divisor: 4
  max_rungs: 3
  mode: aggressive
  max_concurrent_trials: 2
reproducibility:
  experiment_seed: 7
"""

GRID = """
name: grid
hyperparameters:
  global_batch_size: 32
  lr: {type: log, base: 10, minval: -3, maxval: -1, count: 2}
  hidden_size: {type: int, minval: 16, maxval: 64, count: 2}
  optimizer: {type: categorical, vals: [adam, sgd]}
searcher:
  name: grid
  metric: loss
  max_length: {batches: 5}
"""

SINGLE_EPOCHS = """
name: single
hyperparameters:
  global_batch_size: 32
  lr: 0.1
records_per_epoch: 1438
searcher:
  name: single
  metric: loss
  max_length: {epochs: 15}
"""


@pytest.fixture()
def client(tmp_path):
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as c:
        sign_in(c)
        yield c


def _preview(client, config: str, **body):
    return client.post("/api/v1/preview-hp-search", json={"config": config, **body})


def test_asha_preview_lists_trials_rungs_and_brackets(client):
    r = _preview(client, ASHA)
    assert r.status_code == 200, r.text
    body = r.json()
    trials, summary = body["trials"], body["summary"]
    assert len(trials) == 16
    # One bracket of rungs 160/16, 160/4, 160. Every trial validates at the first rung;
    # with equal metrics only the first trial wins its rungs (ties go to the earlier).
    assert summary["brackets"] == [
        {"rungs": [10, 40, 160], "unit": "batches", "trials": 16, "max_concurrent": 2}
    ]
    assert trials[0]["lengths"] == [10, 40, 160]
    assert all(t["lengths"] == [10] for t in trials[1:])
    assert summary["final_lengths"] == [
        {"batches": 10, "trials": 15},
        {"batches": 160, "trials": 1},
    ]
    assert summary["total_batches"] == 15 * 10 + 160
    assert summary["num_trials"] == 16 and summary["searcher"] == "adaptive_asha"
    for t in trials:
        hp = t["hparams"]
        assert 1e-4 <= hp["lr"] <= 1e-1
        assert isinstance(hp["hidden_size"], int) and 8 <= hp["hidden_size"] <= 256
        assert 0.0 <= hp["dropout"] <= 0.5 and hp["global_batch_size"] == 32
    # Nothing was created.
    assert client.get("/api/v1/experiments").json()["total"] == 0


def test_seed_decides_the_hyperparameters(client):
    first = _preview(client, ASHA).json()
    assert first["summary"]["seed"] == 7  # the config's experiment_seed
    assert _preview(client, ASHA, seed=7).json() == first
    other = _preview(client, ASHA, seed=8).json()
    assert other["summary"]["seed"] == 8
    assert [t["hparams"] for t in other["trials"]] != [t["hparams"] for t in first["trials"]]
    no_seed = ASHA.replace("reproducibility:\n  experiment_seed: 7\n", "")
    assert _preview(client, no_seed).json()["summary"]["seed"] == 0
    assert _preview(client, no_seed, seed=None).json() == _preview(client, no_seed, seed=0).json()


def test_grid_preview_is_the_cartesian_product(client):
    body = _preview(client, GRID).json()
    got = sorted(
        (t["hparams"]["lr"], t["hparams"]["hidden_size"], t["hparams"]["optimizer"])
        for t in body["trials"]
    )
    assert got == sorted(
        (lr, h, o) for lr in (0.001, 0.1) for h in (16, 64) for o in ("adam", "sgd")
    )
    assert all(t["lengths"] == [5] for t in body["trials"])
    assert body["summary"]["final_lengths"] == [{"batches": 5, "trials": 8}]
    assert "brackets" not in body["summary"]


def test_lengths_in_epochs_are_converted_to_batches(client):
    body = _preview(client, SINGLE_EPOCHS).json()
    assert body["trials"] == [
        {"hparams": {"global_batch_size": 32, "lr": 0.1}, "lengths": [15 * 1438 // 32]}
    ]
    assert body["summary"]["total_batches"] == 674


def _errors(r) -> dict[str, str]:
    assert r.status_code == 400, r.text
    return {e["field"]: e["message"] for e in r.json().get("errors", [])}


def test_invalid_configs_name_the_field(client):
    bad_range = ASHA.replace("minval: -4, maxval: -1", "minval: -1, maxval: -4")
    assert "hyperparameters.lr" in _errors(_preview(client, bad_range))
    no_count = GRID.replace(", count: 2}", "}")
    errors = _errors(_preview(client, no_count))
    assert any(f.startswith("hyperparameters.") for f in errors), errors
    removed = ASHA.replace("name: adaptive_asha", "name: sync_halving")
    assert "removed in Determined 0.38" in _errors(_preview(client, removed))["searcher"]
    assert "searcher.max_trials" in _errors(
        _preview(client, ASHA.replace("max_trials: 16", "max_trials: 0"))
    )
    assert "" in _errors(_preview(client, "searcher: [unclosed"))  # not YAML
    assert _errors(_preview(client, "- a list"))  # not a mapping


def test_bad_bodies_and_too_large_searches_are_400(client, monkeypatch):
    assert "extra" in _errors(
        client.post("/api/v1/preview-hp-search", json={"config": ASHA, "extra": 1})
    )
    assert "seed" in _errors(_preview(client, ASHA, seed=-1))
    assert "seed" in _errors(_preview(client, ASHA, seed=2**32))
    assert "config" in _errors(client.post("/api/v1/preview-hp-search", json={"seed": 1}))
    monkeypatch.setattr(searcher_preview, "PREVIEW_TRIAL_LIMIT", 4)
    assert "8 trials" in _errors(_preview(client, GRID))["hyperparameters"]
    assert "16 trials" in _errors(_preview(client, ASHA))["searcher.max_trials"]


def test_preview_function_validates_its_seed():
    with pytest.raises(BadRequest) as info:
        routes_search.preview_hp_search(ASHA, seed=True)
    assert info.value.errors[0][0] == "seed"
    doc = routes_search.preview_hp_search(yaml.safe_dump(yaml.safe_load(GRID)), seed=3)
    assert doc["summary"]["seed"] == 3 and len(doc["trials"]) == 8


def test_asha_rungs_in_epochs_become_batches_per_trial(client):
    config = (
        ASHA.replace("  max_time: 160\n  time_metric: batches\n", "  max_length: {epochs: 16}\n")
        + "records_per_epoch: 320\n"
    )
    body = _preview(client, config).json()
    # Rungs of 1, 4 and 16 epochs; 320 records of 32 are 10 batches an epoch.
    assert body["summary"]["brackets"][0]["rungs"] == [1, 4, 16]
    assert body["summary"]["brackets"][0]["unit"] == "epochs"
    assert body["trials"][0]["lengths"] == [10, 40, 160]
