"""Two users on one root agent cannot reach each other (issue 29, acceptance).

Unix users are made for the test (``useradd``) and linked to the Dauntless users alice
and bob (``agent_user_group``). Alice runs a command (whose context and environment
hold secrets of hers), a notebook, and a trial that writes a checkpoint. Then each of
bob's command, shell, notebook and trial runs a probe (its ``startup-hook.sh``) that
tries to read alice's environment (``/proc/*/environ``), tokens, files, contexts,
checkpoint, the agent's state and the cluster secret and the master's database, to
reach her notebook's port directly, and to report her command's exit to the master.
Each attempt must meet its specific refusal: permission denied, 401 or 403.

Needs root (the agent switches identities) and PID namespaces; skipped otherwise,
saying why. The agent's Python must be runnable by the test's users: where it lies
under a home closed to others (pyenv under ``/root`` on the CI host), the test opens
only the search bit (``o+x``, never read) of those directories while it runs.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dauntless.agent._identity import AgentIdentity

pytestmark = pytest.mark.integration

AGENT = AgentIdentity.probe()
if not (AGENT.root and AGENT.pid_namespace) or shutil.which("useradd") is None:
    pytest.skip(
        "two Unix users on a root agent need root, PID namespaces and useradd "
        f"({AGENT.why_not or 'useradd is not installed'})",
        allow_module_level=True,
    )

PROBE = r"""
import json, os, sys, urllib.request, urllib.error

t = json.load(open("targets.json"))
out = {"kind": sys.argv[1], "uid": os.getuid()}
seen, found = 0, []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        seen += 1
        try:
            if t["marker"].encode() in open(f"/proc/{pid}/environ", "rb").read():
                found.append(pid)
        except OSError:
            pass
out["pids_seen"], out["marker_found"] = seen, found

def attempt(path, listing=False):
    try:
        os.listdir(path) if listing else open(path, "rb").read()
        return "read"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return f"error {exc.errno}"

for name in ("work_file", "token_file", "state_file", "checkpoint", "cluster_secret", "db"):
    out[name] = attempt(t[name])
out["agent_dir"] = attempt(t["agent_dir"], listing=True)

def secret(name):
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(name + "_FILE")
    return open(path).read().strip() if path else None

def post(url, token):
    req = urllib.request.Request(url, data=b'{"exit_code": 0}', method="POST",
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        return urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as exc:
        return exc.code

exited = os.environ["DET_MASTER"] + f"/api/v1/allocations/{t['alloc']}/exited"
out["exited_none"] = post(exited, None)
out["exited_session"] = post(exited, secret("DET_SESSION_TOKEN"))
user_token = secret("DET_USER_TOKEN")
out["exited_user"] = post(exited, user_token) if user_token else None
try:
    urllib.request.urlopen(t["notebook"], timeout=30)
    out["notebook"] = 200
except urllib.error.HTTPError as exc:
    out["notebook"] = exc.code
except OSError as exc:
    out["notebook"] = f"error {exc}"
print("PROBE " + json.dumps(out), flush=True)
"""

TRIAL = """
from dauntless import core
with core.init() as ctx:
    with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "weights.txt").write_text("alice's weights")
    ctx.train.report_training_metrics(1, {"loss": 1.0})
"""

EXPERIMENT = """
name: {name}
entrypoint: {entrypoint}
searcher: {{name: single, metric: loss, max_length: {{batches: 1}}}}
max_restarts: 0
"""


@pytest.fixture(scope="module")
def unix_users() -> Iterator[dict[str, pwd.struct_passwd]]:
    """Two Unix users (each with a group of its name), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    made = {}
    try:
        for who in ("alice", "bob"):
            name = f"dt{who}{tag}"
            subprocess.run(
                ["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
            )
            made[who] = pwd.getpwnam(name)
        yield made
    finally:
        for entry in made.values():
            subprocess.run(["userdel", entry.pw_name], capture_output=True)


@pytest.fixture(scope="module")
def python_for_everyone() -> Iterator[None]:
    """Let other users run the agent's Python: the search bit (never read) of each
    directory above it that is closed to others, restored afterwards."""
    opened: list[tuple[str, int]] = []
    paths = {os.path.realpath(sys.executable), os.path.abspath(sys.executable), sys.prefix}
    try:
        for path in paths:
            for parent in Path(path).parents:
                mode = parent.stat().st_mode
                if not mode & stat.S_IXOTH and str(parent) not in dict(opened):
                    opened.append((str(parent), stat.S_IMODE(mode)))
                    os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
        yield
    finally:
        for path, mode in opened:
            os.chmod(path, mode)


@pytest.fixture(scope="module")
def world(unix_users, python_for_everyone, module_cluster_factory):
    """A master and a root agent in a directory other users may enter (pytest's own
    temporary directories are root's only); both users linked."""
    tmp = Path(tempfile.mkdtemp(prefix="dauntless-iso-", dir="/tmp"))
    os.chmod(tmp, 0o711)
    c = module_cluster_factory(f"sqlite:///{tmp}/data/master.db")
    c.tmp, c.data_dir = tmp, tmp / "data"
    try:
        c.start_master()
        c.start_agent(slots=2)
        yield _World(c, unix_users)
    finally:
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


class _World:
    def __init__(self, c, unix: dict[str, pwd.struct_passwd]) -> None:
        self.c, self.unix = c, unix
        self.tokens: dict[str, str] = {}
        for who, entry in unix.items():
            r = httpx.post(
                c.url + "/api/v1/users",
                headers=c.headers(),
                json={"username": who, "password": f"{who}-pw"},
                timeout=30,
            )
            r.raise_for_status()
            link = {
                "agent_uid": entry.pw_uid,
                "agent_gid": entry.pw_gid,
                "agent_user": entry.pw_name,
                "agent_group": entry.pw_name,
            }
            r = httpx.patch(
                f"{c.url}/api/v1/users/{r.json()['user']['id']}",
                headers=c.headers(),
                json={"agent_user_group": link},
                timeout=30,
            )
            r.raise_for_status()
            r = httpx.post(
                c.url + "/api/v1/auth/login",
                json={"username": who, "password": f"{who}-pw"},
                timeout=30,
            )
            self.tokens[who] = r.json()["token"]

    def call(self, who: str, method: str, path: str, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.request(method, self.c.url + path, headers=headers, timeout=60, **kw)

    def task(self, who: str, kind: str, context: Path | None, **form) -> str:
        files = {}
        if context is not None:
            files["context"] = ("context.tar.gz", _tarball(context), "application/gzip")
        r = self.call(who, "POST", f"/api/v1/{kind}", data=form, files=files or None)
        assert r.status_code == 201, r.text
        return r.json()["task"]["id"]

    def experiment(self, who: str, context: Path, entrypoint: str) -> int:
        config = EXPERIMENT.format(name=f"{who}-trial", entrypoint=entrypoint)
        files = {"context": ("context.tar.gz", _tarball(context), "application/gzip")}
        r = self.call(who, "POST", "/api/v1/experiments", data={"config": config}, files=files)
        assert r.status_code == 201, r.text
        return r.json()["experiment"]["id"]


def _tarball(directory: Path) -> bytes:
    buf = Path(tempfile.mkstemp(suffix=".tar.gz")[1])
    with tarfile.open(buf, "w:gz") as tar:
        for p in sorted(directory.iterdir()):
            tar.add(p, arcname=p.name)
    data = buf.read_bytes()
    buf.unlink()
    return data


def _wait(what: str, check, c, timeout: float = 120):
    deadline = time.time() + c.deadline(timeout)
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen in time:\n{c.dump_logs()}")


def _processes_with(marker: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    out.append(int(pid))
            except OSError:
                pass
    return out


def test_users_cannot_reach_each_others_tasks(world, tmp_path):
    w, c = world, world.c
    alice, bob = w.unix["alice"], w.unix["bob"]
    marker = f"alice-marker-{uuid.uuid4().hex}"
    # ---- alice: a command holding secrets, a notebook, a trial with a checkpoint
    ctx = tmp_path / "alice"
    ctx.mkdir()
    (ctx / "secret.txt").write_text("alice's context\n")
    (ctx / "train.py").write_text(TRIAL)
    config = json.dumps(
        {"resources": {"slots": 0}, "environment": {"environment_variables": [f"M={marker}"]}}
    )
    command = w.task("alice", "commands", ctx, entrypoint='"sleep 600"', config=config)
    notebook = w.task("alice", "notebooks", None, config='{"resources": {"slots": 0}}')
    exp_id = w.experiment("alice", ctx, "python3 train.py")
    c.wait_task(command, {"RUNNING"})

    def hers() -> dict[int, int]:
        """The processes carrying the marker and their owners, once one of them runs as
        alice (at first only the root-owned `unshare` that is about to drop to her)."""
        owners = {}
        for pid in _processes_with(marker):
            try:
                owners[pid] = Path(f"/proc/{pid}").stat().st_uid
            except OSError:  # ended meanwhile
                continue
        return owners if alice.pw_uid in owners.values() else {}

    owners = _wait("alice's command to start as alice", hers, c)
    pids = list(owners)
    # the rest is the root-owned `unshare` that made her namespaces (root only can read
    # its environment); nothing of hers runs as root
    rooted = {Path(f"/proc/{p}/comm").read_text().strip() for p, u in owners.items() if u == 0}
    assert rooted <= {"unshare"}, rooted
    body = c.wait_experiment(exp_id, timeout=180)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    ckpt = c.api(f"/checkpoints/{body['trials'][0]['latest_checkpoint']}")["checkpoint"]
    ckpt_dir = Path(ckpt["storage_path"])
    st = ckpt_dir.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (alice.pw_uid, 0o700)
    task = _wait("alice's notebook", lambda: c.api(f"/tasks/{notebook}")["task"]["ready"], c, 180)
    assert task
    with sqlite3.connect(f"file:{c.tmp}/data/master.db?mode=ro", uri=True) as db:
        addr, port = db.execute(
            "SELECT service_addr, service_port FROM tasks WHERE id = ?", (notebook,)
        ).fetchone()
    alloc = c.api(f"/tasks/{command}")["task"]["allocation_id"]
    agent_dir = c.tmp / "agent-1"
    work = agent_dir / alloc
    assert (work / "secret.txt").stat().st_uid == alice.pw_uid
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    targets = {
        "marker": marker,
        "alloc": alloc,
        "work_file": str(work / "secret.txt"),
        "token_file": str(agent_dir / ".private" / alloc / "secrets" / "user_token"),
        "state_file": str(agent_dir / ".tasks" / alloc / "output"),
        "agent_dir": str(agent_dir),
        "checkpoint": str(ckpt_dir / "weights.txt"),
        "cluster_secret": str(c.secret_file),
        "db": f"{c.tmp}/data/master.db",
        "notebook": f"http://{addr}:{port}/proxy/{notebook}/api/status",
    }
    assert Path(targets["token_file"]).stat().st_uid == alice.pw_uid

    # ---- bob: the same probe in a command, a shell, a notebook and a trial
    ctx = tmp_path / "bob"
    ctx.mkdir()
    (ctx / "probe.py").write_text(PROBE)
    (ctx / "targets.json").write_text(json.dumps(targets))
    (ctx / "startup-hook.sh").write_text('python3 probe.py "$DET_TASK_TYPE"\n')
    zero = '{"resources": {"slots": 0}}'
    bobs = {
        "COMMAND": w.task("bob", "commands", ctx, entrypoint='"true"', config=zero),
        "SHELL": w.task("bob", "shells", ctx, config=zero),
        "NOTEBOOK": w.task("bob", "notebooks", ctx, config=zero),
    }
    bob_exp = w.experiment("bob", ctx, "python3 -c pass")

    def probes() -> dict[str, dict] | None:
        lines = []
        for task_id in bobs.values():
            lines += [ln["log"] for ln in c.api(f"/tasks/{task_id}/logs")["logs"]]
        for trial in c.api(f"/experiments/{bob_exp}")["trials"]:
            lines += [ln["log"] for ln in c.api(f"/trials/{trial['id']}/logs")["logs"]]
        found = {}
        for line in lines:
            if line.startswith("PROBE "):
                result = json.loads(line[len("PROBE ") :])
                found[result["kind"]] = result
        return found if len(found) == 4 else None

    results = _wait("bob's four probes", probes, c, 180)
    for task_id in (bobs["SHELL"], bobs["NOTEBOOK"]):
        w.call("bob", "POST", f"/api/v1/tasks/{task_id}/kill")
    for kind, got in results.items():
        why = f"{kind}: {got}"
        assert got["uid"] == bob.pw_uid, why
        # its own PID namespace: a handful of its own processes, none of alice's
        assert got["pids_seen"] < 30 and got["marker_found"] == [], why
        for name in ("work_file", "token_file", "state_file", "checkpoint", "cluster_secret"):
            assert got[name] == "denied", why
        assert got["db"] == "denied" and got["agent_dir"] == "denied", why
        assert got["exited_none"] == 401, why
        assert got["exited_session"] == 403, why  # its own task's token: not alice's
        assert got["exited_user"] in ((None,) if kind == "TRIAL" else (403,)), why
        assert got["notebook"] == 403, why  # her notebook wants its own token
    # alice's command was not ended by bob's reports
    assert c.api(f"/tasks/{command}")["task"]["state"] == "RUNNING"
    assert all(os.path.exists(f"/proc/{p}") for p in pids)
