"""What the master enforces on trials and what users see of it (issue 18, scopes 2, 7):
a trial that never looks at the preemption signal is killed after preemption_timeout and
the paused experiment reaches PAUSED; an experiment in ERROR says why."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration

CONFIG = """
name: deaf-trial
entrypoint: echo started; exec sleep 600
searcher: {name: single, metric: loss, max_length: {batches: 100}}
preemption_timeout: 2
max_restarts: 0
"""


def test_trial_ignoring_preemption_is_killed_after_the_timeout(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent()
    cfg = tmp_path / "deaf.yaml"
    cfg.write_text(CONFIG)
    (tmp_path / "ctx").mkdir()  # an empty model definition: the entrypoint is a command
    out = cluster.det("experiment", "create", str(cfg), str(tmp_path / "ctx"))
    exp_id = int(out.stdout.split("Created experiment")[1].split()[0])
    until = time.time() + cluster.deadline(60)
    while "started" not in "".join(
        line["log"]
        for t in cluster.api(f"/experiments/{exp_id}")["trials"]
        for line in cluster.api(f"/trials/{t['id']}/logs")["logs"]
    ):
        assert time.time() < until, cluster.dump_logs(exp_id)
        time.sleep(0.1)
    paused_at = time.time()
    cluster.det("experiment", "pause", str(exp_id))
    until = time.time() + cluster.deadline(60)
    while True:
        slots = cluster.api("/agents")["agents"][0]["slots"]
        if all(sl["allocation_id"] is None for sl in slots):
            break
        assert time.time() < until, "the deaf trial was never killed:\n" + cluster.dump_logs()
        time.sleep(0.1)
    assert time.time() - paused_at >= 2.0, "killed before preemption_timeout"
    body = cluster.api(f"/experiments/{exp_id}")
    assert body["experiment"]["state"] == "PAUSED"
    trial = body["trials"][0]
    assert trial["state"] == "ACTIVE" and trial["restarts"] == 0 and trial["failure"] is None


MISSING_CLASS = """
name: typo
entrypoint: model_def:DigitTrial
hyperparameters: {global_batch_size: 16, lr: 0.01, hidden_size: 8, dropout: 0.0}
records_per_epoch: 1438
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: {batches: 10}}
max_restarts: 0
"""


def test_error_experiment_describe_names_the_run_and_the_cause(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent()
    cfg = tmp_path / "typo.yaml"
    cfg.write_text(MISSING_CLASS)
    out = cluster.det("experiment", "create", str(cfg), "examples/digits")
    exp_id = int(out.stdout.split("Created experiment")[1].split()[0])
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "ERROR"
    trial = body["trials"][0]
    assert trial["failure"]["run_id"] == 1
    cause = "EntrypointError: entrypoint 'model_def:DigitTrial': module 'model_def' has no"
    assert cause in trial["failure"]["log"] and "DigitsTrial" in trial["failure"]["log"]
    described = cluster.det("experiment", "describe", str(exp_id)).stdout
    assert "Errors" in described and cause in described and "run 1" in described
    described = cluster.det("trial", "describe", str(trial["id"])).stdout
    assert "Error" in described and cause in described
    logs = cluster.api(f"/trials/{trial['id']}/logs")["logs"]
    assert not any("Traceback" in line["log"] for line in logs), "a config mistake is one line"
