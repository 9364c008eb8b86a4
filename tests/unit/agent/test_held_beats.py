"""An idle agent asks the master to hold its heartbeat until work is placed on it, so that
a trial created for it starts at once rather than at its next beat (issue 37: create ->
first metric); an agent with a task running or an exit to report never does."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from dauntless.agent._agent import Agent
from dauntless.config import AgentConfig, MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

CONFIG = """
name: held
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
max_restarts: 0
"""


def test_an_idle_agents_held_beat_brings_work_placed_meanwhile(tmp_path):
    config = MasterConfig(
        data_dir=str(tmp_path / "m"),
        port=18080,
        db_url=f"sqlite:///{tmp_path}/master.db",
        security={"agents": {"allow_artificial_slots": True}},
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as admin, TestClient(app) as agent_client:
        sign_in(admin)
        agent = Agent(
            AgentConfig(
                agent_id="a1",
                work_dir=str(tmp_path / "work"),
                artificial_slots=1,
                slot_type="cpu",
                cluster_secret=app.state.auth.cluster_secret,
                advertise_addr="127.0.0.1",
            ),
            client=agent_client,
        )
        sent: list[str] = []
        agent_client.event_hooks["request"].append(lambda r: sent.append(str(r.url)))
        try:
            assert agent.run_once(hold=0.05) == 0.05  # registers; nothing to start
            assert sent[-1].endswith("/heartbeat?wait_seconds=0.05")
            started: list[str] = []
            agent._start = lambda spec: started.append(spec["allocation_id"])  # no process
            held = threading.Thread(target=agent.run_once, kwargs={"hold": 60.0})
            held.start()
            deadline = time.monotonic() + 60
            while not app.state.ctx.heartbeats._waiters and time.monotonic() < deadline:
                time.sleep(0.01)
            files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
            r = admin.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
            assert r.status_code == 201, r.text
            assert loop.schedule_pass(app.state.ctx, maintenance=False) == 1
            held.join(timeout=120)
            assert not held.is_alive() and len(started) == 1
            assert sent[-1].endswith("/heartbeat?wait_seconds=10")  # MAX_BEAT_HOLD_SECONDS
            # With a task running (or an exit to report) the beat is never held.
            agent.tasks[started[0]] = None  # type: ignore[assignment]
            agent._reap = lambda: None  # the stand-in task has no process to reap
            assert agent.run_once(hold=60.0) == 0.0
            assert sent[-1].endswith("/heartbeat")
        finally:
            agent.tasks.clear()
            agent.shipper.stop()
