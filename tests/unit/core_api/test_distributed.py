"""DistributedContext collectives over torch.distributed (gloo), with four processes."""

from __future__ import annotations

import json
import multiprocessing
import socket
import sys

import dist_worker
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP is tested on Linux")
def test_collectives_searcher_checkpoints_and_preemption_across_four_ranks(tmp_path):
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["torch", "torch._dynamo", "torch.distributed", "dauntless.pytorch", "dist_worker"]
    )
    port = _free_port()
    procs = [ctx.Process(target=dist_worker.run, args=(r, port, str(tmp_path))) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    for r, s in enumerate(seen):
        assert s["layout"] == [r, 4, r % 2, 2, r // 2, 2]
        assert s["allgather"] == [0, 10, 20, 30]
        assert s["gather"] == (["r0", "r1", "r2", "r3"] if r == 0 else None)
        assert s["broadcast"] == "from-chief"
        node = [0, 1] if r < 2 else [2, 3]
        assert s["allgather_local"] == node
        assert s["gather_local"] == (node if r % 2 == 0 else None)
        assert s["broadcast_local"] == f"local-chief-{node[0]}"
        assert s["operations"] == [2, 4]
        assert s["preempt"] is True
        assert s["ddp"] == ["DistributedDataParallel", "kept", 2]
    # One sharded checkpoint: the same id everywhere, every part, merged metadata.
    assert len({s["storage_id"] for s in seen}) == 1
    ((uuid, files, part3),) = seen[0]["reported"]
    assert uuid == seen[0]["storage_id"] and part3 == 3
    assert files == ["metadata.json", "part0.txt", "part1.txt", "part2.txt", "part3.txt"]
    assert all(s["reported"] == [] for s in seen[1:])
    meta = json.loads((tmp_path / "ckpt" / uuid / "metadata.json").read_text())
    assert {meta[f"part{r}"] for r in range(4)} == {0, 1, 2, 3}
