"""The task model functions run in the caller's transaction (issue 38 scope 7): a
TensorBoard's life from queue to idle kill, driven through them on a real database the
way the routes, the placement pass and the loop drive them, and a refused create that
leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from dauntless.config import MasterConfig
from dauntless.master.context import MasterContext
from dauntless.master.db import AllocationRow, Database, TaskRow, UserSessionRow
from dauntless.master.errors import BadRequest
from dauntless.master.models import task_runs, task_services, tasks


class _Clock:
    """A clock the test moves (seconds since the epoch)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ctx(tmp_path: Path):
    db = Database(f"sqlite:///{tmp_path}/master.db")
    db.migrate()
    ctx = MasterContext(db, MasterConfig(data_dir=str(tmp_path)), clock=_Clock())
    ctx.port = 8080
    yield ctx
    db.dispose()


def test_an_idle_tensorboard_is_killed_through_the_model_functions(ctx: MasterContext) -> None:
    clock = ctx.clock
    assert isinstance(clock, _Clock)
    config = {"idle_timeout": 60, "resources": {"slots": 0}}
    meta = {"experiment_ids": [], "trial_ids": [], "logdirs": {"exp1-trial1": "/tmp/x"}}
    answer = ctx.write(tasks.create_task, "TENSORBOARD", "determined", config, None, None, meta)
    task_id = answer["task"]["id"]
    assert answer["task"]["state"] == "QUEUED" and ctx.wake.is_set()

    with ctx.db.write() as s:  # the placement pass
        (request,) = task_runs.task_requests(task_runs.pending_tasks(s), "default")
        assert request.slots_needed == 0 and not request.preemptible
        assert task_runs.allocate_task(s, ctx, task_id, {"agent-1": ()})
        assert not task_runs.allocate_task(s, ctx, task_id, {"agent-1": ()})  # not queued now
    with ctx.db.write() as s:  # the agent's heartbeat
        alloc = s.scalars(select(AllocationRow).where(AllocationRow.task_id == task_id)).one()
        spec = task_runs.task_spec(s, ctx, alloc)
        alloc_id = alloc.id
    assert spec["env"]["DAUNTLESS_TENSORBOARD_LOGDIRS"] == "exp1-trial1:/tmp/x"
    assert spec["env"]["DAUNTLESS_IDLE_TIMEOUT"] == "60.0"
    assert spec["env"]["DET_MASTER"] == "http://127.0.0.1:8080"
    ctx.write(task_services.service_ready, task_id, alloc_id, "127.0.0.1", 4321, None)
    with ctx.db.read() as s:
        row, url = task_services.service_target(s, task_id)
        assert url == "http://127.0.0.1:4321" and tasks.read_task_view(s, task_id)["ready"]
        session_id = row.user_session_id
    assert session_id is not None  # the owner's login session for the task

    ready = clock.now
    ctx.task_activity[task_id] = ready + 50  # the proxy forwarded a request
    for now, state in ((ready + 100, "RUNNING"), (ready + 111, "TERMINATING")):
        ctx.write(lambda s, c, at=now: task_runs.kill_idle_tensorboards(s, c, at))
        with ctx.db.read() as s:
            assert tasks.read_task(s, task_id).state == state
    with ctx.db.write() as s:  # the agent reports the exit its kill order caused
        row = tasks.read_task(s, task_id)
        assert row.exit_message == "idle for 61 s (idle_timeout 60 s)"
        alloc = s.get(AllocationRow, alloc_id)
        assert alloc is not None and alloc.kill_requested
        alloc.exit_code = -15
        task_runs.task_exited(s, ctx, alloc)
    with ctx.db.read() as s:
        view = tasks.read_task_view(s, task_id)
        assert s.get(UserSessionRow, session_id) is None  # revoked with the end
    assert view["state"] == "CANCELED" and view["exit_code"] == -15
    assert task_id not in ctx.task_activity


def test_a_refused_create_stores_nothing_and_wakes_nothing(ctx: MasterContext) -> None:
    config = {"resources": {"resource_pool": "gpu"}}
    with pytest.raises(BadRequest) as err:
        ctx.write(tasks.create_task, "COMMAND", "determined", config, "true")
    assert err.value.errors == [
        ("resources.resource_pool", "unknown pool 'gpu'; pools: ['default']")
    ]
    with ctx.db.read() as s:
        assert s.scalars(select(TaskRow)).all() == []
    assert not ctx.wake.is_set()


def test_killing_a_queued_task_cancels_it_at_once(ctx: MasterContext) -> None:
    task_id = ctx.write(tasks.create_task, "COMMAND", "determined", None, ["true"])["task"]["id"]
    ctx.wake.clear()
    view = ctx.write(tasks.kill_task, task_id, "not needed")
    assert (view["state"], view["exit_message"]) == ("CANCELED", "not needed")
    assert ctx.wake.is_set()
    with ctx.db.read() as s:
        assert task_runs.pending_tasks(s) == []
        page = tasks.read_tasks(s, "COMMAND")
    assert page["total"] == 1 and page["tasks"][0]["id"] == task_id
