"""No orphans (issue 29): a task whose agent is killed is adopted by the agent started
again within the grace period, and ended whole when none comes.

One cluster (agents with a 3 s grace period, ``--orphan-grace-period``):

1. A command printing numbered lines runs; its agent gets SIGKILL and is started again
   at once on the same work dir: the task goes on (its supervisor held it), the new
   agent ships the lines printed meanwhile and reports the exit, and the task ends
   COMPLETED with every line once, in order.
2. A command that starts a listening HTTP server and a sleeper in sessions of their own
   (out of the task's process group, as a Jupyter kernel is) runs; its agent gets
   SIGKILL and is not started again: once the grace period has passed, no process of
   the task is left (checked by the process groups and sessions they had) and the
   port no longer answers.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from .conftest import deadline_seconds

pytestmark = pytest.mark.integration
GRACE = 3.0


def _processes_with(marker: str) -> dict[int, tuple[int, int]]:
    """``{pid: (process group, session)}`` of the processes whose command line or
    environment holds ``marker``."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            blob = Path(f"/proc/{pid}/cmdline").read_bytes()
            blob += Path(f"/proc/{pid}/environ").read_bytes()
            if marker.encode() not in blob:
                continue
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            if fields[0] != "Z":
                out[int(pid)] = (int(fields[2]), int(fields[3]))
        except (OSError, IndexError):
            pass
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(what: str, check, c, timeout: float = 60):
    deadline = time.time() + c.deadline(timeout)
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen in time:\n{c.dump_logs()}")


def _command(c, entrypoint: str, marker: str) -> str:
    config = f'{{"resources": {{"slots": 0}}, "environment": {{"environment_variables": ["M={marker}"]}}}}'
    r = httpx.post(
        c.url + "/api/v1/commands",
        headers=c.headers(),
        data={"entrypoint": entrypoint, "config": config},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return r.json()["task"]["id"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_killed_agent_adopts_its_tasks_or_they_end_whole(cluster_factory, tmp_path):
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    grace = ("--orphan-grace-period", str(GRACE))
    # Part 1's grace only has to outlast the agent's restart: generous, scaled with the
    # load (a loaded machine once took over 3 s to start the agent again).
    c.start_agent(extra_args=("--orphan-grace-period", str(deadline_seconds(30))))

    # ---- 1. adopted by the agent started again
    marker = f"adopt-{uuid.uuid4().hex}"
    lines = 40
    task = _command(c, f'"for i in $(seq 1 {lines}); do echo line-$i; sleep 0.1; done"', marker)
    c.wait_task(task, {"RUNNING"})
    _wait("the first lines", lambda: c.api(f"/tasks/{task}/logs")["logs"], c)
    pids = _processes_with(marker)
    c.stop(c.agents["agent-1"], sig=signal.SIGKILL)
    assert pids and all(os.path.exists(f"/proc/{p}") for p in pids), "died with the agent"
    c.start_agent(extra_args=grace)  # same id and work dir
    done = c.wait_task(task, {"COMPLETED", "ERROR", "CANCELED"}, timeout=60)
    assert done["state"] == "COMPLETED" and done["exit_code"] == 0, c.dump_logs()
    logs = [ln["log"] for ln in c.api(f"/tasks/{task}/logs", limit=1000)["logs"]]
    assert logs == [f"line-{i}" for i in range(1, lines + 1)]
    assert "adopted task" in c.logs[-1].read_text()

    # ---- 2. not adopted: ended whole after the grace period
    marker = f"orphan-{uuid.uuid4().hex}"
    port = _free_port()
    task = _command(
        c,
        f'"setsid python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & '
        'setsid sleep 600 & sleep 600"',
        marker,
    )
    c.wait_task(task, {"RUNNING"})

    def all_started() -> dict[int, tuple[int, int]] | None:
        found = _processes_with(marker)
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
        except httpx.HTTPError:
            return None
        return found if len({sid for _g, sid in found.values()}) >= 3 else None

    found = _wait("the task's server and sleepers", all_started, c)
    groups = {pgid for pgid, _sid in found.values()}
    assert len(groups) >= 3  # the task's own group and two sessions that left it
    killed_at = time.monotonic()
    c.stop(c.agents["agent-1"], sig=signal.SIGKILL)
    time.sleep(GRACE / 2)
    assert all(_group_alive(g) for g in groups), "ended before the grace period"
    _wait(
        "every process of the task to end",
        lambda: not _processes_with(marker) and not any(_group_alive(g) for g in groups),
        c,
        timeout=GRACE + 20,
    )
    assert time.monotonic() - killed_at >= GRACE
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
