"""One rank of the multi-process Core API test (run by test_distributed.py; not a test).

Four ranks on "two machines" of two processes each, over torch.distributed's gloo
backend. Each rank writes what it saw to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from dauntless.core import (
    Context,
    DistributedContext,
    LocalBackend,
    PreemptMode,
    TrialInfo,
)
from dauntless.storage import DirectoryStorageManager

SIZE, LOCAL_SIZE = 4, 2


def run(rank: int, port: int, out: str) -> None:
    """Run rank ``rank``; rendezvous on 127.0.0.1:``port``."""
    os.environ.update(
        {
            "LOCAL_WORLD_SIZE": str(LOCAL_SIZE),
            "LOCAL_RANK": str(rank % LOCAL_SIZE),
            "GROUP_RANK": str(rank // LOCAL_SIZE),
        }
    )
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=SIZE
    )
    try:
        seen = _exercise(rank, Path(out))
    finally:
        dist.destroy_process_group()
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(seen))


def _exercise(rank: int, out: Path) -> dict:
    d = DistributedContext.from_torch_distributed()
    seen: dict = {
        "layout": [d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size],
        "allgather": d.allgather(rank * 10),
        "gather": d.gather(f"r{rank}"),
        "broadcast": d.broadcast("from-chief" if d.is_chief else None),
        "allgather_local": d.allgather_local(rank),
        "gather_local": d.gather_local(rank),
        "broadcast_local": d.broadcast_local(f"local-chief-{rank}"),
    }
    info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={})
    backend = LocalBackend([2, 4])
    ctx = Context(
        info,
        backend=backend,
        storage=DirectoryStorageManager(out / "ckpt"),
        distributed=d,
        preempt_mode=PreemptMode.WorkersAskChief,
    )
    # The chief asks the searcher and broadcasts each operation.
    lengths = []
    for op in ctx.searcher.operations():
        lengths.append(op.length)
        if d.is_chief:
            op.report_completed(0.0)
    seen["operations"] = lengths
    # A sharded checkpoint: every rank writes its part; the chief reports it once.
    with ctx.checkpoint.store_path({"steps_completed": 4, f"part{rank}": rank}, shard=True) as (
        path,
        storage_id,
    ):
        (path / f"part{rank}.txt").write_text(str(rank))
    seen["storage_id"] = storage_id
    seen["reported"] = [
        (c.uuid, sorted(c.resources), c.metadata.get("part3")) for c in backend.checkpoints
    ]
    # The chief's preemption answer reaches every rank.
    if d.is_chief:
        backend.request_preemption()
    seen["preempt"] = ctx.preempt.should_preempt()
    # A model wrapped for several processes is a DDP that answers for the model.
    from dauntless.pytorch import PyTorchTrialContext

    config = {
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "hyperparameters": {"global_batch_size": 8},
    }
    pctx = PyTorchTrialContext(
        TrialInfo(
            trial_id=1,
            experiment_id=1,
            trial_seed=0,
            hparams={"global_batch_size": 8},
            config=config,
        ),
        distributed=d,
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    model.marker = "kept"
    wrapped = pctx.wrap_model(model)
    seen["ddp"] = [
        type(wrapped).__mro__[1].__name__,
        wrapped.marker,
        pctx.get_per_slot_batch_size(),
    ]
    d.close()
    return seen
