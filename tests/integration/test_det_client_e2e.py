"""Determined 0.38.1's own client against a live Dauntless master (issue 33, scope 2).

The suite installs ``determined==0.38.1`` from the package registry into a virtual
environment of its own (``.venv/det-client``, kept between runs; skipped, saying why,
when the registry cannot be reached), starts one master and one agent for the module,
and runs Determined's ``det`` CLI and its SDK (``determined.experimental.client``) in
that environment, pointed at the master by ``DET_MASTER`` / ``-m`` only. Every HTTP
request the client makes is recorded (``det_client_site/sitecustomize.py``); the last
test prints how many distinct endpoints were exercised and how many always answered
2xx.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from .conftest import REPO, Cluster, deadline_seconds

pytestmark = pytest.mark.integration

DET_VERSION = "0.38.1"
SITE = Path(__file__).resolve().parent / "det_client_site"
PASSWORD = "Det-Compat-2026!"
"""The admin's password here: not empty, so that Determined's client-side pre-hash
(``isHashed``) is exercised."""

_OFFLINE = re.compile(
    r"Could not find a version|No matching distribution|NewConnectionError|"
    r"Temporary failure in name resolution|Network is unreachable|ConnectionError|"
    r"ProxyError|Max retries exceeded"
)


@pytest.fixture(scope="module")
def det_venv() -> Path:
    """A virtual environment holding ``determined==0.38.1`` (made once, then reused)."""
    venv = REPO / ".venv" / "det-client"
    marker = venv / f".determined-{DET_VERSION}"
    if marker.exists() and (venv / "bin" / "det").exists():
        return venv
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
    proc = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            f"determined=={DET_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=deadline_seconds(900),
    )
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        if _OFFLINE.search(out):
            pytest.skip(
                f"determined=={DET_VERSION} cannot be installed (registry unreachable): "
                f"{out.strip().splitlines()[-1]}"
            )
        raise AssertionError(f"pip install determined=={DET_VERSION} failed:\n{out[-4000:]}")
    marker.write_text("")
    return venv


class DetClient:
    """Runs Determined's CLI and SDK from ``venv`` against ``cluster``, recording requests."""

    def __init__(self, venv: Path, cluster: Cluster, home: Path) -> None:
        self.venv, self.cluster, self.home = venv, cluster, home
        self.record = home / "requests.jsonl"
        self.ran: list[tuple[str, int]] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DAUNTLESS_"))}
        env.pop("PYTHONPATH", None)
        env.update(
            DET_MASTER=self.cluster.url,
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.home / "config"),
            PYTHONPATH=str(SITE),
            DET_RECORD_FILE=str(self.record),
            PYTHONUNBUFFERED="1",
            PATH=f"{self.venv / 'bin'}:{os.environ.get('PATH', '')}",
        )
        return env

    def _run(self, argv: list[str], stdin: str | None, what: str, timeout: float):
        proc = subprocess.run(
            argv,
            input=stdin,
            env=self.env(),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=deadline_seconds(timeout),
            start_new_session=True,  # no controlling tty: getpass reads stdin
        )
        self.ran.append((what, proc.returncode))
        return proc

    def det(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """``det ARGS`` (Determined's CLI); its stdout. Raises AssertionError on failure."""
        proc = self._run(
            [str(self.venv / "bin" / "det"), *args], stdin, "det " + " ".join(args), timeout
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"det {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}"
            )
        return proc.stdout

    def sdk(self, code: str, timeout: float = 120) -> str:
        """Run Python ``code`` with Determined's SDK; its stdout."""
        code = textwrap.dedent(code)
        proc = self._run([str(self.venv / "bin" / "python"), "-c", code], None, "sdk", timeout)
        if proc.returncode != 0:
            raise AssertionError(
                f"SDK code exited {proc.returncode}:\n{code}\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}"
            )
        return proc.stdout

    def endpoints(self) -> dict[tuple[str, str], set[int]]:
        """Each endpoint the client called (ids in paths as ``{id}``, model names as
        ``{name}``) -> statuses seen."""
        seen: dict[tuple[str, str], set[int]] = {}
        if not self.record.exists():
            return seen
        for line in self.record.read_text().splitlines():
            row = json.loads(line)
            # ids: numbers, uuids, task ids (8 hex digits); a model's name or id
            path = re.sub(
                r"/(\d+|[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{8})(?=/|$)", "/{id}", row["path"]
            )
            path = re.sub(r"^(/api/v1/models)/[^/]+", r"\1/{name}", path)
            seen.setdefault((row["method"], path), set()).add(row["status"])
        return seen


@pytest.fixture(scope="module")
def det(det_venv, module_cluster_factory, tmp_path_factory) -> DetClient:
    """Determined's client and one running master + agent, shared by the module."""
    home = tmp_path_factory.mktemp("det-home")
    cluster = module_cluster_factory(f"sqlite:///{home / 'master.db'}")
    cluster.start_master()
    cluster.start_agent("agent-1", slots=1)
    r = httpx.post(
        f"{cluster.url}/api/v1/users/{_user_id(cluster, 'admin')}/password",
        json={"password": PASSWORD},
        headers=cluster.headers(),
        timeout=30,
    )
    r.raise_for_status()
    r = httpx.post(
        f"{cluster.url}/api/v1/auth/login",
        json={"username": "admin", "password": PASSWORD},
        timeout=30,
    )
    r.raise_for_status()
    cluster.token = r.json()["token"]  # for cluster.api() with the new password
    return DetClient(det_venv, cluster, home)


def _user_id(cluster: Cluster, name: str) -> int:
    return next(u["id"] for u in cluster.api("/users")["users"] if u["username"] == name)


def test_info_and_master(det):
    """``det master info`` and ``det version``: the master's identity in Determined's shape."""
    out = det.det("version")
    assert "cluster_id" in out and "Master not found" not in out, out
    info = json.loads(det.det("master", "info", "--json"))
    assert info["clusterId"] and info["masterId"] and info["version"], info
    # To Determined's client the master is the release whose API it serves, so its CLI
    # does not warn at every command that the versions differ.
    assert info["version"] == "0.38.1", info
    proc = det._run([str(det.venv / "bin" / "det"), "e", "list"], None, "det e list", 120)
    assert proc.returncode == 0 and "version" not in proc.stderr.lower(), proc.stderr


def test_login_whoami_logout(det):
    """``det user login`` sends Determined's pre-hashed password; the token is cached and
    used by the next commands; a wrong password is refused."""
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    assert "admin" in det.det("user", "whoami")
    users = det.det("user", "list")
    assert "admin" in users and "determined" in users
    with pytest.raises(AssertionError, match="exited"):
        det.det("-u", "admin", "user", "login", "admin", stdin="wrong\n")
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")


def test_cluster_reads(det):
    """``det agent list``, ``det slot list`` (0.38.1's CLI has no ``rp list``) and the
    SDK's resource pools: the agent, its slot and its pool."""
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    assert "agent-1" in det.det("agent", "list")
    assert "agent-1" in det.det("slot", "list")


def test_workspaces_and_projects(det):
    """``det workspace list``, ``det project list``, ``det workspace create``."""
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    assert "Uncategorized" in det.det("workspace", "list")
    det.det("workspace", "create", "team-a")
    assert "team-a" in det.det("workspace", "list")
    det.det("project", "create", "team-a", "vision")
    assert "vision" in det.det("project", "list", "team-a")


def test_sdk_login_and_reads(det):
    """The SDK: ``client.login``, ``whoami``, ``list_users``, ``list_workspaces``."""
    out = det.sdk(
        f"""
        from determined.experimental import client
        client.login(user="admin", password={PASSWORD!r})
        print("me", client.whoami().username)
        print("users", sorted(u.username for u in client.list_users()))
        print("workspaces", sorted(w.name for w in client.list_workspaces()))
        """
    )
    assert "me admin" in out
    assert "'determined'" in out and "Uncategorized" in out


def test_experiment_lifecycle(det, tmp_path):
    """``det e create`` (JSON with the context as files), ``e list``, ``e describe``,
    ``e wait``, ``t describe``, ``t logs``, ``e lc``, ``checkpoint download``, pause,
    activate and kill of a second experiment; the SDK's ``list_experiments``,
    ``get_experiment(...).list_trials()``, ``top_checkpoint().download()`` and
    ``iter_metrics``."""
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    example = REPO / "examples" / "core_api"
    out = det.det("experiment", "create", str(example / "const.yaml"), str(example))
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))
    assert str(exp_id) in det.det("experiment", "list")
    det.det("experiment", "wait", str(exp_id), timeout=300)
    described = det.det("experiment", "describe", str(exp_id))
    assert "COMPLETED" in described, described
    trials = det.sdk(
        f"""
        from determined.experimental import client
        client.login(user="admin", password={PASSWORD!r})
        exp = client.get_experiment({exp_id})
        print("state", exp.state.value)
        for t in exp.list_trials():
            print("trial", t.id, t.state.value)
        print("ids", [e.id for e in client.list_experiments()])
        ckpt = exp.top_checkpoint()
        print("ckpt", ckpt.uuid, sorted(ckpt.download({str(tmp_path / "sdk-ckpt")!r}) and
              __import__('os').listdir({str(tmp_path / "sdk-ckpt")!r})))
        trial = exp.list_trials()[0]
        print("metrics", len(list(trial.iter_metrics("training"))))
        """
    )
    assert "state STATE_COMPLETED" in trials, trials
    trial_id = int(re.search(r"trial (\d+) STATE_COMPLETED", trials).group(1))
    assert "metadata.json" in trials and "metrics 10" in trials, trials
    logs = det.det("trial", "logs", str(trial_id))
    stored = [ln["log"] for ln in det.cluster.api(f"/trials/{trial_id}/logs", limit=1000)["logs"]]

    def printed(out: str) -> list[str]:  # the CLI's own closing line left out
        return [ln for ln in out.splitlines() if not ln.startswith("Trial log stream ended")]

    # One printed line per stored line (its CLI prints messages with end="").
    assert printed(logs) == stored, (logs, stored)
    tail = det.det("trial", "logs", "--tail", "3", str(trial_id))
    assert printed(tail) == stored[-3:], (tail, stored)
    det.det("trial", "describe", str(trial_id))
    lc = det.det("experiment", "list-checkpoints", str(exp_id))
    uuid = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", lc).group(0)
    det.det("checkpoint", "download", uuid, "--output-dir", str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / "metadata.json").exists()
    assert det.det("experiment", "logs", str(exp_id)).strip()
    # (no `det trial download`: Determined 0.38.1's CLI refuses --uuid, its --best
    # defaulting to on, and with one checkpoint --best pops it and then finds none)
    det.det("experiment", "download", str(exp_id), "-o", str(tmp_path / "top"))
    assert list((tmp_path / "top").rglob("metadata.json"))

    long = tmp_path / "long.yaml"
    config = (example / "const.yaml").read_text().replace("batches: 200", "batches: 100000000")
    long.write_text(config)
    out = det.det("experiment", "create", "--paused", str(long), str(example))
    second = int(re.search(r"Created experiment (\d+)", out).group(1))
    det.det("experiment", "activate", str(second))
    det.det("experiment", "pause", str(second))
    det.det("experiment", "activate", str(second))
    det.det("experiment", "kill", str(second))
    state = det.cluster.api(f"/experiments/{second}")["experiment"]["state"]
    assert state in ("CANCELED", "STOPPING_CANCELED", "STOPPING_KILLED"), state


def _completed_checkpoint(det: DetClient) -> tuple[int, str]:
    """``(experiment id, uuid)`` of a COMPLETED checkpoint: one an earlier test's
    experiment wrote, else of an experiment run here (so the test also runs alone)."""
    for e in det.cluster.api("/experiments")["experiments"]:
        if e["state"] != "COMPLETED":
            continue
        done = [
            c
            for c in det.cluster.api(f"/experiments/{e['id']}/checkpoints")["checkpoints"]
            if c["state"] == "COMPLETED"
        ]
        if done:
            return e["id"], done[0]["uuid"]
    example = REPO / "examples" / "core_api"
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    out = det.det("experiment", "create", str(example / "const.yaml"), str(example))
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))
    assert det.cluster.wait_experiment(exp_id)["experiment"]["state"] == "COMPLETED"
    checkpoints = det.cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]
    return exp_id, checkpoints[0]["uuid"]


def test_model_registry(det):
    """``det model create/register-version/list/describe/list-versions`` and the SDK's
    ``create_model`` + ``register_version``, ``get_model``, ``list_versions``: the
    versions are registered (read back through Dauntless's own API)."""
    _, uuid = _completed_checkpoint(det)
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    created = det.det("model", "create", "det-cli-model", "--description", "from det")
    assert "det-cli-model" in created and "from det" in created, created
    assert "det-cli-model" in det.det("model", "list")
    registered = det.det("model", "register-version", "det-cli-model", uuid)
    assert uuid in registered, registered
    described = det.det("model", "describe", "det-cli-model")
    assert "det-cli-model" in described and uuid in described, described
    listed = json.loads(det.det("model", "list-versions", "det-cli-model", "--json"))
    assert [v["checkpoint"]["uuid"] for v in listed["modelVersions"]] == [uuid], listed
    out = det.sdk(
        f"""
        from determined.experimental import client
        client.login(user="admin", password={PASSWORD!r})
        model = client.create_model("det-sdk-model", description="from the SDK",
                                    metadata={{"team": "a"}})
        version = model.register_version({uuid!r})
        print("version", version.model_version, version.checkpoint.uuid)
        again = client.get_model("det-sdk-model")
        print("model", again.name, again.description, again.metadata,
              [v.model_version for v in again.list_versions()])
        print("names", sorted(m.name for m in client.list_models()))
        """
    )
    assert f"version 1 {uuid}" in out, out
    assert "model det-sdk-model from the SDK {'team': 'a'} [1]" in out, out
    assert "'det-cli-model', 'det-sdk-model'" in out, out
    ours = det.cluster.api("/models/det-sdk-model/versions")["model_versions"]
    assert [(v["version"], v["checkpoint"]["uuid"]) for v in ours] == [(1, uuid)], ours


def test_commands_notebooks_shells_tensorboards(det):
    """``det cmd run`` (its output streamed back), ``cmd list``; ``notebook start``
    (waits until Jupyter answers), ``notebook list``/``kill``; ``shell`` and
    ``tensorboard`` started detached, listed and killed."""
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    launched = re.compile(r"Launched \w+ \(id: (\w+),")
    out = det.det("cmd", "run", "sh", "-c", "echo det-cmd-$((6*7))", timeout=180)
    assert "det-cmd-42" in out, out
    cmd_id = launched.search(out).group(1)
    listed = det.det("cmd", "list")
    assert cmd_id in listed and "TERMINATED" in listed, listed
    assert det.cluster.api(f"/tasks/{cmd_id}")["task"]["state"] == "COMPLETED"

    out = det.det("notebook", "start", "--no-browser", timeout=300)
    assert "Jupyter Notebook is running at:" in out, out
    nb_id = launched.search(out).group(1)
    listed = det.det("notebook", "list")
    assert nb_id in listed and "RUNNING" in listed, listed
    assert f"Killed notebook {nb_id}" in det.det("notebook", "kill", nb_id)

    exp_id, _ = _completed_checkpoint(det)
    shell_id = det.det("shell", "start", "-d").strip()
    tb_id = det.det("tensorboard", "start", str(exp_id), "-d").strip()
    assert shell_id in det.det("shell", "list") and tb_id in det.det("tensorboard", "list")
    assert f"Killed shell {shell_id}" in det.det("shell", "kill", shell_id)
    assert f"Killed tensorboard {tb_id}" in det.det("tensorboard", "kill", tb_id)
    ended = {"COMPLETED", "CANCELED", "ERROR"}
    for task_id in (nb_id, shell_id, tb_id):
        assert det.cluster.wait_task(task_id, ended, timeout=60)["state"] in ended
    tb = det.cluster.api(f"/tasks/{tb_id}")["task"]
    assert tb["experiment_ids"] == [exp_id], tb


READ_BEST = """
import os, runpy, sys, time

sys.argv = ["train.py"]
try:
    runpy.run_path("train.py", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code

import determined as det
from determined.experimental import client
from ruamel.yaml import YAML  # brought by Determined's package where trials run

print("RUAMEL", YAML(typ="safe", pure=True).load(open("const.yaml"))["entrypoint"], flush=True)

info = det.get_cluster_info()
exp = client.get_experiment(info.trial.experiment_id)
deadline = time.time() + 120
while not exp.list_checkpoints() and time.time() < deadline:
    time.sleep(1)
best = exp.top_checkpoint()
path = best.download(os.path.join(os.getcwd(), "best-ckpt"))
print("BEST", best.uuid, sorted(os.listdir(path)), flush=True)

# A second checkpoint: Determined 0.38.1's `det trial download --latest` needs two (with
# one it pops it and then reports that none is left).
with det.core.init() as core:
    with core.checkpoint.store_path({"steps_completed": 201}) as (out, uuid):
        with open(os.path.join(out, "second.txt"), "w") as f:
            f.write("second")
print("SECOND", uuid, flush=True)
"""


def test_sdk_inside_a_trial(det, tmp_path):
    """Trial code using ``from determined.experimental import client`` reads its own
    experiment's best checkpoint (Determined's SDK through the compatibility package),
    reads its config with ``ruamel.yaml`` and stores a second checkpoint through
    ``det.core``; ``det trial download --latest`` fetches that one."""
    context = tmp_path / "ctx"
    context.mkdir()
    example = REPO / "examples" / "core_api"
    (context / "train.py").write_text((example / "train.py").read_text())
    (context / "read_best.py").write_text(READ_BEST)
    config = (
        (example / "const.yaml")
        .read_text()
        .replace("entrypoint: python3 train.py", "entrypoint: python3 read_best.py")
    )
    (context / "const.yaml").write_text(config)
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    out = det.det("experiment", "create", str(context / "const.yaml"), str(context))
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))
    body = det.cluster.wait_experiment(exp_id, timeout=300)
    assert body["experiment"]["state"] == "COMPLETED", det.cluster.dump_logs(exp_id)
    (trial,) = body["trials"]
    lines = det.cluster.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
    text = "".join(line["log"] for line in lines)
    assert "RUAMEL python3 read_best.py" in text, text[-3000:]
    found = re.search(r"BEST (\S+) (\[.*\])", text)
    assert found, text[-3000:]
    checkpoints = det.cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]
    best = min(
        (c for c in checkpoints if c["searcher_metric"] is not None),
        key=lambda c: c["searcher_metric"],
    )
    assert found.group(1) == best["uuid"]
    assert "metadata.json" in found.group(2) and "weights.npy" in found.group(2)
    # det trial download --latest: Determined 0.38.1's CLI lists the trial's checkpoints
    # newest first and takes the last of the list, the one of train.py at batch 200.
    second = re.search(r"SECOND (\S+)", text).group(1)
    assert second in det.det("experiment", "list-checkpoints", str(exp_id))
    out = det.det("trial", "download", str(trial["id"]), "--latest", "-o", str(tmp_path / "t"))
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    assert meta["steps_completed"] == 200 and (tmp_path / "t" / "weights.npy").exists(), out


def test_agent_yaml_of_determined(det, tmp_path):
    """``python -m dauntless.agent --config-file agent.yaml`` with Determined's agent
    keys registers; the fields it ignores are warned about by name."""
    cluster = det.cluster
    config = {
        "master_host": "127.0.0.1",
        "master_port": cluster.port,
        "agent_id": "agent-yaml",
        "resource_pool": "default",
        "artificial_slots": 1,
        "work_dir": str(tmp_path / "work"),
        "fluent": {"image": "fluent/fluent-bit:1.9.3"},
        "api_enabled": False,
        "agent_reconnect_attempts": 5,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = tmp_path / "agent-yaml.log"
    cluster.logs.append(log)
    cmd = [sys.executable, "-m", "dauntless.agent", "--config-file", str(path)]
    cmd += ["--cluster-secret-file", str(cluster.secret_file)]
    cluster.agents["agent-yaml"] = subprocess.Popen(
        cmd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=cluster.env(),
        start_new_session=True,
    )
    deadline = time.time() + deadline_seconds(60)
    while "agent-yaml" not in {a["id"] for a in cluster.api("/agents")["agents"]}:
        assert time.time() < deadline, log.read_text()
        assert cluster.agents["agent-yaml"].poll() is None, log.read_text()
        time.sleep(0.3)
    det.det("user", "login", "admin", stdin=PASSWORD + "\n")
    assert "agent-yaml" in det.det("agent", "list")
    text = log.read_text()
    for key in ("fluent", "api_enabled", "agent_reconnect_attempts"):
        assert f"agent config field {key} is ignored" in text, text
    cluster.stop(cluster.agents.pop("agent-yaml"))


def test_zz_endpoint_summary(det):
    """Print the endpoints Determined's client exercised and how many always passed."""
    seen = det.endpoints()
    passing = {k for k, statuses in seen.items() if all(200 <= s < 300 for s in statuses)}
    lines = [f"{m} {p}: {sorted(s)}" for (m, p), s in sorted(seen.items())]
    print(
        f"\nDetermined {DET_VERSION} client: {len(seen)} endpoints exercised, "
        f"{len(passing)} answered only 2xx; {len(det.ran)} CLI/SDK runs\n" + "\n".join(lines)
    )
    assert seen, "no request was recorded"
    # Only the deliberately wrong password may have failed.
    failing = set(seen) - passing
    assert failing <= {("POST", "/api/v1/auth/login")}, failing
