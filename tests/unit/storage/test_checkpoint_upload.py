"""Core API checkpoints in an object store: background upload, its errors, a full disk."""

from __future__ import annotations

import contextlib
import subprocess
import uuid as uuidlib

import pytest
import torch
from object_stores import list_keys

from dauntless.core import CheckpointContext, LocalBackend
from dauntless.storage import S3StorageManager, SharedFSStorageManager, StoreError


def _s3(server, cfg) -> S3StorageManager:
    return S3StorageManager(
        cfg["bucket"], cfg.get("prefix"), "any", "any", endpoint_url=server.endpoint
    )


def test_background_upload_reports_when_stored_and_restores_bit_identical(s3_server):
    cfg = s3_server.storage(prefix="bg")
    backend = LocalBackend([1])
    ctx = CheckpointContext(_s3(s3_server, cfg), backend, 1, "alloc")
    torch.manual_seed(0)
    state = {"w": torch.randn(256, 256), "step": 7, "rng": torch.get_rng_state()}
    with ctx.store_path({"steps_completed": 7}, background=True) as (path, uuid):
        torch.save(state, path / "state.pth")
    # Reported only once uploaded; the upload may still be running now.
    assert [c.uuid for c in backend.checkpoints] in ([], [uuid])
    ctx.wait_for_uploads()
    (report,) = backend.checkpoints
    assert report.uuid == uuid and report.state == "COMPLETED"
    assert set(report.resources) == {"metadata.json", "state.pth"}
    assert list_keys(s3_server, cfg) == [f"bg/{uuid}/metadata.json", f"bg/{uuid}/state.pth"]
    with ctx.restore_path(uuid) as path:
        back = torch.load(path / "state.pth", weights_only=False)
    assert torch.equal(back["w"], state["w"]) and torch.equal(back["rng"], state["rng"])
    assert (path / "state.pth").exists() is False  # the download is removed after the block


def test_failed_background_upload_is_raised_and_leaves_nothing(s3_server):
    cfg = s3_server.storage()
    storage = _s3(s3_server, cfg)
    storage.bucket = f"missing-{uuidlib.uuid4().hex[:8]}"
    backend = LocalBackend([1])
    ctx = CheckpointContext(storage, backend, 1, "alloc")
    with ctx.store_path({"steps_completed": 1}, background=True) as (path, _uuid):
        (path / "w.bin").write_bytes(b"x" * 1000)
    with pytest.raises(StoreError, match=rf"upload s3://{storage.bucket}/"):
        ctx.wait_for_uploads()
    assert backend.checkpoints == []
    ctx.wait_for_uploads()  # the error is raised once


@contextlib.contextmanager
def _tiny_tmpfs(path):
    path.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_disk_says_no_space_left_at_path(tmp_path):
    with _tiny_tmpfs(tmp_path / "disk") as disk:
        ctx = CheckpointContext(SharedFSStorageManager(str(disk)), LocalBackend([1]), 1, "a")
        with pytest.raises(OSError, match=rf"no space left on device at {disk}/") as info:
            with ctx.store_path({"steps_completed": 1}) as (path, _):
                torch.save({"w": torch.zeros(1 << 20)}, path / "state.pth")  # 4 MiB
        assert "PytorchStreamWriter" not in str(info.value)
        assert list(disk.iterdir()) == []  # nothing half-written is left
