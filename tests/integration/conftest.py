"""Fixtures that start a real master and real agents as processes on 127.0.0.1.

Each cluster gets free ports and its own temporary directories; the database is SQLite
in the data directory, or a fresh PostgreSQL database on 127.0.0.1:5432 (user postgres,
trust auth) that is dropped afterwards. On failure the processes' logs are printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


@dataclass
class Cluster:
    """A running master and its agents."""

    url: str
    data_dir: Path
    db_url: str
    tmp: Path
    master: subprocess.Popen | None = None
    agents: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    master_args: list[str] = field(default_factory=list)
    token: str | None = None  # the admin's, for api()

    @property
    def secret_file(self) -> Path:
        """The cluster secret the master and the agents share (mode 0600)."""
        path = self.tmp / "cluster_secret"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(uuid.uuid4().hex + uuid.uuid4().hex)
        return path

    def headers(self) -> dict[str, str]:
        """An admin's credentials (the built-in admin, empty password)."""
        if self.token is None:
            r = httpx.post(self.url + "/api/v1/auth/login", timeout=30,
                           json={"username": "admin", "password": ""})
            r.raise_for_status()
            self.token = r.json()["token"]
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def api(self, path: str, **params) -> dict:
        r = httpx.get(self.url + "/api/v1" + path, params=params, timeout=30,
                      headers=self.headers())
        r.raise_for_status()
        return r.json()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DET_MASTER"] = self.url
        env["PYTHONUNBUFFERED"] = "1"
        # The CLI saves its sign-in token here, never in the real ~/.config.
        env["XDG_CONFIG_HOME"] = str(self.tmp / "config")
        for name in ("DET_USER", "DET_PASS", "DET_USER_TOKEN", "DET_MASTER_CERT_FILE"):
            env.pop(name, None)
        return env

    def det(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """Run the real `det` CLI against this cluster."""
        proc = subprocess.run(
            [sys.executable, "-m", "dauntless.cli.main", *args],
            cwd=REPO, env=self.env(), capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"det {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}"
            )
        return proc

    def start_master(self, agent_timeout: float = 30.0) -> None:
        log = self.tmp / f"master-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [sys.executable, "-m", "dauntless.master", "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--db-url", self.db_url,
               "--agent-timeout", str(agent_timeout),
               "--cluster-secret-file", str(self.secret_file), *self.master_args]
        self.master = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                       env=self.env(), start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.master.poll() is not None:
                raise AssertionError(f"master exited early:\n{log.read_text()}")
            try:
                httpx.get(self.url + "/api/v1/master", timeout=2).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"master did not answer in 60 s:\n{log.read_text()}")

    def start_agent(self, agent_id: str = "agent-1", slots: int = 1) -> None:
        log = self.tmp / f"{agent_id}-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [sys.executable, "-m", "dauntless.agent", "--master-url", self.url,
               "--agent-id", agent_id, "--work-dir", str(self.tmp / agent_id),
               "--artificial-slots", str(slots), "--heartbeat-interval", "0.2",
               "--cluster-secret-file", str(self.secret_file)]
        self.agents[agent_id] = subprocess.Popen(
            cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=self.env(),
            start_new_session=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            ids = {a["id"]: a for a in self.api("/agents")["agents"]}
            if agent_id in ids and ids[agent_id]["state"] == "ACTIVE":
                return
            if self.agents[agent_id].poll() is not None:
                raise AssertionError(f"agent exited early:\n{log.read_text()}")
            time.sleep(0.2)
        raise AssertionError(f"agent {agent_id} did not register in 60 s:\n{log.read_text()}")

    def stop(self, proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def shutdown(self) -> None:
        for proc in self.agents.values():
            self.stop(proc)
        self.stop(self.master)

    def dump_logs(self, exp_id: int | None = None) -> str:
        """The master's and agents' log files, then (with ``exp_id``) the last lines of
        each of that experiment's trials as the master stored them."""
        parts = [f"===== {p.name}\n{p.read_text()[-20000:]}" for p in self.logs if p.exists()]
        if exp_id is not None:
            try:
                for trial in self.api(f"/experiments/{exp_id}")["trials"]:
                    lines = self.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
                    text = "\n".join(line["log"].rstrip("\n") for line in lines[-300:])
                    parts.append(f"===== trial {trial['id']} (last 300 lines)\n{text}")
            except (httpx.HTTPError, KeyError) as exc:
                parts.append(f"===== trial logs of experiment {exp_id} unavailable: {exc!r}")
        return "\n".join(parts)

    def wait_experiment(self, exp_id: int, timeout: float = 300) -> dict:
        terminal = {"COMPLETED", "CANCELED", "ERROR", "DELETED"}
        deadline = time.time() + timeout
        while time.time() < deadline:
            body = self.api(f"/experiments/{exp_id}")
            if body["experiment"]["state"] in terminal:
                return body
            time.sleep(0.5)
        raise AssertionError(
            f"experiment {exp_id} not finished in {timeout} s:\n{self.dump_logs(exp_id)}"
        )


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path) -> Iterator[str]:
    """A database URL: SQLite in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/master.db"
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = f"dauntless_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture()
def cluster_factory(tmp_path, request):
    """Make clusters (not started); every one is shut down at the end of the test."""
    made: list[Cluster] = []

    def make(db_url: str) -> Cluster:
        c = Cluster(url=f"http://127.0.0.1:{free_port()}", data_dir=tmp_path / "data",
                    db_url=db_url, tmp=tmp_path)
        made.append(c)
        return c

    yield make
    failed = getattr(request.node, "rep_call", None)
    for c in made:
        c.shutdown()
        if failed is not None and failed.failed:
            print(c.dump_logs())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


