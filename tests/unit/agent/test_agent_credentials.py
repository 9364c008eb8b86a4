"""The agent registers with the cluster secret, then uses the credential the master
issued; it never hands the secret to its tasks, and hands them their tokens as files of
their own (issue 29)."""

from __future__ import annotations

import json
import os
import sys
import time

import httpx

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_ENV, CLUSTER_SECRET_HEADER
from dauntless.agent._agent import Agent
from dauntless.config import AgentConfig


def test_agent_sends_the_secret_and_tasks_do_not_inherit_it(tmp_path, monkeypatch):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"agent": {}, "token": "issued-credential"})

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
    assert AGENT_TOKEN_HEADER not in seen[0].headers
    assert json.loads(seen[0].content)["runtime"]["identity"]["uid"] == os.getuid()
    agent.client.get("/anything")  # every later call: the credential, not the secret
    assert CLUSTER_SECRET_HEADER not in seen[1].headers
    assert seen[1].headers[AGENT_TOKEN_HEADER] == "issued-credential"
    out = tmp_path / "env.txt"
    code = (
        "import os, stat; p = os.environ['DET_SESSION_TOKEN_FILE']; "
        f"open({str(out)!r}, 'w').write(repr(sorted(os.environ)) + ' ' "
        "+ repr(os.environ.get('DET_SESSION_TOKEN')) + ' ' "
        "+ oct(stat.S_IMODE(os.stat(p).st_mode)) + ' ' + open(p).read())"
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
    # not in the environment (the task runs as the agent, not isolated): a file of 0600
    assert text.endswith(" None 0o600 trial-token")
    assert not (tmp_path / "work" / ".private" / "al-1").exists()  # removed at the end


def test_task_output_is_numbered_after_the_preparations_lines(tmp_path):
    """A task's output (read from its supervisor's file) continues the numbering of the
    lines its preparation logged (an environment build's): the master stores each
    ``(allocation, seq)`` once, so a number given twice would lose a line."""
    shipped: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/task/logs":
            shipped.extend(json.loads(request.content)["logs"])
        return httpx.Response(200, json={"agent": {}, "token": "t", "stored": 0})

    config = AgentConfig(
        work_dir=str(tmp_path / "work"),
        artificial_slots=1,
        slot_type="cpu",
        cluster_secret="s",
        advertise_addr="127.0.0.1",
        warm_start=False,
    )
    agent = Agent(config, httpx.Client(base_url="http://m", transport=httpx.MockTransport(handler)))
    for line in ("building environment", "built environment"):  # as prepare() logs them
        agent.shipper.add("al-2", "stdout", line)
    agent._start(
        {"allocation_id": "al-2", "slot_ids": [], "entrypoint": "echo one; echo two", "env": {}}
    )
    deadline = time.time() + 60
    while "al-2" in agent.tasks and time.time() < deadline:
        agent._reap()
        time.sleep(0.05)
    agent.shipper.stop()
    assert [(x["seq"], x["log"]) for x in shipped] == [
        (1, "building environment"),
        (2, "built environment"),
        (3, "one"),
        (4, "two"),
    ]
