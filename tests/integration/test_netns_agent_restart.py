"""An agent restarted under running tasks keeps them (issue 36 scope 4), on hosts of
their own (network namespaces, tests/netns.py).

The master runs on one namespaced host, the agent on another. A trial and a notebook
run on the agent; the agent gets SIGKILL and is started again on the same host and work
dir 2 s later (well inside its orphan grace period). The trial is forked from the agent's
warm worker under a supervisor of its own (docs/warm-start.md), the notebook starts
cold under its shim; the supervisors held both meanwhile: the new agent adopts both. The trial completes with 0 restarts, one run
(``run_id`` 1) and every metric row once; the notebook's Jupyter server is the same
process before and after (every process it had still runs) and still answers at its
host's address.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from .netns_trial import expected_rows, metric_rows, write_context

pytestmark = pytest.mark.integration

BATCHES = 300
BATCH_SLEEP = 0.04


def _wait(what: str, check, c, timeout: float = 60):
    deadline = time.time() + c.deadline(timeout)
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen in time:\n{c.dump_logs()}")


def _notebook_answers(c, task_id: str) -> bool:
    """Whether the notebook's Jupyter server answers HTTP at its service address (the
    agent's host): any answer (without the service token it is a refusal)."""
    with sqlite3.connect(f"file:{c.db_url[len('sqlite:///') :]}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT service_addr, service_port FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
    if row is None or row[0] is None:
        return False
    try:
        r = httpx.get(f"http://{row[0]}:{row[1]}/proxy/{task_id}/api/status", timeout=5)
    except httpx.HTTPError:
        return False
    return r.status_code < 500


def _service_process(task_id: str) -> int:
    """The pid of the task's service process (``dauntless.exec.task_service``, which
    runs the notebook's Jupyter server)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"dauntless.exec.task_service" in argv and f"DET_TASK_ID={task_id}".encode() in env:
            return int(pid)
    raise AssertionError(f"no service process of task {task_id}")


def test_sigkilled_agent_adopts_its_trial_and_notebook(netns_cluster_factory, tmp_path):
    net, c = netns_cluster_factory(("master", "a"))
    c.start_master()
    grace = ("--orphan-grace-period", "30")  # warm start on (the default)
    c.start_agent("a", slots=1, extra_args=grace)
    notebook = c.det("notebook", "start", "-d", "--config", "resources.slots=0")
    notebook = notebook.stdout.strip().splitlines()[-1]
    _wait("the notebook to answer", lambda: _notebook_answers(c, notebook), c, 120)
    server = _service_process(notebook)
    config = write_context(tmp_path, BATCHES, BATCH_SLEEP, checkpoint_every=100)
    out = c.det("experiment", "create", str(config), str(tmp_path))
    exp_id = int(out.stdout.split("Created experiment")[1].split()[0])
    trial = _wait(
        "the trial to train 50 batches",
        lambda: next(
            (t for t in c.api(f"/experiments/{exp_id}")["trials"] if t["total_batches"] >= 50),
            None,
        ),
        c,
        120,
    )
    agent = c.agents["a"]
    assert "process runtime, warm" in c.logs[-1].read_text(), "the trial started cold"
    os.kill(agent.pid, signal.SIGKILL)  # the agent alone: its tasks' shims live on
    agent.wait(timeout=30)
    assert c.api(f"/trials/{trial['id']}")["trial"]["total_batches"] < BATCHES, "ended too soon"
    time.sleep(2.0)  # started again 2 s after the kill (the issue: within 10 s)
    c.start_agent("a", slots=1, extra_args=grace)
    body = c.wait_experiment(exp_id, timeout=120)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    (done,) = body["trials"]
    assert done["id"] == trial["id"]
    assert done["restarts"] == 0, c.dump_logs(exp_id)
    assert done["run_id"] == 1, "the trial ran more than once"
    assert metric_rows(c, done["id"]) == expected_rows(BATCHES)
    task = c.api(f"/tasks/{notebook}")["task"]
    assert task["state"] == "RUNNING", task
    assert _notebook_answers(c, notebook)
    assert _service_process(notebook) == server, "the notebook's server was replaced"
    log = c.logs[-1].read_text()
    assert log.count("adopted task") == 2, log
    c.det("notebook", "kill", notebook)
    c.wait_task(notebook, {"CANCELED", "COMPLETED", "ERROR"})
