"""The agent sends the cluster secret and never hands it to its tasks."""

from __future__ import annotations

import sys
import time

import httpx

from dauntless._auth import CLUSTER_SECRET_ENV, CLUSTER_SECRET_HEADER
from dauntless.agent._agent import Agent
from dauntless.config import AgentConfig


def test_agent_sends_the_secret_and_tasks_do_not_inherit_it(tmp_path, monkeypatch):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"agent": {}})

    monkeypatch.setenv(CLUSTER_SECRET_ENV, "agent-secret")
    config = AgentConfig(
        work_dir=str(tmp_path / "work"),
        artificial_slots=1,
        slot_type="cpu",
        cluster_secret="agent-secret",
        advertise_addr="127.0.0.1",
    )
    client = httpx.Client(base_url="http://master", transport=httpx.MockTransport(handler))
    agent = Agent(config, client=client)
    agent.register()
    assert seen[0].headers[CLUSTER_SECRET_HEADER] == "agent-secret"
    out = tmp_path / "env.txt"
    code = (
        f"import os; open({str(out)!r}, 'w').write(repr(sorted(os.environ)) + ' ' "
        "+ os.environ.get('DET_SESSION_TOKEN', ''))"
    )
    agent._start(
        {
            "allocation_id": "al-1",
            "trial_id": 1,
            "slot_ids": ["cpu0"],
            "entrypoint": [sys.executable, "-c", code],
            "env": {"DET_SESSION_TOKEN": "trial-token"},
        }
    )
    deadline = time.time() + 60
    while "al-1" in agent.tasks and time.time() < deadline:
        agent._reap()
        time.sleep(0.05)
    agent.shipper.stop()
    text = out.read_text()
    assert CLUSTER_SECRET_ENV not in text and "agent-secret" not in text
    assert text.endswith(" trial-token")
