"""The remote search runner (dauntless.search_runner) against a master served over real
sockets: it creates the experiment, answers every event, resumes from its saved state,
and the search ends as its method says; trials are played by the test."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

from dauntless.client import Session
from dauntless.master.testing import serve
from dauntless.search_runner import RemoteSearchRunner

from ..searcher.search_methods import MAX_TRIALS, SeededRandom

CONFIG = """
entrypoint: python3 train.py
hyperparameters: {global_batch_size: 32}
searcher: {name: custom, metric: accuracy, smaller_is_better: false}
reproducibility: {experiment_seed: 5}
"""


def test_remote_runner_drives_a_search_and_resumes(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    with serve(str(tmp_path / "master"), run_loop=False) as live:
        token = httpx.post(
            live.url + "/api/v1/auth/login", json={"username": "determined", "password": ""}
        ).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        admin = httpx.post(
            live.url + "/api/v1/auth/login", json={"username": "admin", "password": ""}
        ).json()["token"]
        as_trial = {"Authorization": f"Bearer {admin}"}  # completions as an admin may
        session = Session(live.url, token=token)
        runner = RemoteSearchRunner(
            SeededRandom(), tmp_path / "runner", session=session, poll_interval=0.05
        )
        done: list[int] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                done.append(runner.run(CONFIG))
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        id_file = tmp_path / "runner" / "experiment_id.txt"
        deadline = time.time() + 60
        while not id_file.exists():
            assert time.time() < deadline and not errors, errors
            time.sleep(0.05)
        exp_id = int(id_file.read_text())
        completed: set[int] = set()
        while thread.is_alive() and time.time() < deadline:
            body = httpx.get(f"{live.url}/api/v1/experiments/{exp_id}", headers=headers).json()
            for t in body["trials"]:
                if t["id"] not in completed and t["target_length"] == 10:
                    completed.add(t["id"])
                    r = httpx.post(
                        f"{live.url}/api/v1/trials/{t['id']}/searcher/completed_operation",
                        json={"op": {"length": 10}, "searcher_metric": 0.5},
                        headers=as_trial,
                    )
                    assert r.status_code == 200, r.text
            time.sleep(0.05)
        thread.join(10)
        assert not errors, errors
        assert done == [exp_id]
        body = httpx.get(f"{live.url}/api/v1/experiments/{exp_id}", headers=headers).json()
        assert body["experiment"]["state"] == "COMPLETED"
        trials = sorted(body["trials"], key=lambda t: t["id"])
        assert [t["request_id"] for t in trials] == [f"trial-{i}" for i in range(1, MAX_TRIALS + 1)]
        state = json.loads((tmp_path / "runner" / f"exp_{exp_id}" / "state.json").read_text())
        assert state["method_state"]["created"] == MAX_TRIALS
        assert state["experiment_seed"] == 5

        # Started again, it resumes the same (now ended) experiment and returns at once.
        again = RemoteSearchRunner(SeededRandom(), tmp_path / "runner", session=session)
        assert again.run(CONFIG) == exp_id
        session.close()
