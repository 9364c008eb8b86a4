"""End to end: hyperparameter searches on the digits example, on a real local cluster.

A master (SQLite) and one agent with 2 artificial slots run an adaptive ASHA search of
16 trials and a small grid search, submitted through `det`; the tests check what the
searcher decided (trials, rungs, early stops) through the REST API and `det`'s output.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
# The legacy (<=0.37 style) configs: their module:Class trials train to the rung lengths
# the searcher hands out, which is what these tests check.
ADAPTIVE = "examples/digits/legacy-adaptive.yaml"
GRID = "examples/digits/legacy-grid.yaml"
RUNGS = [10, 40, 160]  # legacy-adaptive.yaml: max_time 160, divisor 4, 3 rungs


def _start(cluster_factory, tmp_path, slots: int = 2):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=slots)
    return cluster


def _created_id(stdout: str) -> int:
    match = re.search(r"Created experiment (\d+)", stdout)
    assert match, stdout
    return int(match.group(1))


def _table_row(text: str, first_cell: str) -> str:
    return next(line for line in text.splitlines() if line.split()[:1] == [first_cell])


def _failed_trials_report(cluster, bad: list[dict]) -> str:
    """The states of trials that did not complete and the last output of the first."""
    logs = cluster.api(f"/trials/{bad[0]['id']}/logs", limit=10_000)["logs"]
    tail = "\n".join(line["log"] for line in logs[-60:])
    return (
        f"trials not COMPLETED: {[(t['id'], t['state']) for t in bad]}\n"
        f"last output of trial {bad[0]['id']}:\n{tail}"
    )


def test_adaptive_asha_search_runs_to_completion(cluster_factory, tmp_path):
    cluster = _start(cluster_factory, tmp_path)

    # The preview (local, through det) and the master's preview route agree.
    preview = json.loads(cluster.det("preview-search", ADAPTIVE, "--json").stdout)
    routed = httpx.post(
        cluster.url + "/api/v1/preview-hp-search",
        json={"config": (REPO / ADAPTIVE).read_text()},
        headers=cluster.headers(),
        timeout=60,
    )
    assert routed.status_code == 200, routed.text
    assert routed.json() == preview
    assert preview["summary"]["num_trials"] == 16
    assert preview["summary"]["brackets"][0]["rungs"] == RUNGS

    t0 = time.time()
    exp_id = _created_id(cluster.det("experiment", "create", ADAPTIVE, "examples/digits").stdout)
    body = cluster.wait_experiment(exp_id, timeout=540)
    elapsed = time.time() - t0
    print(
        f"\nadaptive ASHA, 16 trials on 2 slots: create -> {body['experiment']['state']} "
        f"in {elapsed:.1f} s"
    )

    exp, trials = body["experiment"], body["trials"]
    assert exp["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    assert exp["progress"] == 1.0
    assert len(trials) >= 16
    bad = [t for t in trials if t["state"] != "COMPLETED"]
    assert not bad, _failed_trials_report(cluster, bad)
    assert all(t["searcher_closed"] for t in trials)

    # The hyperparameters were sampled from the configured ranges and types; with the
    # experiment seed fixed, the first trials are the ones the preview predicted.
    for t in trials:
        hp = t["hparams"]
        assert isinstance(hp["hidden_size"], int) and 8 <= hp["hidden_size"] <= 256
        assert isinstance(hp["dropout"], float) and 0.0 <= hp["dropout"] <= 0.5
        assert 1e-4 <= hp["lr"] <= 1e-1 and -4 <= math.log10(hp["lr"]) <= -1
        assert hp["global_batch_size"] == 32 and hp["optimizer"] == "adam"
    assert len({json.dumps(t["hparams"], sort_keys=True) for t in trials}) == len(trials)
    # Hyperparameters are drawn from the experiment seed one Create after another, so
    # the n-th trial has the preview's n-th hyperparameters whatever the metrics were.
    by_id = sorted(trials, key=lambda t: t["id"])
    assert [t["hparams"] for t in by_id] == [p["hparams"] for p in preview["trials"]]

    # Every trial trained to a rung and validated at each rung it reached, no further.
    for t in trials:
        assert t["total_batches"] in RUNGS, t
        reached = RUNGS[: RUNGS.index(t["total_batches"]) + 1]
        validations = cluster.api(f"/trials/{t['id']}/metrics", group="validation")["metrics"]
        assert [m["total_batches"] for m in validations] == reached, (t["id"], validations)
        assert t["target_length"] == t["total_batches"]
        assert t["best_validation"] == max(m["values"]["accuracy"] for m in validations)
    stopped = [t for t in trials if t["total_batches"] < RUNGS[-1]]
    full = [t for t in trials if t["total_batches"] == RUNGS[-1]]
    assert stopped and full
    assert any(t["total_batches"] == RUNGS[0] for t in stopped)
    best = max(t["best_validation"] for t in trials)
    assert exp["best_searcher_metric"] == best and best >= 0.8

    # describe and list-trials show hyperparameters, states, batches, metrics, progress,
    # and mark the early-stopped trials.
    out = cluster.det("experiment", "describe", str(exp_id)).stdout
    print(out)
    assert re.search(r"^Progress:\s+100\.0%$", out, re.M), out
    assert re.search(r"^Searcher:\s+adaptive_asha$", out, re.M), out
    assert re.search(rf"^Stopped early:\s+{len(stopped)} of {len(trials)} trials$", out, re.M)
    assert re.search(r"^Trial length:\s+160 batches$", out, re.M), out
    trials_section = out[out.index("\nTrials\n") : out.index("Latest validation metrics")]
    for t in trials:
        row = _table_row(trials_section, str(t["id"]))
        assert f"hidden_size={t['hparams']['hidden_size']}" in row
        assert (" (stopped early) " in row) == (t in stopped), row
        assert f" {t['total_batches']} " in row
    assert trials_section.count("(stopped early)") == len(stopped)
    listed = cluster.det("experiment", "list-trials", str(exp_id)).stdout
    assert listed.count("COMPLETED (stopped early)") == len(stopped)


def test_grid_search_creates_the_cartesian_product(cluster_factory, tmp_path):
    cluster = _start(cluster_factory, tmp_path)
    overrides = [
        "--config",
        "hyperparameters.lr.count=2",
        "--config",
        "hyperparameters.hidden_size.count=2",
        "--config",
        "searcher.max_length.batches=5",
    ]
    out = cluster.det("experiment", "create", GRID, "examples/digits", *overrides).stdout
    exp_id = _created_id(out)
    body = cluster.wait_experiment(exp_id, timeout=300)
    exp, trials = body["experiment"], body["trials"]
    assert exp["state"] == "COMPLETED" and exp["progress"] == 1.0, cluster.dump_logs(exp_id)
    bad = [t for t in trials if t["state"] != "COMPLETED"]
    assert not bad, _failed_trials_report(cluster, bad)
    got = sorted((t["hparams"]["lr"], t["hparams"]["hidden_size"]) for t in trials)
    assert got == [(0.001, 32), (0.001, 128), (0.1, 32), (0.1, 128)]
    assert all(t["total_batches"] == 5 for t in trials)
    assert all(t["hparams"]["dropout"] == 0.1 for t in trials)
    described = cluster.det("experiment", "describe", str(exp_id)).stdout
    assert "stopped early" not in described
    assert re.search(r"^Trial states:\s+COMPLETED 4$", described, re.M), described
