"""Context packing: built-in ignores, .detignore (gitignore rules), archive, size limit."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from dauntless.client import (
    MAX_CONTEXT_BYTES,
    ContextError,
    ContextTooLargeError,
    build_context_tarball,
    list_context_entries,
    list_context_files,
)


def _write(root: Path, rel: str, data: bytes | str = "x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def _members(blob: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_builtin_ignores(tmp_path: Path) -> None:
    for rel in [
        "model_def.py",
        "sub/util.py",
        "__pycache__/model_def.cpython-311.pyc",
        "sub/__pycache__/util.cpython-311.pyc",
        "stale.pyc",
        "sub/stale.pyo",
        "Foo$py.class",
        "terraform.tfstate",
        "sub/terraform-plan",
        ".git/config",
        ".vscode/settings.json",
        ".idea/workspace.xml",
        ".mypy_cache/3.11/x.json",
        "shared_fs/ckpt.bin",
        "sub/shared_fs/kept.txt",
    ]:
        _write(tmp_path, rel)
    assert list_context_files(tmp_path) == [
        "model_def.py",
        "sub/shared_fs/kept.txt",  # /shared_fs is anchored at the top
        "sub/util.py",
    ]


def test_detignore_patterns_negation_and_directories(tmp_path: Path) -> None:
    _write(
        tmp_path,
        ".detignore",
        "# comment line\n"
        "\n"
        "*.log\n"
        "!keep.log\n"
        "data/\n"
        "!data/inside.txt\n"
        "build/*\n"
        "!build/keep.txt\n"
        "/rootonly.txt\n"
        "!terraform_helpers.py\n",
    )
    for rel in [
        "train.py",
        "a.log",
        "nested/b.log",
        "keep.log",
        "data/big.bin",
        "data/inside.txt",
        "sub/data/deep.bin",
        "build/out.o",
        "build/keep.txt",
        "rootonly.txt",
        "sub/rootonly.txt",
        "terraform_helpers.py",
    ]:
        _write(tmp_path, rel)
    files = list_context_files(tmp_path)
    assert files == [
        ".detignore",
        "build/keep.txt",  # build/* leaves the directory, so the negation re-includes
        "keep.log",
        "sub/rootonly.txt",
        "terraform_helpers.py",  # a .detignore negation overrides a built-in
        "train.py",
    ]
    # As in git: a file inside an excluded directory cannot be re-included.
    assert "data/inside.txt" not in files
    entries = {e.relpath: e.kind for e in list_context_entries(tmp_path)}
    assert "data" not in entries and "sub/data" not in entries
    assert entries["build"] == "dir"


def test_tarball_holds_files_with_relative_names_and_contents(tmp_path: Path) -> None:
    _write(tmp_path, "model_def.py", "print('hi')\n")
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/data.bin", bytes(range(256)))
    (tmp_path / "empty_dir").mkdir()
    _write(tmp_path, "__pycache__/x.pyc")
    os.chmod(tmp_path / "model_def.py", 0o755)
    blob = build_context_tarball(tmp_path)
    members = _members(blob)
    assert sorted(members) == [
        "empty_dir",
        "model_def.py",
        "pkg",
        "pkg/__init__.py",
        "pkg/data.bin",
    ]
    assert members["empty_dir"].isdir()
    assert members["model_def.py"].mode & 0o777 == 0o755
    assert all(m.uid == 0 and m.uname == "" for m in members.values())
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        assert tar.extractfile("pkg/data.bin").read() == bytes(range(256))  # type: ignore[union-attr]
        assert tar.extractfile("model_def.py").read() == b"print('hi')\n"  # type: ignore[union-attr]


def test_symlinks_are_kept_as_links_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _write(outside, "secret.txt", "s")
    ctx = tmp_path / "ctx"
    _write(ctx, "train.py")
    os.symlink(outside, ctx / "linked_dir")
    os.symlink("train.py", ctx / "alias.py")
    entries = {e.relpath: e.kind for e in list_context_entries(ctx)}
    assert entries == {"alias.py": "symlink", "linked_dir": "symlink", "train.py": "file"}
    members = _members(build_context_tarball(ctx))
    assert members["alias.py"].issym() and members["alias.py"].linkname == "train.py"
    assert "linked_dir/secret.txt" not in members


def test_missing_or_non_directory_context(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="does not exist"):
        build_context_tarball(tmp_path / "nope")
    f = _write(tmp_path, "file.txt")
    with pytest.raises(ContextError, match="not a directory"):
        build_context_tarball(f)
    with pytest.raises(TypeError, match="path"):
        build_context_tarball(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit_bytes"):
        build_context_tarball(tmp_path, limit_bytes=0)


def test_over_95_mib_fails_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "train.py")
    big = tmp_path / "dataset.bin"
    big.touch()
    os.truncate(big, 96 * 1024 * 1024)  # sparse: no disk use, no time
    opened: list[str] = []
    monkeypatch.setattr(tarfile, "open", lambda *a, **k: opened.append("tar") or None)
    with pytest.raises(ContextTooLargeError) as info:
        build_context_tarball(tmp_path)
    err = info.value
    assert opened == []  # nothing was packed
    assert err.limit == MAX_CONTEXT_BYTES == 95 * 1024 * 1024
    assert err.size == 96 * 1024 * 1024 + 1 and err.what == "files"
    assert "96.0 MiB" in str(err) and "95.0 MiB" in str(err) and str(tmp_path) in str(err)


def test_ignored_big_file_does_not_count(tmp_path: Path) -> None:
    _write(tmp_path, "train.py")
    _write(tmp_path, ".detignore", "*.bin\n")
    big = tmp_path / "dataset.bin"
    big.touch()
    os.truncate(big, 200 * 1024 * 1024)
    assert "train.py" in _members(build_context_tarball(tmp_path))


def test_compressed_size_is_checked_too(tmp_path: Path) -> None:
    _write(tmp_path, "noise.bin", os.urandom(1500))  # random bytes do not compress
    with pytest.raises(ContextTooLargeError) as info:
        build_context_tarball(tmp_path, limit_bytes=1600)
    assert info.value.what == "compressed" and info.value.size > 1600
    with pytest.raises(ContextTooLargeError) as info:
        build_context_tarball(tmp_path, limit_bytes=1000)
    assert info.value.what == "files" and info.value.size == 1500
