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


def test_an_agent_holds_its_next_beat_at_once_after_reporting_its_last_exit(tmp_path):
    """The beat that reports an idle agent's last exit is not held (it carries the
    exit); the next one is sent at once, held, rather than after a heartbeat interval
    (here 60 s), during which a trial created would wait."""
    config = MasterConfig(
        data_dir=str(tmp_path / "m"),
        port=18080,
        db_url=f"sqlite:///{tmp_path}/master.db",
        security={"agents": {"allow_artificial_slots": True}},
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as admin, TestClient(app) as agent_client:
        sign_in(admin)
        files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
        r = admin.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
        assert r.status_code == 201, r.text
        agent = Agent(
            AgentConfig(
                agent_id="a1",
                work_dir=str(tmp_path / "work"),
                artificial_slots=1,
                slot_type="cpu",
                cluster_secret=app.state.auth.cluster_secret,
                advertise_addr="127.0.0.1",
                heartbeat_interval=60.0,
                warm_start=False,
            ),
            client=agent_client,
        )
        beats: list[str] = []
        agent_client.event_hooks["request"].append(
            lambda r: beats.append(str(r.url)) if r.url.path.endswith("/heartbeat") else None
        )

        def start(spec: dict) -> None:  # the trial "runs" and exits at once
            agent.pending_exits[spec["allocation_id"]] = (0, "done", False)
            agent.wake.set()

        agent._start = start  # type: ignore[method-assign]
        registered = threading.Event()
        original_register = agent.register

        def register() -> None:
            original_register()
            assert loop.schedule_pass(app.state.ctx, maintenance=False) == 1
            registered.set()

        agent.register = register  # type: ignore[method-assign]
        stop = threading.Event()
        runner = threading.Thread(target=agent.run, args=(stop,))
        runner.start()
        try:
            # beat 1: brings the trial (not held: the master had no answer to keep);
            # beat 2: reports its exit (never held); beat 3: held, sent at once.
            deadline = time.monotonic() + 30
            while len(beats) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(beats) >= 3, beats
            assert not beats[1].endswith("wait_seconds=10")
            assert beats[2].endswith("/heartbeat?wait_seconds=10"), beats
        finally:
            stop.set()
            agent.wake.set()
            # Something changes for the agent: its held beat is answered at once.
            admin.post("/api/v1/agents/a1/disable")
            runner.join(timeout=60)
        assert not runner.is_alive()
