"""Checkpoint storage: atomic publication, resources, deletion, path rules, factory."""

from __future__ import annotations

import sys

import pytest

from dauntless.config import DirectoryStorage, S3Storage, SharedFSStorage
from dauntless.storage import (
    DirectoryStorageManager,
    SharedFSStorageManager,
    build_storage,
    check_storage_id,
)

UUID = "3f0c2b1e-1111-4222-8333-944455556666"


def test_checkpoint_is_visible_only_once_complete(tmp_path):
    manager = DirectoryStorageManager(tmp_path)
    with manager.store_path(UUID) as path:
        (path / "state-dict.pth").write_bytes(b"x" * 10)
        (path / "sub").mkdir()
        (path / "sub" / "a.txt").write_text("hello")
        assert path.parent == tmp_path and path.name.startswith(f"{UUID}.tmp-")
        assert not (tmp_path / UUID).exists()
        with pytest.raises(FileNotFoundError):
            manager.resources(UUID)
    assert sorted(p.name for p in tmp_path.iterdir()) == [UUID]
    assert manager.resources(UUID) == {"state-dict.pth": 10, "sub/a.txt": 5}
    with manager.restore_path(UUID) as path:
        assert (path / "sub" / "a.txt").read_text() == "hello"


def test_failed_write_leaves_nothing_behind(tmp_path):
    manager = DirectoryStorageManager(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        with manager.store_path(UUID) as path:
            (path / "partial").write_bytes(b"123")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError):
        with manager.restore_path(UUID):
            pass


def test_existing_uuid_is_not_overwritten(tmp_path):
    manager = DirectoryStorageManager(tmp_path)
    with manager.store_path(UUID) as path:
        (path / "f").write_text("1")
    with pytest.raises(FileExistsError):
        with manager.store_path(UUID):
            pass
    assert manager.resources(UUID) == {"f": 1}


def test_delete_removes_the_checkpoint_and_is_idempotent(tmp_path):
    manager = DirectoryStorageManager(tmp_path)
    with manager.store_path(UUID) as path:
        (path / "f").write_text("1")
    assert manager.delete(UUID) is True
    assert manager.delete(UUID) is False
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "..", f"{UUID}.tmp-abc", "-x"])
def test_ids_that_could_escape_the_directory_are_rejected(tmp_path, bad):
    with pytest.raises(ValueError, match="not a valid checkpoint id"):
        check_storage_id(bad)
    with pytest.raises(ValueError):
        DirectoryStorageManager(tmp_path).delete(bad)


def test_shared_fs_layout_is_host_path_storage_path_uuid(tmp_path):
    manager = SharedFSStorageManager(str(tmp_path), "ckpts/exp")
    assert manager.base_path == tmp_path / "ckpts" / "exp"
    with manager.store_path(UUID) as path:
        (path / "f").write_text("abc")
    assert (tmp_path / "ckpts" / "exp" / UUID / "f").read_text() == "abc"
    assert SharedFSStorageManager(str(tmp_path)).base_path == tmp_path
    assert (
        SharedFSStorageManager(str(tmp_path), str(tmp_path / "abs")).base_path == tmp_path / "abs"
    )


@pytest.mark.parametrize("storage_path", ["../elsewhere", "/definitely/not/under"])
def test_shared_fs_storage_path_must_stay_under_host_path(tmp_path, storage_path):
    with pytest.raises(ValueError, match="must lie under host_path"):
        SharedFSStorageManager(str(tmp_path), storage_path)


def test_relative_paths_are_rejected():
    with pytest.raises(ValueError, match="absolute"):
        SharedFSStorageManager("relative/dir")
    with pytest.raises(ValueError, match="absolute"):
        DirectoryStorageManager("relative/dir")


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if boto3 were not installed
    with pytest.raises(
        ImportError, match=r"needs the boto3 package.*pip install 'dauntless\[s3\]'"
    ):
        build_storage(S3Storage(type="s3", bucket="b"))


def test_build_storage_from_config(tmp_path):
    shared = build_storage(
        SharedFSStorage(type="shared_fs", host_path=str(tmp_path), storage_path="dc")
    )
    assert isinstance(shared, SharedFSStorageManager) and shared.base_path == tmp_path / "dc"
    directory = build_storage(DirectoryStorage(type="directory", container_path=str(tmp_path)))
    assert isinstance(directory, DirectoryStorageManager) and directory.base_path == tmp_path
    s3 = build_storage(S3Storage(type="s3", bucket="b", prefix="p/"))
    assert s3.url("u") == "s3://b/p/u"  # built without contacting any store
    with pytest.raises(TypeError, match="checkpoint storage config"):
        build_storage({"type": "shared_fs"})  # type: ignore[arg-type]
