"""Unpacking downloaded checkpoints (dauntless.client.extract_archive, issue 29 scope 5):
every entry Python's ``data`` filter refuses is skipped and reported, the rest is
written, and nothing lands outside the target."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from dauntless.client import extract_archive


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:

        def add(
            name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b""
        ) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data)
            tar.addfile(info, io.BytesIO(data))

        add("model.bin", data=b"weights")
        add("sub", tarfile.DIRTYPE)
        add("sub/notes.txt", data=b"hi")
        add("sub/alias", tarfile.SYMTYPE, "notes.txt")  # inside: kept
        add("passwd", tarfile.SYMTYPE, "/etc/passwd")
        add("sub/up", tarfile.SYMTYPE, "../../escaped")
        add("../escaped.txt", data=b"no")
        add("/tmp/absolute-escape.txt", data=b"no")
        add("hard", tarfile.LNKTYPE, "/etc/passwd")
        add("dev", tarfile.CHRTYPE)
    return buf.getvalue()


def test_unsafe_entries_are_skipped_and_reported(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    skipped = extract_archive(_archive(), dest)
    assert (dest / "model.bin").read_bytes() == b"weights"
    assert (dest / "sub" / "notes.txt").read_text() == "hi"
    assert (dest / "sub" / "alias").read_text() == "hi"
    names = [s.name for s in skipped]
    assert names == ["passwd", "sub/up", "../escaped.txt", "hard", "dev"]
    assert "absolute path" in str(skipped[0])
    assert not (dest / "passwd").is_symlink() and not (tmp_path / "escaped.txt").exists()
    # The data filter strips a leading "/" (the entry lands inside), as tar itself does.
    assert (dest / "tmp" / "absolute-escape.txt").read_bytes() == b"no"


def test_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(tarfile.TarError):
        extract_archive(b"not a tar", tmp_path / "x")
