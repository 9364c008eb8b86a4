"""``python -m dauntless.exec.harness`` end to end, against an in-memory master.

The master side is the protocol's harness routes served by ``httpx.MockTransport`` on
top of a LocalBackend, so the harness runs its real session, retries, storage and loop.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from harness_toy_trial import toy_config

from dauntless.core import CheckpointReport, LocalBackend, MetricReport, Session
from dauntless.exec.harness import load_trial_class, main
from dauntless.pytorch import PyTorchTrial
from dauntless.pytorch._import import EntrypointError

HERE = Path(__file__).resolve().parent


class FakeMaster:
    """The harness routes of docs/protocol.md over a LocalBackend (one trial)."""

    def __init__(self, lengths, preempt_at_steps=None, fail_first_checkpoint=False):
        self.backend = LocalBackend(lengths, searcher_metric="validation_loss")
        self.requests: list[tuple[str, str, object]] = []
        self.unknown_routes: list[str] = []
        self.preempt_at_steps = preempt_at_steps
        self.fail_next_checkpoint = fail_first_checkpoint
        self.signal = threading.Condition()
        self.poll_timeouts: list[float] = []

    def session(self) -> Session:
        return Session(
            "http://master", transport=httpx.MockTransport(self.handle), sleep=lambda s: None
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, path, body))
        b = self.backend
        if m := re.fullmatch(r"/api/v1/trials/(\d+)/searcher/operation", path):
            ans = b.get_searcher_operation(int(m[1]))
            op = None if ans.length is None else {"length": ans.length}
            return httpx.Response(200, json={"op": op, "completed": ans.completed})
        if m := re.fullmatch(r"/api/v1/trials/(\d+)/searcher/completed_operation", path):
            b.complete_operation(int(m[1]), body["op"]["length"], body["searcher_metric"])
        elif m := re.fullmatch(r"/api/v1/trials/(\d+)/metrics(/batch)?", path):
            reports = body["reports"] if m[2] else [body]
            for report in reports:
                b.report_metrics(MetricReport(trial_id=int(m[1]), **report))
            last = reports[-1]["steps_completed"]
            if self.preempt_at_steps is not None and last >= self.preempt_at_steps:
                with self.signal:
                    b.request_preemption()
                    self.signal.notify_all()
        elif m := re.fullmatch(r"/api/v1/experiments/(\d+)", path):
            best = b.get_experiment_best_validation(int(m[1]))
            return httpx.Response(
                200, json={"experiment": {"id": int(m[1]), "best_searcher_metric": best}}
            )
        elif m := re.fullmatch(r"/api/v1/trials/(\d+)/progress", path):
            b.report_progress(int(m[1]), body["progress"])
        elif m := re.fullmatch(r"/api/v1/trials/(\d+)/early_exit", path):
            b.report_early_exit(int(m[1]), body["reason"])
        elif path == "/api/v1/checkpoints":
            if self.fail_next_checkpoint:
                self.fail_next_checkpoint = False
                return httpx.Response(503, json={"detail": "database is locked"})
            b.report_checkpoint(CheckpointReport(**body))
        elif m := re.fullmatch(r"/api/v1/allocations/([^/]+)/signals/preemption", path):
            # A long poll, as the master's: answer when the signal is raised or on timeout.
            timeout = float(request.url.params["timeout_seconds"])
            self.poll_timeouts.append(timeout)
            with self.signal:
                self.signal.wait_for(lambda: b.get_preemption_signal(m[1]), timeout=timeout)
            return httpx.Response(200, json={"preempt": b.get_preemption_signal(m[1])})
        else:
            self.unknown_routes.append(f"{request.method} {path}")
            return httpx.Response(404, json={"detail": f"no route {path}"})
        return httpx.Response(200, json={})


def trial_env(config, **extra):
    env = {
        "DET_MASTER": "http://master",
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "2",
        "DET_TRIAL_ID": "3",
        "DET_TRIAL_RUN_ID": "1",
        "DET_ALLOCATION_ID": "3.1",
        "DET_TASK_ID": "3",
        "DET_TRIAL_SEED": "1234",
        "DET_HPARAMS": json.dumps(config["hyperparameters"]),
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        "DET_LATEST_CHECKPOINT": "",
        "DET_STEPS_COMPLETED": "0",
        "DET_SLOT_IDS": "0",
    }
    env.update(extra)
    return env


def shared_fs_config(tmp_path, **overrides):
    config = toy_config("/unused", **overrides)
    config["checkpoint_storage"] = {
        "type": "shared_fs",
        "host_path": str(tmp_path),
        "storage_path": "ckpts",
    }
    return config


def test_preempt_then_resume_through_the_master_routes(tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO")
    monkeypatch.chdir(HERE)
    config = shared_fs_config(tmp_path)
    master = FakeMaster([20], preempt_at_steps=10, fail_first_checkpoint=True)
    assert main(trial_env(config), session=master.session(), preempt_poll_seconds=0.5) == 0

    # The signal raised at batch 10 reaches the loop through the long-poll thread, which
    # it checks after every batch: it stops within a batch or two.
    (ckpt,) = master.backend.checkpoints
    stopped = ckpt.steps_completed
    assert 10 <= stopped <= 12 and ckpt.allocation_id == "3.1" and ckpt.trial_id == 3
    assert master.poll_timeouts and set(master.poll_timeouts) == {0.5}
    directory = tmp_path / "ckpts" / ckpt.uuid
    files = {
        p.relative_to(directory).as_posix(): p.stat().st_size
        for p in directory.rglob("*")
        if p.is_file()
    }
    assert ckpt.resources == files
    assert {"metadata.json", "state-dict.pth", "load_data.json"} <= set(files)
    assert "code/harness_toy_trial.py" in files
    posts = [r for r in master.requests if r[1] == "/api/v1/checkpoints"]
    # The report at write time (UPLOADING; its 503 answer retried once), then the one
    # after the background flush and rename (COMPLETED).
    assert [p[2]["state"] for p in posts] == ["UPLOADING", "UPLOADING", "COMPLETED"], posts
    assert master.backend.completed_operations == []
    assert f"checkpoint {ckpt.uuid} saved at batch {stopped}" in caplog.text

    caplog.clear()
    env = trial_env(
        config,
        DET_LATEST_CHECKPOINT=ckpt.uuid,
        DET_STEPS_COMPLETED=str(stopped),
        DET_TRIAL_RUN_ID="2",
        DET_ALLOCATION_ID="3.2",
    )
    first_run = master
    master = FakeMaster([20])  # the new allocation sees no preemption signal
    assert main(env, session=master.session(), preempt_poll_seconds=0.5) == 0
    assert f"resuming at batch {stopped}" in caplog.text
    assert "validation at batch 20" in caplog.text
    ((length, metric),) = master.backend.completed_operations
    final_val = master.backend.metrics("validation")[-1]
    assert (length, metric) == (20, final_val.metrics["validation_loss"])
    # Reports every 5 batches, each made once, by the run that trained its last batch.
    assert [(r.steps_completed, r.trial_run_id) for r in first_run.backend.metrics("training")] == [
        (s, 1) for s in (5, 10, 15, 20) if s <= stopped
    ]
    assert [(r.steps_completed, r.trial_run_id) for r in master.backend.metrics("training")] == [
        (s, 2) for s in (5, 10, 15, 20) if s > stopped
    ]
    assert [c.steps_completed for c in master.backend.checkpoints] == [20]
    # Every request used a documented route (the fake answers 404 to anything else).
    assert first_run.unknown_routes == [] and master.unknown_routes == []


def test_errors_exit_non_zero_with_a_message(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(HERE)
    config = shared_fs_config(tmp_path, entrypoint="harness_toy_trial:Missing")
    assert main(trial_env(config), session=FakeMaster([5]).session(), preempt_poll_seconds=0.2) == 1
    err = capsys.readouterr().err
    # A config mistake: the one-line cause first, and no traceback through Dauntless.
    first = err.strip().splitlines()[0]
    assert first.startswith("harness error: EntrypointError") and "'Missing'" in first
    assert "Traceback" not in err and "RejectingTrial" in first  # names the classes there

    config = shared_fs_config(tmp_path)
    config["checkpoint_storage"] = {"type": "s3", "bucket": "b"}
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if the s3 extra were missing
    assert main(trial_env(config), session=FakeMaster([5]).session(), preempt_poll_seconds=0.2) == 1
    assert "pip install 'dauntless[s3]'" in capsys.readouterr().err

    assert main({"DET_MASTER": ""}) == 1
    assert "DET_MASTER is not set" in capsys.readouterr().err


def test_invalid_hp_in_init_reports_an_early_exit(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    config = shared_fs_config(tmp_path, entrypoint="harness_toy_trial:RejectingTrial")
    master = FakeMaster([5])
    assert main(trial_env(config), session=master.session(), preempt_poll_seconds=0.2) == 0
    assert master.backend.early_exits == ["INVALID_HP"]


def test_load_trial_class_checks_the_entrypoint(tmp_path):
    (tmp_path / "my_model.py").write_text(
        "from dauntless.pytorch import PyTorchTrial\n"
        "class Outer:\n    class Inner(PyTorchTrial):\n        pass\n"
        "NotATrial = int\n"
    )
    try:
        cls = load_trial_class("my_model:Outer.Inner", str(tmp_path))
        assert issubclass(cls, PyTorchTrial) and cls.__qualname__ == "Outer.Inner"
        with pytest.raises(EntrypointError, match="subclass of dauntless.pytorch.PyTorchTrial"):
            load_trial_class("my_model:NotATrial", str(tmp_path))
        with pytest.raises(EntrypointError, match="module:Class"):
            load_trial_class("my_model", str(tmp_path))
        with pytest.raises(EntrypointError, match="no module 'no_such_model'"):
            load_trial_class("no_such_model:Trial", str(tmp_path))
    finally:
        sys.modules.pop("my_model", None)


def test_module_entrypoint_runs_and_fails_cleanly_off_cluster():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dauntless.exec.harness"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "harness error: ValueError: DET_MASTER is not set" in proc.stderr
