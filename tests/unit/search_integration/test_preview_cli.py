"""``det preview-search``: tables, --json (the route's shape), --seed, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dauntless.searcher._preview as searcher_preview
from dauntless.cli import main
from dauntless.master.routes_search import preview_hp_search

REPO = Path(__file__).resolve().parents[3]
# The <=0.37-style configs: their module:Class trials train to the rung lengths the
# searcher plans, which the preview's tables show trial by trial.
ADAPTIVE = REPO / "examples" / "digits" / "legacy-adaptive.yaml"
GRID = REPO / "examples" / "digits" / "legacy-grid.yaml"
# Nothing listens here: the preview must not need a master.
NO_MASTER = "http://127.0.0.1:9"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_adaptive_example_preview_table(capsys):
    code, out, err = run(capsys, "-m", NO_MASTER, "preview-search", str(ADAPTIVE))
    assert code == 0, err
    assert out.startswith("Preview of the adaptive_asha search of ")
    assert "(seed 7)" in out
    brackets = out[out.index("Brackets") : out.index("\nTrials\n")]
    assert "10, 40, 160 batches   16       2" in brackets
    rows = [line.split() for line in out[out.index("\nTrials\n") :].splitlines()]
    trial_rows = [r for r in rows if r and r[0].isdigit() and "dropout=" in " ".join(r)]
    assert [int(r[0]) for r in trial_rows] == list(range(1, 17))
    assert trial_rows[0][-3:] == ["10,", "40,", "160"]
    assert all(r[-1] == "10" for r in trial_rows[1:])
    summary = out[out.index("Summary") :]
    assert summary.splitlines()[-1] == "Total: 16 trials, 310 batches"


def test_json_matches_the_master_route(capsys):
    code, out, _ = run(capsys, "preview-search", str(ADAPTIVE), "--json")
    assert code == 0
    assert json.loads(out) == preview_hp_search(ADAPTIVE.read_text())
    code, out, _ = run(capsys, "preview-search", str(GRID), "--json", "--seed", "5")
    doc = json.loads(out)
    assert doc == preview_hp_search(GRID.read_text(), seed=5)
    assert doc["summary"]["num_trials"] == 9 and doc["summary"]["seed"] == 5
    assert {t["hparams"]["hidden_size"] for t in doc["trials"]} == {32, 80, 128}


def test_seed_changes_random_hyperparameters(capsys):
    seven = json.loads(run(capsys, "preview-search", str(ADAPTIVE), "--json")[1])
    again = json.loads(run(capsys, "preview-search", str(ADAPTIVE), "--json", "--seed", "7")[1])
    other = json.loads(run(capsys, "preview-search", str(ADAPTIVE), "--json", "--seed", "8")[1])
    assert seven == again
    assert seven["trials"][0]["hparams"] != other["trials"][0]["hparams"]


def test_invalid_config_prints_field_lines_and_exits_1(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(ADAPTIVE.read_text().replace("minval: 8", "minval: 300"))
    code, out, err = run(capsys, "preview-search", str(bad))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"Error: the experiment config {bad} is invalid"
    assert any(line.startswith("  hyperparameters.hidden_size") for line in lines[1:]), err

    nocount = tmp_path / "nocount.yaml"
    nocount.write_text(GRID.read_text().replace("    count: 3\n", "", 1))
    code, _, err = run(capsys, "preview-search", str(nocount))
    assert code == 1 and "  hyperparameters.lr: " in err and "count" in err

    removed = tmp_path / "removed.yaml"
    removed.write_text(ADAPTIVE.read_text().replace("name: adaptive_asha", "name: adaptive"))
    code, _, err = run(capsys, "preview-search", str(removed))
    assert code == 1 and "  searcher: " in err and "removed in Determined 0.38" in err

    code, _, err = run(capsys, "preview-search", str(tmp_path / "missing.yaml"))
    assert code == 1 and err.startswith("Error: cannot read the config file")


def test_too_large_search_and_bad_seed(capsys, monkeypatch):
    monkeypatch.setattr(searcher_preview, "PREVIEW_TRIAL_LIMIT", 8)
    code, _, err = run(capsys, "preview-search", str(GRID))
    assert code == 1
    assert "9 trials" in err and "at most 8" in err
    code, _, err = run(capsys, "preview-search", str(GRID), "--seed", "-1")
    assert code == 2 and "the seed must be in 0.." in err
    code, _, err = run(capsys, "preview-search", str(GRID), "--seed", "x")
    assert code == 2 and "expected an integer seed" in err
