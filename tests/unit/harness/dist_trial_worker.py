"""One rank of the multi-process PyTorchTrial tests (run by test_harness_distributed.py;
not a test module).

:func:`run` trains :class:`DistToy` (deterministic: no dropout) with the real
``_TrialController`` over a gloo process group of ``size`` ranks on 127.0.0.1 (or alone
with ``size`` 1, without a process group), against an in-memory ``LocalBackend``, and
writes what the rank saw to ``<out>/rank<r>.pt``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from harness_toy_trial import make_dataset, toy_config, toy_info
from torch import nn

from dauntless.core import Context, DistributedContext, LocalBackend
from dauntless.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext
from dauntless.pytorch._checkpoint import unwrap
from dauntless.pytorch._controller import _TrialController
from dauntless.pytorch._state import seed_all
from dauntless.storage import DirectoryStorageManager


class DistToy(PyTorchTrial):
    """Linear regression on 64 records, shuffled; reports whether DDP synchronized."""

    passes = 1
    with_reducer = True
    full_dataset = False
    stop_at: tuple[int, int] | None = None  # (rank, batch): that rank requests a stop
    preempt_at: int | None = None  # after this batch the chief's master asks to preempt
    evaluated: list[int] = []

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(4, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=0.05),
            backward_passes_per_step=self.passes,
        )
        # A training reducer makes a stop report its period early (its state is not
        # checkpointed), so the resume tests go without it.
        self.records = context.wrap_reducer(sum, name="records") if self.with_reducer else None

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            make_dataset(0), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(make_dataset(1), batch_size=6)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        synced = float(getattr(self.model, "require_backward_grad_sync", True))
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        if self.records is not None:
            self.records.update(len(x))
        if self.stop_at == (self.context.distributed.rank, batch_idx + 1):
            self.context.set_stop_requested(True)
        core = self.context._core
        if self.preempt_at == batch_idx + 1 and core is not None and core.distributed.is_chief:
            core.backend.request_preemption()  # type: ignore[attr-defined]
        return {"loss": loss, "synced": synced}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        if self.records is not None:
            self.records.update(len(x))
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y).item()}


class FullDatasetToy(DistToy):
    evaluate_batch = PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        DistToy.evaluated.append(self.context.distributed.rank)
        total, n = 0.0, 0
        for x, y in data_loader:
            total += nn.functional.mse_loss(self.model(x), y, reduction="sum").item()
            n += len(x)
        return {"validation_loss": total / n}


def run(rank: int, size: int, port: int, out: str, options: dict[str, Any]) -> None:
    """Train rank ``rank`` of ``size``; ``options``: ``lengths`` (searcher operations),
    ``latest`` (checkpoint uuid or None), ``passes``, ``full_dataset``, ``stop_at``,
    ``preempt_at``, ``reducer`` (wrap a custom training/validation reducer, default
    True)."""
    torch.set_num_threads(1)
    DistToy.passes = options.get("passes", 1)
    DistToy.stop_at = options.get("stop_at")
    DistToy.preempt_at = options.get("preempt_at")
    DistToy.with_reducer = options.get("reducer", True)
    if size > 1:
        os.environ.update({"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(size)})
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
        )
        distributed = DistributedContext.from_torch_distributed()
    else:
        distributed = DistributedContext()
    try:
        seen = _train(distributed, Path(out), options)
    finally:
        if size > 1:
            dist.destroy_process_group()
    torch.save(seen, Path(out) / f"rank{rank}.pt")


def _train(distributed: DistributedContext, out: Path, options: dict[str, Any]) -> dict:
    config = toy_config(str(out / "ckpt"))
    info = toy_info(config)
    seed_all(info.trial_seed)
    backend = LocalBackend(options.get("lengths", [10, 20]), searcher_metric="validation_loss")
    core = Context(
        info,
        backend=backend,
        storage=DirectoryStorageManager(out / "ckpt"),
        distributed=distributed,
    )
    with core:
        context = PyTorchTrialContext(info, core=core)
        cls = FullDatasetToy if options.get("full_dataset") else DistToy
        trial = cls(context)
        controller = _TrialController(
            trial, context, core, latest_checkpoint=options.get("latest"), code_dir=out / "code"
        )
        result = controller.run()
    return {
        "result": result.value,
        "training": [
            (r.steps_completed, r.metrics, r.batch_metrics) for r in backend.metrics("training")
        ],
        "validation": [(r.steps_completed, r.metrics) for r in backend.metrics("validation")],
        "checkpoints": [c.uuid for c in backend.checkpoints],
        "checkpoint_batches": [c.steps_completed for c in backend.checkpoints],
        "completed": list(backend.completed_operations),
        "evaluated": list(DistToy.evaluated),
        "params": {k: v.clone() for k, v in unwrap(trial.model).state_dict().items()},
        "epoch_len": controller._epoch_len,
        "batches": controller.batches_trained,
    }


def join_from_env(rank: int, size: int, port: int, out: str, options: dict[str, Any]) -> None:
    """Join a process group the way the harness does (from launcher variables), record
    the layout and one ``any_rank`` answer, train a DDP model one step and end the group
    with the model still referenced (as the trial holds it)."""
    from dauntless.pytorch._distributed import (
        AnyRankVote,
        any_rank,
        destroy_process_group,
        init_process_group_from_env,
    )

    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_WORLD_SIZE": str(size),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    os.environ.update(env)
    distributed, started = init_process_group_from_env(size, env)
    model = None
    try:
        seen = {
            "layout": [distributed.rank, distributed.size, distributed.local_size],
            "started": started,
            "backend": dist.get_backend(),
            "any": [any_rank(rank == size - 1, distributed), any_rank(False, distributed)],
        }
        # The asynchronous vote: the last rank alone votes True in the second; every
        # rank reads the same answers, with another collective issued while one is open.
        vote, answers = AnyRankVote(distributed), []
        for i in range(3):
            vote.start(rank == size - 1 and i == 1)
            any_rank(False, distributed)
            answers.append(vote.finish())
        seen["votes"] = [*answers, vote.finish(), vote.in_flight]
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.full((3, 4), float(rank))).sum().backward()
        seen["grad_averaged"] = model.module.weight.grad[0].tolist()
    finally:
        destroy_process_group(distributed, started, [model] if model is not None else [])
    seen["initialized_after"] = dist.is_initialized()
    seen["ddp_released"] = [model.reducer, model.logger, model.process_group] == [None] * 3
    torch.save(seen, Path(out) / f"rank{rank}.pt")
