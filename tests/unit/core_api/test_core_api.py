"""The Core API: ``dauntless.core.init()`` off and on a cluster, checkpoints, the searcher,
the preemption long poll, ``get_cluster_info`` and InvalidHP."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest

import dauntless
from dauntless import core
from dauntless.core import (
    Context,
    DownloadMode,
    LocalBackend,
    MasterBackend,
    PreemptContext,
    Session,
    TrialInfo,
)
from dauntless.master.testing import DEADLINE, wait_for
from dauntless.storage import DirectoryStorageManager, SharedFSStorageManager

# ---------------------------------------------------------------- a fake master


class FakeMaster:
    """The harness routes of docs/protocol.md for one trial, with a real long poll."""

    def __init__(self, lengths=(3,), fail_polls: int = 0) -> None:
        self.backend = LocalBackend(list(lengths), searcher_metric="loss")
        self.requests: list[tuple[str, str, dict]] = []
        self.signal = threading.Condition()
        self.fail_polls = fail_polls
        # When set to an Event, long polls wait for it before anything else (a master
        # that has the request in hand and does not answer); answered_polls counts answers.
        self.hold: threading.Event | None = None
        self.answered_polls = 0

    def session(self) -> Session:
        return Session(
            "http://master", transport=httpx.MockTransport(self.handle), sleep=lambda s: None
        )

    def preempt(self) -> None:
        with self.signal:
            self.backend.request_preemption()
            self.signal.notify_all()

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, path, dict(request.url.params)))
        b = self.backend
        if m := re.fullmatch(r"/api/v1/allocations/([^/]+)/signals/preemption", path):
            if self.fail_polls:
                self.fail_polls -= 1
                return httpx.Response(500, json={"detail": "database is locked"})
            if self.hold is not None:
                self.hold.wait()
            timeout = float(request.url.params["timeout_seconds"])
            with self.signal:
                self.signal.wait_for(lambda: b.get_preemption_signal(m[1]), timeout=timeout)
            self.answered_polls += 1
            return httpx.Response(200, json={"preempt": b.get_preemption_signal(m[1])})
        if re.fullmatch(r"/api/v1/trials/\d+/searcher/operation", path):
            ans = b.get_searcher_operation(1)
            op = None if ans.length is None else {"length": ans.length}
            return httpx.Response(200, json={"op": op, "completed": ans.completed})
        if re.fullmatch(r"/api/v1/trials/\d+/searcher/completed_operation", path):
            b.complete_operation(1, body["op"]["length"], body["searcher_metric"])
        elif re.fullmatch(r"/api/v1/trials/\d+/metrics", path):
            b.report_metrics(core.MetricReport(trial_id=1, **body))
        elif re.fullmatch(r"/api/v1/trials/\d+/metrics/batch", path):
            for report in body["reports"]:
                b.report_metrics(core.MetricReport(trial_id=1, **report))
        elif re.fullmatch(r"/api/v1/trials/\d+/progress", path):
            b.report_progress(1, body["progress"])
        elif re.fullmatch(r"/api/v1/trials/\d+/early_exit", path):
            b.report_early_exit(1, body["reason"])
        elif path == "/api/v1/checkpoints":
            b.report_checkpoint(core.CheckpointReport(**body))
        elif re.fullmatch(r"/api/v1/experiments/\d+", path):
            return httpx.Response(
                200,
                json={"experiment": {"best_searcher_metric": b.get_experiment_best_validation(1)}},
            )
        else:
            return httpx.Response(404, json={"detail": f"no route {path}"})
        return httpx.Response(200, json={})


def cluster_env(tmp_path, **extra):
    config = {
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 3}},
        "hyperparameters": {"lr": 0.5},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)},
    }
    env = {
        "DET_MASTER": "http://master",
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "1",
        "DET_TRIAL_ID": "1",
        "DET_TRIAL_RUN_ID": "1",
        "DET_ALLOCATION_ID": "1.1",
        "DET_TASK_ID": "1.1",
        "DET_TRIAL_SEED": "5",
        "DET_HPARAMS": '{"lr": 0.5}',
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        "DET_LATEST_CHECKPOINT": "",
        "DET_STEPS_COMPLETED": "0",
        "DET_SLOT_IDS": "0",
        "DET_AGENT_ID": "agent-1",
    }
    env.update(extra)
    return env


# ---------------------------------------------------------------- cluster info


def test_get_cluster_info_off_and_on_a_cluster(monkeypatch, tmp_path):
    monkeypatch.delenv("DET_MASTER", raising=False)
    assert dauntless.get_cluster_info() is None
    for key, value in cluster_env(
        tmp_path, DET_LATEST_CHECKPOINT="abc", DET_STEPS_COMPLETED="30"
    ).items():
        monkeypatch.setenv(key, value)
    info = dauntless.get_cluster_info()
    assert info is not None and info.trial is not None
    assert (info.trial.trial_id, info.trial.trial_seed, info.trial.hparams) == (1, 5, {"lr": 0.5})
    assert (info.latest_checkpoint, info.trial.steps_completed) == ("abc", 30)
    assert (info.agent_id, info.container_rank, info.task_type) == ("agent-1", 0, "TRIAL")
    assert core.get_cluster_info() == info


# ---------------------------------------------------------------- local mode


def test_init_off_cluster_is_a_local_context(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("DET_MASTER", raising=False)
    caplog.set_level("INFO")
    with core.init(checkpoint_storage=str(tmp_path / "ckpt")) as ctx:
        assert isinstance(ctx.backend, LocalBackend) and ctx.info is None
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            op.report_completed(0.5)
        assert lengths == [1]
        ctx.train.report_training_metrics(1, {"loss": 0.5})
        ctx.train.report_validation_metrics(1, {"loss": 0.25})
        assert ctx.preempt.should_preempt() is False
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "model.bin").write_bytes(b"weights")
            (path / "sub").mkdir()
            (path / "sub" / "notes.txt").write_text("hi")
    assert "training metrics at batch 1: loss=0.5" in caplog.text
    storage = DirectoryStorageManager(tmp_path / "ckpt")
    assert storage.resources(storage_id).keys() == {"metadata.json", "model.bin", "sub/notes.txt"}


def test_checkpoint_upload_download_restore_metadata_delete(tmp_path):
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={})
    backend = LocalBackend([1])
    ctx = Context(info, backend=backend, storage=DirectoryStorageManager(tmp_path / "store"))
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "nested" / "b.bin").write_bytes(b"bb")
    storage_id = ctx.checkpoint.upload(src, {"steps_completed": 4, "note": "x"})
    (report,) = backend.checkpoints
    assert report.uuid == storage_id and report.steps_completed == 4
    assert set(report.resources) == {"a.txt", "nested/b.bin", "metadata.json"}
    meta = ctx.checkpoint.get_metadata(storage_id)
    assert meta["note"] == "x" and meta["steps_completed"] == 4
    out = tmp_path / "out"
    ctx.checkpoint.download(storage_id, out, selector=lambda rel: rel.endswith(".bin"))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "nested/b.bin"
    ]
    with ctx.checkpoint.restore_path(storage_id, DownloadMode.NoSharedDownload) as path:
        assert (path / "a.txt").read_text() == "a"
    with ctx.checkpoint.restore_path(storage_id, selector=lambda rel: rel == "a.txt") as path:
        assert [p.name for p in path.iterdir()] == ["a.txt"]
    assert not path.exists()  # the selected copy is removed after the block
    assert ctx.checkpoint.delete(storage_id) is True
    assert ctx.checkpoint.delete(storage_id) is False
    with pytest.raises(ValueError, match="steps_completed"):
        ctx.checkpoint.upload(src)
    with pytest.raises(FileNotFoundError):
        ctx.checkpoint.upload(tmp_path / "missing", {"steps_completed": 0})


def test_invalid_hp_in_the_with_block_reports_an_early_exit_and_exits_zero(monkeypatch, tmp_path):
    monkeypatch.delenv("DET_MASTER", raising=False)
    seen = {}
    with pytest.raises(SystemExit) as exit_info:
        with core.init(checkpoint_storage=tmp_path) as ctx:
            seen["backend"] = ctx.backend
            raise dauntless.InvalidHP("bad lr")
    assert exit_info.value.code == 0
    assert seen["backend"].early_exits == ["INVALID_HP"]


# ---------------------------------------------------------------- on a cluster


def test_init_on_a_cluster_reports_to_the_master(monkeypatch, tmp_path):
    master = FakeMaster(lengths=(3,))
    for key, value in cluster_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("dauntless.core._context.Session", lambda url, **retries: master.session())
    with core.init() as ctx:
        assert isinstance(ctx.backend, MasterBackend) and ctx.info.allocation_id == "1.1"
        ctx.preempt.poll_seconds = 0.2
        for op in ctx.searcher.operations():
            for batch in range(1, op.length + 1):
                ctx.train.report_training_metrics(batch, {"loss": 1.0 / batch})
                op.report_progress(batch)
            ctx.train.report_validation_metrics(op.length, {"loss": 0.1})
            with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
                (path / "state.json").write_text("{}")
            assert ctx.train.get_experiment_best_validation() == 0.1
            op.report_completed(0.1)
            assert ctx.preempt.should_preempt() is False
    b = master.backend
    assert [r.steps_completed for r in b.metrics("training")] == [1, 2, 3]
    assert b.progress == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert b.completed_operations == [(3, 0.1)]
    (ckpt,) = b.checkpoints
    assert (tmp_path / ckpt.uuid / "state.json").is_file() and ckpt.allocation_id == "1.1"
    polls = [r for r in master.requests if r[1].endswith("/signals/preemption")]
    assert polls and all(r[2] == {"timeout_seconds": "0.2"} for r in polls)


def test_init_parses_the_experiment_config_once(monkeypatch, tmp_path):
    # Issue 37: a trivial trial parsed its config three times in core.init() (init,
    # from_cluster_info for the storage, Context for the searcher's length).
    import dauntless.config

    master = FakeMaster(lengths=(3,))
    for key, value in cluster_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("dauntless.core._context.Session", lambda url, **retries: master.session())
    parse = dauntless.config.parse_experiment_config
    parsed = []
    monkeypatch.setattr(
        dauntless.config, "parse_experiment_config", lambda raw: parsed.append(raw) or parse(raw)
    )
    with core.init() as ctx:
        assert ctx.searcher._own_length is False  # the master hands out the operations
        assert isinstance(ctx.checkpoint.storage, SharedFSStorageManager)  # the config's
    assert len(parsed) == 1


def test_init_refuses_multi_slot_trials_without_a_distributed_context(monkeypatch, tmp_path):
    env = cluster_env(tmp_path)
    config = json.loads(env["DET_EXPERIMENT_CONFIG"])
    config["resources"] = {"slots_per_trial": 2}
    env["DET_EXPERIMENT_CONFIG"] = json.dumps(config)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match="from_torch_distributed"):
        core.init()


# ---------------------------------------------------------------- preemption long poll


def _polls(master: FakeMaster) -> list[tuple[str, str, dict]]:
    """The preemption long polls the fake master has been asked."""
    return [r for r in list(master.requests) if r[1].endswith("/signals/preemption")]


def _preempt_context(master: FakeMaster, **kwargs) -> tuple[PreemptContext, MasterBackend]:
    backend = MasterBackend(master.session())
    return PreemptContext(backend, "1.1", **kwargs), backend


def test_the_signal_is_watched_by_a_thread_not_asked_on_every_check():
    master = FakeMaster()
    master.hold = threading.Event()  # the master answers no long poll until this is set
    preempt, backend = _preempt_context(master, poll_seconds=0.3)
    try:
        # Proven by ordering, not a clock: the master has the watcher's long poll in hand
        # and answers nothing while the checks run, so checks that waited for the master
        # (or asked it themselves) could not finish; the join's timeout is a deadline for
        # failure only.
        assert preempt.should_preempt() is False  # starts the watcher
        wait_for("the watcher's first long poll", lambda: _polls(master))
        answers: list[bool] = []
        checking = threading.Thread(
            target=lambda: answers.extend(preempt.should_preempt() for _ in range(10_000)),
            daemon=True,
        )
        checking.start()
        checking.join(DEADLINE)
        assert not checking.is_alive(), "a check must not wait for the master"
        assert len(answers) == 10_000 and not any(answers)
        assert master.answered_polls == 0 and len(_polls(master)) == 1
        master.hold.set()
        master.preempt()
        wait_for("the signal to be seen", preempt.should_preempt)
        assert preempt.should_preempt() is True and preempt.acknowledged
        assert 1 <= len(_polls(master)) <= 10, "the thread long-polls; it does not poll per check"
    finally:
        master.hold.set()
        preempt.close()
        backend.close()
    assert not any(t.name.startswith("preemption-") for t in threading.enumerate())


def test_start_background_starts_the_watcher_before_any_check(tmp_path):
    master = FakeMaster()
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={})
    backend = MasterBackend(master.session())
    context = Context(
        info,
        backend=backend,
        storage=DirectoryStorageManager(tmp_path),
        allocation_id="1.1",
        preempt_poll_seconds=0.3,
    )
    with context:
        context.start_background()
        # The watcher polls although nothing has asked should_preempt() yet.
        wait_for("the watcher's first long poll", lambda: _polls(master))
        context.start_background()  # a second call starts nothing more
        watchers = [t for t in threading.enumerate() if t.name == "preemption-1.1"]
        assert len(watchers) == 1
    assert not any(t.name == "preemption-1.1" for t in threading.enumerate())


def test_the_watcher_survives_master_errors():
    master = FakeMaster(fail_polls=3)
    master.preempt()
    preempt, backend = _preempt_context(master, poll_seconds=0.2, error_backoff=0.01)
    try:
        wait_for("the signal to be seen", preempt.should_preempt)
        assert preempt.should_preempt() is True
    finally:
        preempt.close()
        backend.close()


def test_preempt_context_checks_its_arguments():
    backend = LocalBackend([1])
    with pytest.raises(ValueError, match="poll_seconds"):
        PreemptContext(backend, "a", poll_seconds=0)
    with pytest.raises(TypeError, match="PreemptMode"):
        PreemptContext(backend, "a", mode="chief")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_seconds"):
        MasterBackend(Session("http://m")).get_preemption_signal("a", timeout_seconds=61)


def test_status_and_metadata_off_the_cluster() -> None:
    """``core.train.set_status`` / ``set_metadata`` / ``get_metadata`` in local mode: kept
    by the local backend, merged as the master merges them; bad input refused."""
    with core.init() as ctx:
        ctx.train.set_status("validating")
        ctx.train.set_metadata({"data": {"version": 1}, "tags": ["a"]})
        ctx.train.set_metadata({"data": {"rows": 3}, "tags": ["b"]})
        assert ctx.train.get_metadata() == {"data": {"version": 1, "rows": 3}, "tags": ["b"]}
        assert isinstance(ctx.backend, LocalBackend)
        assert ctx.backend.statuses == ["validating"]
        with pytest.raises(TypeError, match="str keys"):
            ctx.train.set_metadata({1: "x"})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="256"):
            ctx.train.set_status("x" * 257)
