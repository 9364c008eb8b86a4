"""One rank of the sharded object-store checkpoint test (run by test_sharded_upload.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist

from dauntless.core import CheckpointContext, DistributedContext, LocalBackend
from dauntless.storage import S3StorageManager


def run(rank: int, port: int, endpoint: str, bucket: str, out: str) -> None:
    """Rank ``rank`` of 2 writes ``part<rank>.txt`` into one sharded checkpoint."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        d = DistributedContext.from_torch_distributed()
        backend = LocalBackend([1])
        storage = S3StorageManager(bucket, "sharded", "any", "any", endpoint_url=endpoint)
        ctx = CheckpointContext(storage, backend, 1, "alloc", distributed=d)
        meta = {"steps_completed": 3, f"part{rank}": rank}
        with ctx.store_path(meta, shard=True) as (path, storage_id):
            (path / f"part{rank}.txt").write_text(str(rank))
        reported = [
            (c.uuid, sorted(c.resources), c.metadata.get("part1")) for c in backend.checkpoints
        ]
        Path(out, f"rank{rank}.json").write_text(json.dumps([storage_id, reported]))
    finally:
        dist.destroy_process_group()
