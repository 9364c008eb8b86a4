"""A sharded checkpoint in an object store: every rank uploads its part, the chief
uploads the merged metadata.json last and reports once."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest
from object_stores import free_port, list_keys

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shard_worker  # noqa: E402


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP is tested on Linux")
def test_two_ranks_upload_one_sharded_checkpoint(s3_server, tmp_path):
    cfg = s3_server.storage()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "dauntless.core", "shard_worker"])
    port = free_port()
    procs = [
        ctx.Process(
            target=shard_worker.run,
            args=(r, port, s3_server.endpoint, cfg["bucket"], str(tmp_path)),
        )
        for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    (sid0, reported0), (sid1, reported1) = (
        json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)
    )
    assert sid0 == sid1
    assert reported0 == [[sid0, ["metadata.json", "part0.txt", "part1.txt"], 1]]
    assert reported1 == []  # only the chief reports
    assert list_keys(s3_server, cfg) == [
        f"sharded/{sid0}/metadata.json",
        f"sharded/{sid0}/part0.txt",
        f"sharded/{sid0}/part1.txt",
    ]
