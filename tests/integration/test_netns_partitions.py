"""Network partitions between the master and an agent, on hosts of their own (issue 36
scope 2; tests/netns.py; the decisions are those of docs/partitions.md).

1. **Shorter than the agent timeout** (5 s): the agent's host is cut off (its switch
   port down) while a trial trains. The trial keeps training and holds its reports;
   once the link is back they arrive, the agent was never declared lost, and the trial
   completes with 0 restarts, one run and every metric row once.
2. **Past the agent timeout**: the agent running a trial is cut off for longer than the
   master's ``agent_timeout`` (6 s). The agent fences first (kills its task at 3/4 of
   the timeout, having had no answer), the master declares it lost and restarts the
   trial on the other agent from its latest checkpoint. The old run's processes are
   gone before the new run starts (never two runs at once); when the cut-off agent
   comes back it registers its exits and takes new work. Every metric row is stored
   once (the new run's reports of batches the old one had reported are not stored
   again).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .netns_trial import expected_rows, metric_rows, write_context

pytestmark = pytest.mark.integration


def _create(c, config: Path) -> int:
    out = c.det("experiment", "create", str(config), str(config.parent))
    return int(out.stdout.split("Created experiment")[1].split()[0])


def _batches(c, exp_id: int) -> int:
    return max((t["total_batches"] for t in c.api(f"/experiments/{exp_id}")["trials"]), default=0)


def _wait(what: str, check, c, timeout: float = 60, exp_id: int | None = None):
    deadline = time.time() + c.deadline(timeout)
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen in time:\n{c.dump_logs(exp_id)}")


def _alive(pid_file: Path) -> bool:
    """Whether the process whose pid ``pid_file`` holds runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{int(pid_file.read_text())}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _agent_state(c, agent_id: str) -> str:
    return next(a["state"] for a in c.api("/agents")["agents"] if a["id"] == agent_id)


def test_partition_shorter_than_the_agent_timeout_costs_nothing(netns_cluster_factory, tmp_path):
    net, c = netns_cluster_factory(("master", "a"))
    c.start_master(agent_timeout=30)
    c.start_agent("a", slots=1)
    batches, sleep = 300, 0.04
    exp_id = _create(c, write_context(tmp_path, batches, sleep, checkpoint_every=0))
    _wait("40 batches", lambda: _batches(c, exp_id) >= 40, c, 120, exp_id)
    before = _batches(c, exp_id)
    net.isolate("a")
    time.sleep(5.0)
    assert _batches(c, exp_id) == before, "a report crossed the cut link"
    net.restore("a")
    # It trained while cut off (5 s = 125 batches): the held reports arrive at once.
    _wait("the held reports", lambda: _batches(c, exp_id) >= before + 80, c, 20, exp_id)
    assert _agent_state(c, "a") == "ACTIVE"
    body = c.wait_experiment(exp_id, timeout=60)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    (trial,) = body["trials"]
    assert (trial["restarts"], trial["run_id"]) == (0, 1), c.dump_logs(exp_id)
    assert metric_rows(c, trial["id"]) == expected_rows(batches)


def test_partition_past_the_agent_timeout_fences_and_restarts_elsewhere(
    netns_cluster_factory, tmp_path
):
    net, c = netns_cluster_factory(("master", "a", "b"))
    timeout = 6.0
    c.start_master(agent_timeout=timeout)
    c.start_agent("a", slots=1)
    c.start_agent("b", slots=1)
    batches, sleep = 300, 0.04  # the cut at batch 120 or later; fenced ~110 batches on
    pids = tmp_path / "pids"
    pids.mkdir()
    exp_id = _create(c, write_context(tmp_path, batches, sleep, checkpoint_every=50, pids=pids))
    _wait("120 batches", lambda: _batches(c, exp_id) >= 120, c, 120, exp_id)
    trial_id = c.api(f"/experiments/{exp_id}")["trials"][0]["id"]
    (first,) = c.api("/allocations", trial_id=trial_id)["allocations"]
    assert _alive(pids / "run-1"), "the first run's process is not found"
    lost, other = first["agent_id"], ({"a", "b"} - {first["agent_id"]}).pop()
    net.isolate(lost)
    cut_at = time.time()
    # The old run's processes end (fenced by their agent) before a new run starts.
    gone_at = None
    while True:
        allocs = c.api("/allocations", trial_id=trial_id)["allocations"]
        if gone_at is None and not _alive(pids / "run-1"):
            gone_at = time.time()
        new = [a for a in allocs if a["run_id"] == 2 and a["started_at"] is not None]
        if new:
            assert gone_at is not None, "the old run still ran when the new one started"
            break
        assert time.time() - cut_at < c.deadline(60), c.dump_logs(exp_id)
        time.sleep(0.05)
    fenced_after = gone_at - cut_at
    assert 0.5 * timeout <= fenced_after <= timeout + 5, fenced_after
    (second,) = new
    assert second["agent_id"] == other
    assert _agent_state(c, lost) == "LOST"

    # The new run resumed from the latest checkpoint (batch 100 or later), not from 0.
    def starts() -> list[int] | None:
        logs = c.api(f"/trials/{trial_id}/logs", limit=10000)["logs"]
        found = [int(x["log"].split()[-1]) for x in logs if x["log"].startswith("run ")]
        return found if len(found) == 2 else None

    assert _wait("the new run's first line", starts, c, 30, exp_id)[1] >= 100
    net.restore(lost)
    # The agent comes back: registered again (its fenced exit reported), ACTIVE.
    _wait("the lost agent's return", lambda: _agent_state(c, lost) == "ACTIVE", c, 60, exp_id)
    body = c.wait_experiment(exp_id, timeout=90)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    (trial,) = body["trials"]
    assert trial["run_id"] == 2, c.dump_logs(exp_id)
    assert metric_rows(c, trial_id) == expected_rows(batches)
    ended = c.api("/allocations", trial_id=trial_id)["allocations"][0]
    assert ended["state"] == "TERMINATED" and ended["ended_at"] <= second["started_at"]
