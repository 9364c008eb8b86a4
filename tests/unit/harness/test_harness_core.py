"""dauntless.core: cluster info, the master session, backends and contexts."""

from __future__ import annotations

import json
import random

import httpx
import numpy as np
import pytest
import torch

from dauntless.core import (
    APIError,
    ClusterInfo,
    Context,
    DistributedContext,
    LocalBackend,
    MasterBackend,
    MasterUnreachableError,
    SearcherAnswer,
    Session,
    TrialInfo,
    to_json_value,
)
from dauntless.storage import DirectoryStorageManager


def trial_env(**extra):
    env = {
        "DET_MASTER": "http://127.0.0.1:8080/",
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "4",
        "DET_TRIAL_ID": "9",
        "DET_TRIAL_RUN_ID": "2",
        "DET_ALLOCATION_ID": "alloc-1",
        "DET_TASK_ID": "task-1",
        "DET_TRIAL_SEED": "77",
        "DET_HPARAMS": '{"lr": 0.1, "global_batch_size": 8}',
        "DET_EXPERIMENT_CONFIG": '{"searcher": {"name": "single"}}',
        "DET_LATEST_CHECKPOINT": "abc-123",
        "DET_STEPS_COMPLETED": "40",
        "DET_SLOT_IDS": "0,1",
    }
    env.update(extra)
    return env


# ---------------------------------------------------------------- ClusterInfo


def test_cluster_info_reads_every_variable():
    info = ClusterInfo.from_env(trial_env())
    assert info is not None and info.trial is not None
    assert info.master_url == "http://127.0.0.1:8080"
    assert (info.allocation_id, info.task_id, info.slot_ids) == ("alloc-1", "task-1", ("0", "1"))
    t = info.trial
    assert (t.trial_id, t.experiment_id, t.trial_run_id, t.trial_seed) == (9, 4, 2, 77)
    assert t.hparams == {"lr": 0.1, "global_batch_size": 8}
    assert t.config == {"searcher": {"name": "single"}}
    assert (t.latest_checkpoint, t.steps_completed) == ("abc-123", 40)
    assert info.latest_checkpoint == "abc-123"


def test_cluster_info_is_none_off_cluster_and_empty_checkpoint_means_none():
    assert ClusterInfo.from_env({}) is None
    assert ClusterInfo.from_env({"DET_MASTER": ""}) is None
    info = ClusterInfo.from_env(trial_env(DET_LATEST_CHECKPOINT="", DET_STEPS_COMPLETED="0"))
    assert info.trial.latest_checkpoint is None and info.trial.steps_completed == 0


@pytest.mark.parametrize(
    "var,value,match",
    [
        ("DET_TRIAL_SEED", "x", "DET_TRIAL_SEED must be an int"),
        ("DET_TRIAL_SEED", str(2**31), "trial_seed"),
        ("DET_HPARAMS", "{bad", "DET_HPARAMS is not valid JSON"),
        ("DET_HPARAMS", "[1]", "DET_HPARAMS must be a JSON object"),
        ("DET_TRIAL_ID", "", "DET_TRIAL_ID is required"),
        ("DET_ALLOCATION_ID", "", "DET_ALLOCATION_ID is required"),
    ],
)
def test_cluster_info_names_the_bad_variable(var, value, match):
    with pytest.raises(ValueError, match=match):
        ClusterInfo.from_env(trial_env(**{var: value}))


# ---------------------------------------------------------------- Session


def make_session(handler, sleeps, **kwargs):
    return Session(
        "http://master:8080",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        rng=random.Random(0),
        **kwargs,
    )


def test_session_retries_5xx_with_capped_exponential_backoff():
    answers = iter([503, 502, 500, 200])
    calls = []

    def handler(request):
        calls.append(request)
        status = next(answers)
        return httpx.Response(status, json={"ok": True} if status == 200 else {"detail": "busy"})

    sleeps: list[float] = []
    with make_session(handler, sleeps, backoff_initial=1.0, backoff_max=3.0) as session:
        assert session.post("/api/v1/x", json={"a": 1}) == {"ok": True}
    assert len(calls) == 4 and json.loads(calls[-1].content) == {"a": 1}
    assert len(sleeps) == 3
    for sleep, cap in zip(sleeps, [1.0, 2.0, 3.0], strict=True):
        assert 0 <= sleep <= cap


def test_session_retries_connection_errors_then_gives_up():
    calls = []

    def handler(request):
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    sleeps: list[float] = []
    session = make_session(handler, sleeps, max_attempts=3)
    with pytest.raises(MasterUnreachableError, match="unreachable after 3 attempts"):
        session.get("/api/v1/master")
    assert len(calls) == 3 and len(sleeps) == 2


def test_session_does_not_retry_4xx_and_reports_the_detail():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(409, json={"detail": "trial is not active"})

    sleeps: list[float] = []
    with pytest.raises(APIError, match="409: trial is not active") as err:
        make_session(handler, sleeps).get("/api/v1/trials/1/searcher/operation")
    assert err.value.status_code == 409 and len(calls) == 1 and sleeps == []


def test_session_gives_up_on_persistent_5xx_with_api_error():
    sleeps: list[float] = []
    session = make_session(lambda r: httpx.Response(500, text="oops"), sleeps, max_attempts=2)
    with pytest.raises(APIError, match="500: oops"):
        session.get("/x")
    assert len(sleeps) == 1


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"timeout": 0}, {"backoff_initial": 2, "backoff_max": 1}]
)
def test_session_validates_its_arguments(kwargs):
    with pytest.raises(ValueError):
        Session("http://m", **kwargs)
    with pytest.raises(ValueError, match="http"):
        Session("m:8080")


# ---------------------------------------------------------------- MasterBackend


def test_master_backend_speaks_the_protocol_routes():
    seen = []

    def handler(request):
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.path, dict(request.url.params), body))
        path = request.url.path
        if path.endswith("/searcher/operation"):
            return httpx.Response(200, json={"op": {"length": 50}, "completed": False})
        if path.endswith("/signals/preemption"):
            return httpx.Response(200, json={"preempt": True})
        return httpx.Response(200, json={})

    session = Session("http://m", transport=httpx.MockTransport(handler))
    backend = MasterBackend(session)
    info = TrialInfo(
        trial_id=5, experiment_id=1, trial_seed=1, hparams={}, config={}, trial_run_id=3
    )
    ctx = Context(
        info, backend=backend, storage=DirectoryStorageManager("/nonexistent"), allocation_id="a-1"
    )
    assert backend.get_searcher_operation(5) == SearcherAnswer(length=50, completed=False)
    ctx.train.report_training_metrics(10, {"loss": torch.tensor(0.5)}, [{"loss": 0.5}])
    ctx.train.report_validation_metrics(10, {"acc": np.float32(0.25)})
    ctx.train.report_progress(0.2)
    ctx.train.report_early_exit("INVALID_HP")
    backend.complete_operation(5, 50, 0.125)
    assert backend.get_preemption_signal("a-1") is True
    ctx.close()
    assert seen == [
        ("GET", "/api/v1/trials/5/searcher/operation", {}, None),
        (
            "POST",
            "/api/v1/trials/5/metrics",
            {},
            {
                "group": "training",
                "steps_completed": 10,
                "trial_run_id": 3,
                "metrics": {"loss": 0.5},
                "batch_metrics": [{"loss": 0.5}],
            },
        ),
        (
            "POST",
            "/api/v1/trials/5/metrics",
            {},
            {
                "group": "validation",
                "steps_completed": 10,
                "trial_run_id": 3,
                "metrics": {"acc": 0.25},
                "batch_metrics": None,
            },
        ),
        ("POST", "/api/v1/trials/5/progress", {}, {"progress": 0.2}),
        ("POST", "/api/v1/trials/5/early_exit", {}, {"reason": "INVALID_HP"}),
        (
            "POST",
            "/api/v1/trials/5/searcher/completed_operation",
            {},
            {"op": {"length": 50}, "searcher_metric": 0.125},
        ),
        ("GET", "/api/v1/allocations/a-1/signals/preemption", {"timeout_seconds": "0"}, None),
    ]


def test_master_backend_rejects_a_malformed_operation():
    session = Session(
        "http://m",
        transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json={"op": {"length": "ten"}, "completed": False})
        ),
    )
    with pytest.raises(ValueError, match="valid length"):
        MasterBackend(session).get_searcher_operation(1)


# ---------------------------------------------------------------- contexts


def local_context(tmp_path, lengths=(10,)):
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={"a": 1}, config={})
    backend = LocalBackend(list(lengths))
    return Context(info, backend=backend, storage=DirectoryStorageManager(tmp_path)), backend


def test_checkpoint_context_writes_metadata_publishes_and_reports(tmp_path):
    ctx, backend = local_context(tmp_path)
    with ctx.checkpoint.store_path({"steps_completed": 7, "note": "x"}) as (path, uuid):
        (path / "weights.bin").write_bytes(b"\0" * 100)
    (report,) = backend.checkpoints
    assert report.uuid == uuid and report.steps_completed == 7 and report.trial_id == 1
    meta_size = (tmp_path / uuid / "metadata.json").stat().st_size
    assert report.resources == {"metadata.json": meta_size, "weights.bin": 100}
    assert ctx.checkpoint.get_metadata(uuid) == report.metadata
    assert report.metadata["note"] == "x" and "dauntless_version" in report.metadata
    with pytest.raises(ValueError, match="steps_completed"):
        with ctx.checkpoint.store_path({"note": "no steps"}):
            pass
    assert len(backend.checkpoints) == 1


def test_failed_checkpoint_is_neither_stored_nor_reported(tmp_path):
    ctx, backend = local_context(tmp_path)
    with pytest.raises(OSError):
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            raise OSError("disk full")
    assert backend.checkpoints == [] and list(tmp_path.iterdir()) == []


def test_searcher_yields_operations_until_closed_and_requires_completion(tmp_path):
    ctx, backend = local_context(tmp_path, lengths=(5, 9))
    seen = []
    for op in ctx.searcher.operations():
        seen.append(op.length)
        op.report_completed(1.0 / op.length)
    assert seen == [5, 9]
    assert backend.completed_operations == [(5, 0.2), (9, 1.0 / 9)]
    ctx2, _ = local_context(tmp_path, lengths=(5,))
    ops = ctx2.searcher.operations()
    next(ops)
    with pytest.raises(RuntimeError, match="was not completed"):
        next(ops)


def test_searcher_waits_while_no_operation_is_ready_and_can_stop(tmp_path):
    class SlowSearcher(LocalBackend):
        def __init__(self):
            super().__init__([4])
            self.asks = 0

        def get_searcher_operation(self, trial_id):
            self.asks += 1
            if self.asks <= 2:
                return SearcherAnswer(length=None, completed=False)
            return super().get_searcher_operation(trial_id)

    backend = SlowSearcher()
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={})
    ctx = Context(info, backend=backend, storage=DirectoryStorageManager(tmp_path))
    waits: list[float] = []
    ctx.searcher._sleep = waits.append
    lengths = []
    for op in ctx.searcher.operations(should_stop=lambda: False):
        lengths.append(op.length)
        op.report_completed(0.0)
    assert lengths == [4] and len(waits) == 2
    # The stop callback ends the wait (e.g. when the trial is preempted).
    stopper = SlowSearcher()
    ctx = Context(info, backend=stopper, storage=DirectoryStorageManager(tmp_path))
    assert list(ctx.searcher.operations(should_stop=lambda: True)) == []


def test_train_context_validates_and_converts_metrics(tmp_path, caplog):
    ctx, backend = local_context(tmp_path)
    ctx.train.report_validation_metrics(
        3, {"t": torch.tensor([1.0, 2.0]), "i": np.int64(4), "obj": object(), "s": "ok"}
    )
    (report,) = backend.metrics("validation")
    assert report.metrics == {"t": [1.0, 2.0], "i": 4, "s": "ok"}
    assert "dropping validation metrics 'obj'" in caplog.text
    with pytest.raises(ValueError, match="progress"):
        ctx.train.report_progress(1.5)
    with pytest.raises(ValueError, match="group"):
        ctx.train.report_metrics("testing", 1, {})
    with pytest.raises(ValueError, match="reason"):
        ctx.train.report_early_exit("BORED")
    assert to_json_value((np.float64(0.5), {"k": torch.tensor(2)})) == [0.5, {"k": 2}]


def test_local_backend_is_idempotent_on_steps_and_checks_operation_lengths():
    backend = LocalBackend([3])
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={})
    ctx = Context(info, backend=backend, storage=DirectoryStorageManager("/tmp"))
    ctx.train.report_training_metrics(3, {"loss": 1.0})
    ctx.train.report_training_metrics(3, {"loss": 2.0})
    assert [r.metrics for r in backend.metrics("training")] == [{"loss": 2.0}]
    with pytest.raises(ValueError, match="does not match"):
        backend.complete_operation(1, 4, 0.0)
    with pytest.raises(ValueError, match="increasing"):
        LocalBackend([3, 3])


def test_distributed_context_checks_ranks():
    d = DistributedContext()
    assert (d.get_rank(), d.get_size(), d.is_chief, d.get_num_agents()) == (0, 1, True, 1)
    with pytest.raises(ValueError, match="rank"):
        DistributedContext(rank=2, size=2)


def test_session_rejects_a_success_answer_that_is_not_json():
    session = make_session(lambda r: httpx.Response(200, text="<html>hi</html>"), [])
    with pytest.raises(APIError, match="not JSON"):
        session.get("/api/v1/master")
    assert make_session(lambda r: httpx.Response(200), []).post("/x") is None
