"""PyTorchTrial training over several processes (gloo on 127.0.0.1): DDP, sharded data,
metrics reduced across ranks, chief-only reports and checkpoints, gradient aggregation
with ``no_sync``, and checkpoints that resume exactly and across process counts."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dist_trial_worker
import pytest
import torch

from dauntless.pytorch._distributed import init_process_group_from_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP is tested on Linux")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(
    out: Path, size: int, target: Any = None, timeout: float = 120, **options: Any
) -> list[dict[str, Any]]:
    """Run ``size`` ranks of dist_trial_worker.run (or ``target``); every rank's record.
    Ranks still running after ``timeout`` seconds are killed and the test fails."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["torch", "torch._dynamo", "torch.distributed", "dauntless.pytorch", "dist_trial_worker"]
    )
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    target = target or dist_trial_worker.run
    procs = [
        ctx.Process(target=target, args=(r, size, port, str(out), options)) for r in range(size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:  # ranks that disagree wait in a collective forever
            p.kill()
            p.join()
    assert codes == [0] * size
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(size)]


def _assert_metrics_close(a: list, b: list) -> None:
    assert [x[0] for x in a] == [x[0] for x in b]
    for x, y in zip(a, b, strict=True):
        assert x[1].keys() == y[1].keys()
        for k in x[1]:
            assert x[1][k] == pytest.approx(y[1][k], rel=1e-5, abs=1e-7), (x[0], k)


def _assert_params(a: dict, b: dict, exact: bool) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_two_ranks_train_like_one_and_only_the_chief_reports_and_checkpoints(tmp_path):
    (one,) = _train(tmp_path / "one", 1)
    chief, worker = _train(tmp_path / "two", 2)
    # Same global batch (8 records; 4 per rank), same records: the same training.
    assert one["epoch_len"] == chief["epoch_len"] == worker["epoch_len"] == 8
    assert one["batches"] == chief["batches"] == worker["batches"] == 20
    _assert_metrics_close(chief["training"], one["training"])
    for (_, _, per_batch), (_, _, ref) in zip(chief["training"], one["training"], strict=True):
        _assert_metrics_close([(0, m) for m in per_batch], [(0, m) for m in ref])
    # The custom reducer saw every rank's records: 5 batches x 8 in a training period,
    # and the whole validation set (64 records) once per validation.
    assert chief["training"][0][1]["records"] == 40
    assert [m["records"] for _, m in chief["validation"]] == [64, 64]
    _assert_metrics_close(chief["validation"], one["validation"])
    assert [length for length, _ in chief["completed"]] == [10, 20]
    _assert_params(chief["params"], one["params"], exact=False)
    _assert_params(worker["params"], chief["params"], exact=True)
    # Only the chief reported and wrote checkpoints.
    assert worker["training"] == worker["validation"] == []
    assert worker["checkpoints"] == [] and worker["completed"] == []
    assert chief["checkpoints"]
    # (TensorBoard event files live beside the checkpoints, under tensorboard/.)
    stored = sorted(
        p.name for p in (tmp_path / "two" / "ckpt").iterdir() if p.name != "tensorboard"
    )
    assert stored == sorted(chief["checkpoints"])
    state = torch.load(
        tmp_path / "two" / "ckpt" / chief["checkpoints"][-1] / "state-dict.pth", weights_only=True
    )
    assert list(state["models_state_dict"][0]) == ["weight", "bias"]  # no DDP "module."
    assert len(state["trial_state"]["ranks"]) == 2


def test_a_stop_on_any_rank_checkpoints_and_resumes_exactly_with_any_rank_count(tmp_path):
    (full,) = _train(tmp_path / "full", 2, reducer=False)[:1]
    # Rank 1 alone asks to stop during batch 13 (no boundary: the scheduling unit is 5):
    # the vote started after 13 is read after 14, where every rank stops; the chief saves.
    chief, worker = _train(tmp_path / "a", 2, stop_at=(1, 13), reducer=False)
    assert chief["result"] == worker["result"] == "preempted"
    assert chief["batches"] == worker["batches"] == 14
    latest = chief["checkpoints"][-1]
    # Resume with two ranks: exactly the uninterrupted run.
    ckpt = tmp_path / "a" / "ckpt"
    for name in ("b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ckpt").symlink_to(ckpt)
    chief2, _ = _train(tmp_path / "b", 2, lengths=[20], latest=latest, reducer=False)
    assert chief2["batches"] == 20
    _assert_params(chief2["params"], full["params"], exact=True)
    assert chief2["training"] == [t for t in full["training"] if t[0] > 14]
    assert chief2["validation"][-1] == full["validation"][-1]
    # The two-rank checkpoint resumes in one process, to the same result.
    (single,) = _train(tmp_path / "c", 1, lengths=[20], latest=latest, reducer=False)
    _assert_params(single["params"], full["params"], exact=False)
    _assert_metrics_close(single["training"], [t for t in full["training"] if t[0] > 14])
    # The preemption signal the chief sees during batch 7 stops every rank after batch 8.
    chief, worker = _train(tmp_path / "d", 2, preempt_at=7, reducer=False)
    assert chief["result"] == worker["result"] == "preempted"
    assert chief["batches"] == worker["batches"] == 8
    assert len(chief["checkpoints"]) == 1 and worker["checkpoints"] == []


@pytest.mark.parametrize(
    ("asked", "stopped"),
    [
        (15, 15),  # a reporting boundary decides at once, with that boundary's checkpoint
        (14, 15),  # the vote started after 14 is settled at the boundary after 15
        (9, 10),  # ... or at the end of the operation (length 10), once it is completed
    ],
)
def test_a_stop_one_rank_asks_for_stops_every_rank_at_the_same_batch(tmp_path, asked, stopped):
    # Only rank 1 sees its stop request; the stop check between boundaries is
    # asynchronous, so the ranks stop one batch later at most, and at the same batch,
    # with one checkpoint (the chief's) at that batch.
    chief, worker = _train(tmp_path, 2, stop_at=(1, asked), reducer=False, timeout=60)
    assert chief["result"] == worker["result"] == "preempted"
    assert chief["batches"] == worker["batches"] == stopped
    # The chief's last checkpoint is at that batch (once: a stop at a boundary reuses
    # the boundary's), and the worker had taken the same number of steps.
    saved = chief["checkpoint_batches"]
    assert saved[-1] == stopped and len(saved) == len(set(saved))
    assert worker["checkpoints"] == []
    assert [length for length, _ in chief["completed"]] == [10]


def test_the_process_group_starts_from_the_launcher_variables(tmp_path):
    seen = _train(tmp_path, 2, target=dist_trial_worker.join_from_env)
    for r, s in enumerate(seen):
        assert s["layout"] == [r, 2, 2] and s["started"] and s["backend"] == "gloo"
        assert s["any"] == [True, False]
        assert s["votes"] == [False, True, False, False, False]
        assert s["initialized_after"] is False
        # The DDP model let go of the group before it ended (else gloo may abort the
        # process at exit); its gradients were averaged over the ranks before that.
        assert s["ddp_released"] is True
        assert s["grad_averaged"] == pytest.approx([sum(range(2)) * 3 / 2] * 4)


def test_the_process_group_needs_the_launcher_variables():
    distributed, started = init_process_group_from_env(1, {})
    assert distributed.size == 1 and not started
    distributed, started = init_process_group_from_env(None, {"WORLD_SIZE": "1"})
    assert distributed.size == 1 and not started
    with pytest.raises(ValueError, match="slots_per_trial is 2 but this process is not one"):
        init_process_group_from_env(2, {})
    with pytest.raises(ValueError, match="WORLD_SIZE is 3 but resources.slots_per_trial is 2"):
        init_process_group_from_env(2, {"WORLD_SIZE": "3"})
    with pytest.raises(ValueError, match=r"\['MASTER_ADDR', 'MASTER_PORT'\] are not set"):
        init_process_group_from_env(2, {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        init_process_group_from_env(2, {"WORLD_SIZE": "two"})


def test_gradient_aggregation_syncs_once_per_step_and_full_dataset_runs_on_the_chief(tmp_path):
    (one,) = _train(tmp_path / "one", 1, passes=2, full_dataset=True)
    chief, worker = _train(tmp_path / "two", 2, passes=2, full_dataset=True)
    per_batch = [m["synced"] for _, _, batches in chief["training"] for m in batches]
    assert per_batch == [0.0, 1.0] * 10  # no_sync on the first pass of each step
    _assert_params(chief["params"], one["params"], exact=False)
    _assert_params(worker["params"], chief["params"], exact=True)
    # evaluate_full_dataset ran on the chief only; both ranks got its metrics.
    assert chief["evaluated"] == [0, 0] and worker["evaluated"] == []
    _assert_metrics_close(chief["validation"], one["validation"])


def test_a_plain_model_is_not_sharded_without_importing_fsdp_and_an_fsdp_one_is(tmp_path):
    # wrap_model asks is_sharded for every model of a multi-slot trial; importing FSDP
    # for the answer cost each rank 0.6-0.7 CPU-s at start-up. A fresh interpreter
    # shows whether it is imported.
    script = tmp_path / "sharded.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "from dauntless.pytorch._sharded import is_sharded\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 4))\n"
        "print(is_sharded(model), 'torch.distributed.fsdp' in sys.modules)\n"
        "dist.init_process_group('gloo', init_method=sys.argv[1], rank=0, world_size=1)\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "fully_shard(model[0])\n"
        "print(is_sharded(model), is_sharded(torch.nn.Linear(2, 2)))\n"
        "dist.destroy_process_group()\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), f"tcp://127.0.0.1:{_free_port()}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "True", "False"]
