"""End to end: a real master and agent train the digits example submitted through `det`:
the main job of README and scripts/run-example.sh, Determined 0.38's style (train.py with
the Trainer API; const.yaml names no deprecated field), which prints no warning and whose
trial logs hold none of the harness's HTTP request lines (its code calls
``logging.basicConfig(level=logging.INFO)``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _wait_first_training_metric(cluster, exp_id: int, timeout: float = 180) -> float:
    deadline = time.time() + cluster.deadline(timeout)
    while time.time() < deadline:
        trials = cluster.api(f"/experiments/{exp_id}/trials")["trials"]
        if (
            trials
            and cluster.api(f"/trials/{trials[0]['id']}/metrics", group="training")["metrics"]
        ):
            return time.time()
        time.sleep(0.1)
    raise AssertionError("no training metric within the timeout")


def test_digits_example_trains_to_completion(cluster_factory, db_url):
    cluster = cluster_factory(db_url)
    cluster.start_master()
    cluster.start_agent()

    t0 = time.time()
    # The `det` command a user runs (``python -m dauntless.cli.main`` warns about runpy).
    det = Path(sys.executable).with_name("det")
    follow = subprocess.Popen(
        [
            str(det),
            "experiment",
            "create",
            "examples/digits/const.yaml",
            "examples/digits",
            "--follow",
        ],
        cwd=REPO,
        env=cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    exp_id = None
    deadline = time.time() + cluster.deadline(60)
    while exp_id is None and time.time() < deadline:
        exps = cluster.api("/experiments")["experiments"]
        exp_id = exps[0]["id"] if exps else None
        time.sleep(0.05)
    assert exp_id is not None, "the experiment was not created"
    t_first_metric = _wait_first_training_metric(cluster, exp_id)
    out, err = follow.communicate(timeout=300)
    t_done = time.time()
    assert follow.returncode == 0, (
        f"--follow exited {follow.returncode}\n{out}\n{err}\n{cluster.dump_logs()}"
    )
    print(
        f"\n[{db_url.split(':')[0]}] create -> first training metric: {t_first_metric - t0:.1f} s; "
        f"create -> COMPLETED: {t_done - t0:.1f} s"
    )
    assert f"Created experiment {exp_id}" in out
    assert "COMPLETED" in out
    # No warning: no deprecated config field, nothing the harness warns about.
    assert "warning" not in (out + err).lower(), out + err
    assert "deprecated" not in (out + err).lower(), out + err
    # --follow streamed the trial's own output.
    assert re.search(r"validation", out, re.IGNORECASE), out[-3000:]

    body = cluster.api(f"/experiments/{exp_id}")
    assert body["experiment"]["state"] == "COMPLETED"
    (trial,) = body["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["latest_validation"]["accuracy"] >= 0.95
    assert body["experiment"]["best_searcher_metric"] >= 0.95
    # 15 epochs of train.py's loader: 1438 records in batches of 32, drop_last.
    assert trial["total_batches"] == 15 * (1438 // 32)

    # Training metrics were reported once per reporting period, not per batch.
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert 0 < len(training) <= trial["total_batches"] // 20 + 15
    assert all("loss" in m["values"] and "batches" in m["values"] for m in training)
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert len(validation) >= 15

    # The checkpoint directory exists and its state-dict.pth loads into the model.
    ckpts = cluster.api(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert ckpts and {c["state"] for c in ckpts} <= {"COMPLETED", "DELETED"}
    latest = [c for c in ckpts if c["uuid"] == trial["latest_checkpoint"]][0]
    # The default GC policy keeps the trial's best and latest checkpoints only.
    kept = [c for c in ckpts if c["state"] == "COMPLETED"]
    best = max(
        (c for c in ckpts if c["searcher_metric"] is not None),
        key=lambda c: (c["searcher_metric"], -c["total_batches"]),
    )
    assert {c["uuid"] for c in kept} == {latest["uuid"], best["uuid"]}
    assert all(not Path(c["storage_path"]).exists() for c in ckpts if c["state"] == "DELETED")
    assert latest["total_batches"] == trial["total_batches"]
    path = Path(latest["storage_path"])
    assert (path / "state-dict.pth").is_file() and (path / "metadata.json").is_file()
    state = torch.load(path / "state-dict.pth", map_location="cpu", weights_only=False)
    for key in (
        "models_state_dict",
        "optimizers_state_dict",
        "lr_schedulers_state_dict",
        "callbacks",
    ):
        assert key in state
    hidden = trial["hparams"]["hidden_size"]
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, 10))
    model.load_state_dict(state["models_state_dict"][0])
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    model.eval()
    with torch.no_grad():
        acc = model(torch.tensor(x / 16.0, dtype=torch.float32)).argmax(1) == torch.tensor(y)
    assert acc.float().mean().item() >= 0.95

    # The CLI's read commands show what happened.
    listed = cluster.det("experiment", "list")
    assert "COMPLETED" in listed.stdout and "digits-const" in listed.stdout
    described = cluster.det("experiment", "describe", str(exp_id))
    assert "accuracy" in described.stdout and "COMPLETED" in described.stdout
    as_json = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)
    assert as_json["experiment"]["id"] == exp_id
    logs = cluster.det("trial", "logs", str(trial["id"]))
    assert logs.stdout.count("\n") > 5
    # The trial's code logs at INFO; the harness's own HTTP requests log at DEBUG only.
    assert "validation at batch" in logs.stdout
    assert "HTTP Request" not in logs.stdout and "httpx" not in logs.stdout, logs.stdout
    assert "WARNING" not in logs.stdout, logs.stdout
    agents = cluster.det("agent", "list")
    assert "agent-1" in agents.stdout
