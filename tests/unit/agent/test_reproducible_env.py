"""Tasks start with ``MKL_DYNAMIC=FALSE`` unless they or the agent set it (Intel's
condition for run-to-run reproducible BLAS results, which exact resumption needs), and
the warm worker starts with the same value, so a forked trial matches a cold one."""

from __future__ import annotations

import json
import os
import sys
import time

import httpx
import pytest

from dauntless.agent._agent import Agent, launched_command
from dauntless.agent._warm import warm_request
from dauntless.config import AgentConfig


def _task_env(tmp_path, spec_env: dict[str, str]) -> dict[str, str]:
    def handler(request: httpx.Request) -> httpx.Response:
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
    out = tmp_path / f"env-{len(list(tmp_path.glob('env-*')))}.json"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    agent._start(
        {
            "allocation_id": "al-env",
            "slot_ids": [],
            "entrypoint": [sys.executable, "-c", code],
            "env": spec_env,
        }
    )
    deadline = time.time() + 60
    while "al-env" in agent.tasks and time.time() < deadline:
        agent._reap()
        time.sleep(0.05)
    agent.shipper.stop()
    return json.loads(out.read_text())


def test_tasks_get_mkl_dynamic_false_unless_they_set_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MKL_DYNAMIC", raising=False)
    assert _task_env(tmp_path, {})["MKL_DYNAMIC"] == "FALSE"
    assert _task_env(tmp_path, {"MKL_DYNAMIC": "TRUE"})["MKL_DYNAMIC"] == "TRUE"
    assert Agent._base_env()["MKL_DYNAMIC"] == "FALSE"  # the warm worker's variables


def test_the_agents_own_mkl_dynamic_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("MKL_DYNAMIC", "TRUE")
    assert _task_env(tmp_path, {})["MKL_DYNAMIC"] == "TRUE"
    assert Agent._base_env()["MKL_DYNAMIC"] == "TRUE"


@pytest.mark.parametrize(
    ("task", "worker", "warm"), [("FALSE", "FALSE", True), ("TRUE", "FALSE", False)]
)
def test_a_task_with_another_mkl_dynamic_than_the_worker_starts_cold(
    tmp_path, task: str, worker: str, warm: bool
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    base = {"PATH": path, "MKL_DYNAMIC": worker}
    env = {
        **base,
        "DET_TASK_TYPE": "TRIAL",
        "DET_WORLD_SIZE": "1",
        "DET_NUM_PARTS": "1",
        "DET_EXPERIMENT_CONFIG": json.dumps({"entrypoint": "python3 train.py"}),
        "MKL_DYNAMIC": task,
    }
    req = warm_request(launched_command("python3 train.py"), env, str(tmp_path), base)
    assert (req is not None) is warm
