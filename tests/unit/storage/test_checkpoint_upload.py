"""Core API checkpoints in an object store: background upload, its errors, a full disk."""

from __future__ import annotations

import contextlib
import subprocess
import time
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


class _AllReports(LocalBackend):
    """A LocalBackend that keeps every checkpoint report (UPLOADING ones too)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.reports: list = []

    def report_checkpoint(self, report) -> None:
        self.reports.append(report)
        super().report_checkpoint(report)


def test_background_file_system_checkpoint_publishes_on_the_thread(tmp_path):
    """shared_fs with background=True: the block returns once the files are written,
    reported UPLOADING; the flush and rename run on the upload thread, then COMPLETED
    (issue 37: the flush was half of a checkpoint's cost to the training loop)."""
    backend = _AllReports([1])
    storage = SharedFSStorageManager(str(tmp_path), "ckpts")
    ctx = CheckpointContext(storage, backend, 1, "alloc")
    state = {"w": torch.arange(4096, dtype=torch.float32)}
    with ctx.store_path({"steps_completed": 3}, background=True) as (path, uuid):
        assert path.parent == storage.base_path  # beside its final place: a rename, no copy
        torch.save(state, path / "state.pth")
    first = backend.reports[0]
    assert (first.uuid, first.state) == (uuid, "UPLOADING")
    assert set(first.resources) == {"metadata.json", "state.pth"}
    ctx.wait_for_uploads()
    assert [(c.uuid, c.state) for c in backend.reports] == [
        (uuid, "UPLOADING"),
        (uuid, "COMPLETED"),
    ]
    assert backend.reports[1].resources == storage.resources(uuid)
    assert sorted(p.name for p in storage.base_path.iterdir()) == [uuid]  # no staging left
    with ctx.restore_path(uuid) as path:
        assert torch.equal(torch.load(path / "state.pth")["w"], state["w"])


def test_failed_background_file_system_publish_is_raised_and_leaves_nothing(tmp_path):
    backend = _AllReports([1])
    storage = SharedFSStorageManager(str(tmp_path), "ckpts")
    ctx = CheckpointContext(storage, backend, 1, "alloc")
    with ctx.store_path({"steps_completed": 1}, background=True) as (path, uuid):
        (path / "w.bin").write_bytes(b"x" * 1000)
        # The checkpoint's name is taken before it is published: the rename must fail.
        (storage.base_path / uuid / "other").mkdir(parents=True)
    with pytest.raises(OSError):
        ctx.wait_for_uploads()
    assert [c.state for c in backend.reports] == ["UPLOADING"]
    assert sorted(p.name for p in storage.base_path.iterdir()) == [uuid]  # the squatter only
    ctx.wait_for_uploads()  # the error is raised once


def test_deleting_a_checkpoint_removes_what_a_dead_writer_left_staged(tmp_path):
    """A trial killed during a background flush leaves ``<uuid>.tmp-*`` and an orphan
    UPLOADING row; GC's delete of that row removes the staged files too."""
    storage = SharedFSStorageManager(str(tmp_path), "ckpts")
    uuid = str(uuidlib.uuid4())
    staged = storage.open_staging(uuid)
    (staged / "state.pth").write_bytes(b"x" * 100)
    other = str(uuidlib.uuid4())
    kept = storage.open_staging(other)  # another checkpoint's: untouched
    assert storage.delete(uuid) is True
    assert sorted(p.name for p in storage.base_path.iterdir()) == [kept.name]
    assert storage.delete(uuid) is False, "nothing left to delete"


def _wait_for(check, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_each_file_goes_up_when_closed_and_the_end_reconciles(s3_server):
    """Issue 37: a file closed inside the block is in the store before the block ends
    (UPLOADING reported first); a file written again after its upload, one removed and
    one renamed are what the directory holds at the end; metadata.json goes up last."""
    cfg = s3_server.storage(prefix="stream")
    backend = _AllReports([1])
    ctx = CheckpointContext(_s3(s3_server, cfg), backend, 1, "alloc")
    with ctx.store_path({"steps_completed": 5}, background=True) as (path, uuid):
        (path / "first.bin").write_bytes(b"a" * 5000)
        key = f"stream/{uuid}/first.bin"
        _wait_for(lambda: key in list_keys(s3_server, cfg), "first.bin in the store")
        assert [(c.uuid, c.state, c.resources) for c in backend.reports] == [
            (uuid, "UPLOADING", {})
        ]
        assert f"stream/{uuid}/metadata.json" not in list_keys(s3_server, cfg)
        (path / "gone.bin").write_bytes(b"g" * 10)
        (path / "old-name.bin").write_bytes(b"r" * 20)
        _wait_for(
            lambda: (
                {f"stream/{uuid}/gone.bin", f"stream/{uuid}/old-name.bin"}
                <= set(list_keys(s3_server, cfg))
            ),
            "gone.bin and old-name.bin in the store",
        )
        (path / "first.bin").write_bytes(b"b" * 7000)  # written again after its upload
        (path / "gone.bin").unlink()
        (path / "old-name.bin").rename(path / "new-name.bin")
        (path / "sub").mkdir()
        (path / "sub" / "inner.bin").write_bytes(b"i" * 30)
    ctx.wait_for_uploads()
    assert [c.state for c in backend.reports] == ["UPLOADING", "COMPLETED"]
    files = {"first.bin": 7000, "new-name.bin": 20, "sub/inner.bin": 30}
    done = backend.reports[1].resources
    assert {k: v for k, v in done.items() if k != "metadata.json"} == files
    assert list_keys(s3_server, cfg) == sorted(
        f"stream/{uuid}/{name}" for name in [*files, "metadata.json"]
    )
    with ctx.restore_path(uuid) as back:
        assert (back / "first.bin").read_bytes() == b"b" * 7000
        assert (back / "sub" / "inner.bin").read_bytes() == b"i" * 30


def test_a_failed_block_leaves_nothing_of_what_was_streamed(s3_server):
    cfg = s3_server.storage(prefix="failed")
    backend = _AllReports([1])
    ctx = CheckpointContext(_s3(s3_server, cfg), backend, 1, "alloc")
    with pytest.raises(ZeroDivisionError):
        with ctx.store_path({"steps_completed": 1}, background=True) as (path, uuid):
            (path / "part.bin").write_bytes(b"p" * 3000)
            _wait_for(lambda: list_keys(s3_server, cfg), "part.bin in the store")
            1 / 0  # noqa: B018
    ctx.wait_for_uploads()  # the writer's error was raised; the upload raises none
    assert list_keys(s3_server, cfg) == []
    assert [c.state for c in backend.reports] == ["UPLOADING"]  # GC collects the orphan
    assert backend.checkpoints == []


def test_synchronous_store_waits_for_the_upload(s3_server):
    cfg = s3_server.storage()
    backend = LocalBackend([1])
    ctx = CheckpointContext(_s3(s3_server, cfg), backend, 1, "alloc")
    with ctx.store_path({"steps_completed": 2}) as (path, uuid):
        (path / "w.bin").write_bytes(b"w" * 100)
    (report,) = backend.checkpoints
    assert (report.uuid, report.resources["w.bin"]) == (uuid, 100)
    assert not ctx.upload_in_flight


def test_without_inotify_every_file_goes_up_at_the_end(s3_server, monkeypatch):
    """Where inotify cannot be used (not Linux, inotify_simple missing) nothing goes up
    before the block ends, and all of it after."""
    from dauntless.storage import _stream

    monkeypatch.setattr(_stream, "_open_inotify", lambda: None)
    cfg = s3_server.storage()
    backend = LocalBackend([1])
    ctx = CheckpointContext(_s3(s3_server, cfg), backend, 1, "alloc")
    with ctx.store_path({"steps_completed": 3}, background=True) as (path, uuid):
        (path / "a.bin").write_bytes(b"a" * 100)
        time.sleep(0.5)
        assert list_keys(s3_server, cfg) == []
    ctx.wait_for_uploads()
    assert list_keys(s3_server, cfg) == [f"{uuid}/a.bin", f"{uuid}/metadata.json"]
    assert backend.checkpoints[0].resources["a.bin"] == 100
