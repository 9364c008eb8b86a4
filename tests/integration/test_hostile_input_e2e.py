"""Hostile input is bounded (issue 29 scope 5), against one real master process (and the
real `det` CLI), shared by the module's tests:

* a YAML alias bomb and YAML nested 1,000 deep answer 400 naming the field on every
  route that parses a config (create, validate_only, preview, a task), each in under a
  second, with the master's resident memory growing by less than 50 MB in all (read from
  /proc); an integer of 10**30 is refused naming its field; the CLI says so without a
  traceback;
* context archives with ``..``, absolute paths, links leaving the directory, device
  files or FIFOs answer 400 at create (and at validate_only, and for tasks), naming the
  entry; an oversize one 413;
* a grid of 10**12 points is refused at create and validate_only, as preview refuses it;
* a proxy WebSocket without credentials answers 401;
* a checkpoint holding an absolute symlink downloads its regular files with
  `det checkpoint download`, which reports the link and writes nothing outside.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import websockets

from .conftest import Cluster

pytestmark = pytest.mark.integration

CONFIG = """
name: hostile
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 1}}
"""


@pytest.fixture(scope="module")
def cluster(module_cluster_factory, tmp_path_factory) -> Cluster:
    tmp = tmp_path_factory.mktemp("hostile-db")
    c = module_cluster_factory(f"sqlite:///{tmp}/master.db")
    c.start_master()
    return c


def alias_bomb() -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * 9)}]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    body = "\n".join("      " + line for line in lines)
    return CONFIG + f"hyperparameters:\n  x:\n    type: const\n    val:\n{body}\n"


def deep_nesting() -> str:
    return CONFIG + f"hyperparameters:\n  x:\n    type: const\n    val: {'[' * 1000}{']' * 1000}\n"


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def tarball(add: Callable[[tarfile.TarFile], None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        add(tar)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Callable:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = link
        data = b"x" if kind == tarfile.REGTYPE else b""
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return add


def create(c: Cluster, config: str, context: bytes | None = None, **form: str) -> httpx.Response:
    files = {"context": ("c.tar.gz", context, "application/gzip")} if context else None
    return httpx.post(
        c.url + "/api/v1/experiments",
        data={"config": config, **form},
        files=files,
        headers=c.headers(),
        timeout=120,
    )


def test_yaml_bombs_answer_400_at_once_with_little_memory(cluster: Cluster, tmp_path) -> None:
    c = cluster
    assert c.master is not None
    c.headers()  # sign in first: the argon2 check is not part of what is measured
    before = rss_bytes(c.master.pid)
    for name, text in (("alias bomb", alias_bomb()), ("1,000 deep", deep_nesting())):
        attempts = {
            "create": lambda t=text: create(c, t),
            "validate_only": lambda t=text: create(c, t, validate_only="true"),
            "preview": lambda t=text: httpx.post(
                c.url + "/api/v1/preview-hp-search",
                json={"config": t},
                headers=c.headers(),
                timeout=60,
            ),
            "notebook": lambda t=text: httpx.post(
                c.url + "/api/v1/notebooks", data={"config": t}, headers=c.headers(), timeout=60
            ),
        }
        for route, send in attempts.items():
            start = time.monotonic()
            r = send()
            elapsed = time.monotonic() - start
            assert r.status_code == 400, (name, route, r.text)
            fields = [e["field"] for e in r.json()["errors"]]
            assert fields[0].startswith("hyperparameters.x.val"), (name, route, fields)
            assert elapsed < 1.0, f"{name} on {route} took {elapsed:.2f} s"
    grown = rss_bytes(c.master.pid) - before
    assert grown < 50 * 2**20, f"the master's RSS grew by {grown / 2**20:.1f} MB"
    # An integer the field cannot hold.
    r = create(c, CONFIG + "max_restarts: 1000000000000000000000000000000\n")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "max_restarts"
    # The CLI names the field, with no traceback.
    path = tmp_path / "deep.yaml"
    path.write_text(deep_nesting())
    proc = c.det("experiment", "create", str(path), str(tmp_path), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hyperparameters.x.val" in proc.stderr and "nested deeper" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "bad, entry",
    [
        (member("../evil.py"), "../evil.py"),
        (member("/etc/cron.d/evil"), "/etc/cron.d/evil"),
        (member("passwd", tarfile.SYMTYPE, "/etc/passwd"), "passwd"),
        (member("sub/up", tarfile.SYMTYPE, "../../outside"), "sub/up"),
        (member("hard", tarfile.LNKTYPE, "/etc/passwd"), "hard"),
        (member("dev", tarfile.CHRTYPE), "dev"),
        (member("pipe", tarfile.FIFOTYPE), "pipe"),
    ],
    ids=["dotdot", "absolute", "abs-symlink", "escaping-symlink", "hardlink", "device", "fifo"],
)
def test_unsafe_context_is_refused_at_create(cluster: Cluster, bad: Callable, entry: str) -> None:
    context = tarball(bad)
    for form in ({}, {"validate_only": "true"}):
        r = create(cluster, CONFIG, context, **form)
        assert r.status_code == 400, (form, r.text)
        assert r.json()["errors"][0]["field"] == "context"
        assert repr(entry) in r.json()["errors"][0]["message"], r.text
    r = httpx.post(
        cluster.url + "/api/v1/commands",
        data={"entrypoint": '["true"]'},
        files={"context": ("c.tar.gz", context, "application/gzip")},
        headers=cluster.headers(),
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "context", r.text


def test_oversize_and_not_a_tarball_and_a_safe_link(cluster: Cluster) -> None:
    """(Tasks read their context with the same function, context_archive.read_upload.)"""
    c = cluster
    huge = b"\0" * (95 * 2**20 + 1)
    r = create(c, CONFIG, huge)
    assert r.status_code == 413 and r.json()["errors"][0]["field"] == "context", r.text
    r = create(c, CONFIG, b"not a tarball at all")
    assert r.status_code == 400 and "tar archive" in r.json()["detail"]
    # A link that stays inside the directory is fine.
    ok = tarball(member("lib/alias.py", tarfile.SYMTYPE, "../train.py"))
    r = create(c, CONFIG, ok, validate_only="true")
    assert r.status_code == 201, r.text


def test_search_size_limit_at_create_and_validate_only(cluster: Cluster) -> None:
    grid = (
        CONFIG.replace("name: single", "name: grid")
        + "hyperparameters:\n"
        + "".join(f"  h{i}: {{type: int, minval: 0, maxval: 9, count: 10}}\n" for i in range(12))
    )
    for form in ({}, {"validate_only": "true"}):
        start = time.monotonic()
        r = create(cluster, grid, **form)
        assert r.status_code == 400, r.text
        (error,) = r.json()["errors"]
        assert error["field"] == "hyperparameters"
        assert "1000000000000 trials" in error["message"] and "100000" in error["message"]
        assert time.monotonic() - start < 5
    r = httpx.post(
        cluster.url + "/api/v1/preview-hp-search",
        json={"config": grid},
        headers=cluster.headers(),
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "hyperparameters"
    long = CONFIG.replace("batches: 1}", "batches: 100000000000000}")
    r = create(cluster, long)
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "searcher.max_length"


def test_proxy_websocket_without_credentials_answers_401(cluster: Cluster) -> None:
    async def status() -> int:
        url = "ws" + cluster.url[len("http") :] + "/proxy/nosuchtask/pty"
        try:
            async with websockets.connect(url):
                return 101
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(status()) == 401


def test_checkpoint_with_absolute_symlink_downloads_its_files(cluster: Cluster, tmp_path) -> None:
    c = cluster
    storage = tmp_path / "storage"
    config = CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {storage}}}\n"
    r = create(c, config, tarball(lambda tar: None))
    assert r.status_code == 201, r.text
    exp_id = r.json()["experiment"]["id"]
    trial_id = c.api(f"/experiments/{exp_id}")["trials"][0]["id"]
    report = {"uuid": "ckpt-links", "trial_id": trial_id, "steps_completed": 1}
    # A checkpoint whose files leave its directory is refused when reported.
    r = httpx.post(
        c.url + "/api/v1/checkpoints",
        json={**report, "resources": {"../../etc/passwd": 10}},
        headers=c.headers(),
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "resources", r.text
    r = httpx.post(
        c.url + "/api/v1/checkpoints",
        json={**report, "resources": {"model.bin": 5, "sub/notes.txt": 2}},
        headers=c.headers(),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    # What the trial left in storage: its files, and links out of the directory.
    ckpt = storage / "ckpt-links"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(b"model")
    (ckpt / "sub" / "notes.txt").write_text("hi")
    os.symlink("/etc/passwd", ckpt / "passwd")
    os.symlink("../../../outside", ckpt / "sub" / "up")
    out = tmp_path / "download"
    proc = c.det("checkpoint", "download", "ckpt-links", "--output-dir", str(out), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "model.bin").read_bytes() == b"model"
    assert (out / "sub" / "notes.txt").read_text() == "hi"
    assert not (out / "passwd").exists() and not (out / "passwd").is_symlink()
    assert not (out / "sub" / "up").is_symlink()
    assert not (tmp_path / "outside").exists()
    assert "Skipped './passwd'" in proc.stderr and "absolute path" in proc.stderr
    assert "Skipped './sub/up'" in proc.stderr
    assert f"downloaded to {out}" in proc.stdout
    listed = json.loads(c.det("checkpoint", "describe", "ckpt-links", "--json").stdout)
    assert listed["checkpoint"]["resources"] == {"model.bin": 5, "sub/notes.txt": 2}
