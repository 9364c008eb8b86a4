"""The object-store managers against real servers (SeaweedFS, fake-gcs-server, Azurite)."""

from __future__ import annotations

import pytest
from object_stores import list_keys
from pydantic import TypeAdapter

from dauntless.config import CheckpointStorageConfig
from dauntless.storage import ObjectStorageManager, StoreError, build_storage


def manager(config: dict) -> ObjectStorageManager:
    storage = build_storage(TypeAdapter(CheckpointStorageConfig).validate_python(config))
    assert isinstance(storage, ObjectStorageManager)
    return storage


def test_store_restore_delete_roundtrip(store_server, tmp_path):
    cfg = store_server.storage(prefix="ckpts/run1")
    storage = manager(cfg)
    with storage.store_path("u1") as path:
        (path / "sub").mkdir()
        (path / "sub" / "w.bin").write_bytes(b"\x00\x01" * 5000)
        (path / "metadata.json").write_text("{}")
    key_prefix = "ckpts/run1/" if store_server.kind != "azure" else ""
    assert list_keys(store_server, cfg) == [
        f"{key_prefix}u1/metadata.json",
        f"{key_prefix}u1/sub/w.bin",
    ]
    assert storage.resources("u1") == {"metadata.json": 2, "sub/w.bin": 10000}
    with storage.restore_path("u1") as path:
        assert (path / "sub" / "w.bin").read_bytes() == b"\x00\x01" * 5000
    # the prefix API (TensorBoard files and the like)
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "events.out").write_bytes(b"e")
    assert storage.upload_prefix(tmp_path / "tb", "tensorboard/experiment/1") == {"events.out": 1}
    assert storage.list_prefix("tensorboard/experiment") == {"1/events.out": 1}
    storage.download_prefix("tensorboard", tmp_path / "down")
    assert (tmp_path / "down" / "experiment" / "1" / "events.out").read_bytes() == b"e"
    assert storage.delete("u1") is True
    assert storage.delete("u1") is False
    assert list_keys(store_server, cfg) == [f"{key_prefix}tensorboard/experiment/1/events.out"]
    with pytest.raises(FileNotFoundError, match="no checkpoint u1"):
        with storage.restore_path("u1"):
            pass


def test_failed_write_uploads_nothing(store_server):
    cfg = store_server.storage()
    storage = manager(cfg)
    with pytest.raises(ZeroDivisionError):
        with storage.store_path("u2") as path:
            (path / "a").write_text("x")
            raise ZeroDivisionError("user code failed")
    assert list_keys(store_server, cfg) == []


def test_missing_bucket_names_bucket_and_key(s3_server):
    cfg = s3_server.storage()
    cfg["bucket"] = "no-such-bucket-here"
    storage = manager(cfg)
    with pytest.raises(
        StoreError, match=r"s3://no-such-bucket-here/u3/a failed: .*(NoSuchBucket|AccessDenied)"
    ):
        with storage.store_path("u3") as path:
            (path / "a").write_text("x")


def test_unreachable_store_fails_after_bounded_retries(monkeypatch):
    from object_stores import free_port

    from dauntless.storage import _object

    monkeypatch.setattr(_object, "MAX_ATTEMPTS", 2)
    storage = manager(
        {
            "type": "s3",
            "bucket": "b",
            "endpoint_url": f"http://127.0.0.1:{free_port()}",
            "access_key": "a",
            "secret_key": "b",
        }
    )
    with pytest.raises(StoreError, match=r"upload s3://b/u4/a failed: .*Could not connect"):
        with storage.store_path("u4") as path:
            (path / "a").write_text("x")
