"""A master that stops answering for longer than its ``agent_timeout`` costs no trial
(issue 37: 616 of 10,000 trials ended ERROR when an overloaded master took over 22 s to
answer heartbeats and the agents fenced their tasks; docs/partitions.md).

The master process is stopped (SIGSTOP, its whole process group) for twice its
``agent_timeout`` of 6 s while a trial with ``max_restarts: 0`` trains; its agent, whose
fence is due after 4.5 s without an answer, and its reaper, due after 6 s, both must
let the trial go on. The trial completes with one run and no restart, every metric row
stored once, and the agent is never declared lost. Issue 36's partition behaviour (an
agent cut off for longer than the timeout is fenced and its trial restarted elsewhere)
is tested on hosts of their own in test_netns_partitions.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from .netns_trial import expected_rows, metric_rows, write_context

pytestmark = pytest.mark.integration


def _batches(c, exp_id: int) -> int:
    return max((t["total_batches"] for t in c.api(f"/experiments/{exp_id}")["trials"]), default=0)


def test_a_master_stopped_past_the_agent_timeout_costs_no_trial(cluster_factory, tmp_path):
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    timeout = 6.0
    c.start_master(agent_timeout=timeout)
    c.start_agent("a", slots=1)
    batches, sleep = 300, 0.04  # 12 s of training; the stop at batch 40 or later
    ctx = tmp_path / "context"
    ctx.mkdir()
    config = write_context(ctx, batches, sleep, checkpoint_every=0, max_restarts=0)
    out = c.det("experiment", "create", str(config), str(ctx))
    exp_id = int(out.stdout.split("Created experiment")[1].split()[0])
    deadline = time.time() + c.deadline(120)
    while _batches(c, exp_id) < 40:
        assert time.time() < deadline, c.dump_logs(exp_id)
        time.sleep(0.1)
    assert c.master is not None
    os.killpg(c.master.pid, signal.SIGSTOP)
    try:
        time.sleep(2 * timeout)
    finally:
        os.killpg(c.master.pid, signal.SIGCONT)
    body = c.wait_experiment(exp_id, timeout=120)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    (trial,) = body["trials"]
    assert (trial["restarts"], trial["run_id"]) == (0, 1), c.dump_logs(exp_id)
    assert metric_rows(c, trial["id"]) == expected_rows(batches)
    (agent,) = c.api("/agents")["agents"]
    assert agent["state"] == "ACTIVE"
    agent_log = "".join(p.read_text() for p in c.logs if p.name.startswith("a-"))
    assert "accepts connections: it is busy or stopped" in agent_log
    assert "had no answer from the master" not in agent_log
    master_log = c.logs[0].read_text()
    assert "the master took in no request for" in master_log
    assert "missed heartbeats" not in master_log
