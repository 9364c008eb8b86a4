"""Fixtures that start a real master and real agents as processes on 127.0.0.1.

Each cluster gets free ports and its own temporary directories; the database is SQLite
in the data directory, or a fresh PostgreSQL database on 127.0.0.1:5432 (user postgres,
trust auth) that is dropped afterwards. On failure the processes' logs are printed.

The test process deploys these clusters, so it is their admin and configures them as `det
deploy local cluster-up` does for its deployer (issue 29): tasks of users without a link
run as the test process's own Unix identity (``security.default_task``), agents may
register artificial slots, and a task outlives a killed agent for 10 s (not the default
3 minutes) before its supervisor ends it.

Deadlines hold under load: every wait is for an event (an answer, a state, progress),
and its deadline is :func:`deadline_seconds` of a figure measured on an idle machine, so
a busy machine (load average above its core count) waits proportionally longer. Waits
for an experiment measure time without progress, not time in all.
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
from databases import fresh_postgres_database, postgres_available
from deployer import deployer_identity_args

REPO = Path(__file__).resolve().parents[2]


TIMEOUT_SCALE_ENV = "DAUNTLESS_TEST_TIMEOUT_SCALE"
"""Multiplies every integration-test deadline (default 1), e.g. for a slow CI machine."""


def deadline_seconds(idle_seconds: float) -> float:
    """A deadline for something that takes well under ``idle_seconds`` on an idle machine,
    scaled to this machine now.

    The scale is the load per core (the 1-minute load average over the CPU count) when it
    exceeds 1, times ``$DAUNTLESS_TEST_TIMEOUT_SCALE``: at load 20 on 2 cores a 120 s
    deadline becomes 1,200 s, so a slow but working product does not fail its tests.

    Args:
        idle_seconds: seconds allowed on an idle machine.

    Returns:
        Seconds allowed now.
    """
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return idle_seconds * max(1.0, load) * float(os.environ.get(TIMEOUT_SCALE_ENV) or 1.0)


ORPHAN_GRACE_SECONDS = 10.0
"""How long the tests' agents let a task outlive them (``--orphan-grace-period``)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    # Namespaced hosts (tests/netns.py): the argv prefix that runs the master, and each
    # agent, on a host of its own (``ip netns exec NS``), and the master's listen address.
    master_prefix: list[str] = field(default_factory=list)
    master_host: str | None = None
    agent_prefix: dict[str, list[str]] = field(default_factory=dict)
    deadline = staticmethod(deadline_seconds)

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
            r = httpx.post(
                self.url + "/api/v1/auth/login",
                timeout=30,
                json={"username": "admin", "password": ""},
            )
            r.raise_for_status()
            self.token = r.json()["token"]
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def api(self, path: str, **params) -> dict:
        r = httpx.get(
            self.url + "/api/v1" + path, params=params, timeout=30, headers=self.headers()
        )
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

    def det(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run the real `det` CLI against this cluster."""
        proc = subprocess.run(
            [sys.executable, "-m", "dauntless.cli.main", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=deadline_seconds(timeout),
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
        cmd = [
            *self.master_prefix,
            sys.executable,
            "-m",
            "dauntless.master",
            *(["--host", self.master_host] if self.master_host else []),
            "--port",
            str(self.port),
            # The task services' own origin on a free port (the default, --port + 1, may
            # belong to another test's master).
            "--proxy-port",
            "0",
            "--data-dir",
            str(self.data_dir),
            "--db-url",
            self.db_url,
            "--agent-timeout",
            str(agent_timeout),
            "--cluster-secret-file",
            str(self.secret_file),
            *deployer_identity_args(),
            "--allow-artificial-slots",
            *self.master_args,
        ]
        self.master = subprocess.Popen(
            cmd,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        deadline = time.time() + deadline_seconds(60)
        while time.time() < deadline:
            if self.master.poll() is not None:
                raise AssertionError(f"master exited early:\n{log.read_text()}")
            try:
                httpx.get(self.url + "/api/v1/master", timeout=2).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"master did not answer in time:\n{log.read_text()}")

    def start_agent(
        self, agent_id: str = "agent-1", slots: int = 1, extra_args: tuple[str, ...] = ()
    ) -> None:
        log = self.tmp / f"{agent_id}-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [
            *self.agent_prefix.get(agent_id, []),
            sys.executable,
            "-m",
            "dauntless.agent",
            "--master-url",
            self.url,
            "--agent-id",
            agent_id,
            "--work-dir",
            str(self.tmp / agent_id),
            "--artificial-slots",
            str(slots),
            "--heartbeat-interval",
            "0.2",
            "--cluster-secret-file",
            str(self.secret_file),
            "--orphan-grace-period",
            str(ORPHAN_GRACE_SECONDS),
            *extra_args,
        ]
        self.agents[agent_id] = subprocess.Popen(
            cmd,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        deadline = time.time() + deadline_seconds(60)
        while time.time() < deadline:
            ids = {a["id"]: a for a in self.api("/agents")["agents"]}
            if agent_id in ids and ids[agent_id]["state"] == "ACTIVE":
                return
            if self.agents[agent_id].poll() is not None:
                raise AssertionError(f"agent exited early:\n{log.read_text()}")
            time.sleep(0.2)
        raise AssertionError(f"agent {agent_id} did not register in time:\n{log.read_text()}")

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

    def dump_logs(self, exp_id: int | tuple[int, ...] | None = None) -> str:
        """The master's and agents' log files, then (with ``exp_id``, one id or several)
        the last lines of each of those experiments' trials as the master stored them."""
        parts = [f"===== {p.name}\n{p.read_text()[-20000:]}" for p in self.logs if p.exists()]
        ids = () if exp_id is None else exp_id if isinstance(exp_id, tuple) else (exp_id,)
        for eid in ids:
            try:
                for trial in self.api(f"/experiments/{eid}")["trials"]:
                    lines = self.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
                    text = "\n".join(line["log"].rstrip("\n") for line in lines[-300:])
                    parts.append(f"===== trial {trial['id']} (last 300 lines)\n{text}")
            except (httpx.HTTPError, KeyError) as exc:
                parts.append(f"===== trial logs of experiment {eid} unavailable: {exc!r}")
        return "\n".join(parts)

    def wait_experiment(self, exp_id: int, timeout: float = 300) -> dict:
        """Wait until the experiment is terminal and return its ``GET /experiments/{id}``.

        Args:
            exp_id: the experiment.
            timeout: seconds (on an idle machine, see :func:`deadline_seconds`) the
                experiment may go without progress: its state, its trials' states,
                batches and restarts all unchanged.

        Raises:
            AssertionError: it stalled for longer than that (the logs are attached).
        """
        terminal = {"COMPLETED", "CANCELED", "ERROR", "DELETED"}
        last: object = None
        stalled_since = time.time()
        while time.time() - stalled_since < deadline_seconds(timeout):
            body = self.api(f"/experiments/{exp_id}")
            if body["experiment"]["state"] in terminal:
                return body
            seen = (
                body["experiment"]["state"],
                [(t["state"], t["total_batches"], t["restarts"]) for t in body["trials"]],
            )
            if seen != last:
                last, stalled_since = seen, time.time()
            time.sleep(0.5)
        raise AssertionError(
            f"experiment {exp_id} made no progress in {timeout} s (scaled to the load):\n"
            f"{self.dump_logs(exp_id)}"
        )

    def wait_task(self, task_id: str, states: set[str], timeout: float = 60) -> dict:
        """Wait until a generic task (command, notebook, shell, TensorBoard) is in one of
        ``states`` and return its ``GET /tasks/{id}`` body's task.

        Args:
            task_id: the task's id.
            states: task states to wait for, e.g. ``{"RUNNING"}``.
            timeout: seconds on an idle machine, scaled to the load (:func:`deadline_seconds`).

        Raises:
            AssertionError: not reached in time (the cluster's logs are attached).
        """
        limit = deadline_seconds(timeout)
        deadline = time.time() + limit
        while time.time() < deadline:
            task = self.api(f"/tasks/{task_id}")["task"]
            if task["state"] in states:
                return task
            time.sleep(0.2)
        raise AssertionError(
            f"task {task_id} not in {states} after {limit:.0f} s:\n{self.dump_logs()}"
        )


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path) -> Iterator[str]:
    """A database URL: SQLite in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/master.db"
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    with fresh_postgres_database() as url:
        yield url


def _cluster_factory(tmp: Path, request) -> Iterator:
    made: list[Cluster] = []

    def make(db_url: str) -> Cluster:
        c = Cluster(
            url=f"http://127.0.0.1:{free_port()}",
            data_dir=tmp / "data",
            db_url=db_url,
            tmp=tmp,
        )
        made.append(c)
        return c

    yield make
    failed = getattr(request.node, "rep_call", None)
    for c in made:
        c.shutdown()
        if failed is not None and failed.failed:
            print(c.dump_logs())


@pytest.fixture()
def cluster_factory(tmp_path, request):
    """Make clusters (not started); every one is shut down at the end of the test."""
    yield from _cluster_factory(tmp_path, request)


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory, request):
    """Make clusters (not started) shared by a module's tests, e.g. for a baseline run;
    every one is shut down at the end of the module."""
    yield from _cluster_factory(tmp_path_factory.mktemp("module-cluster"), request)


@pytest.fixture()
def deadline():
    """:func:`deadline_seconds`: a deadline measured on an idle machine, scaled to the
    load now."""
    return deadline_seconds


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _netns_cluster_factory(tmp: Path, request) -> Iterator:
    from netns import Network, unavailable

    why = unavailable()
    if why is not None:
        pytest.skip(why)
    made: list[tuple[Network, Cluster]] = []

    def make(hosts: tuple[str, ...] = ("master", "a")) -> tuple[Network, Cluster]:
        net = Network(hosts)
        master = net.hosts["master"]
        c = Cluster(
            url=f"http://{master.addr}:8080",  # a port of its own host: always free
            data_dir=tmp / f"data{len(made)}",
            db_url=f"sqlite:///{tmp}/master{len(made)}.db",
            tmp=tmp,
            master_prefix=master.argv(),
            master_host=master.addr,
            agent_prefix={n: h.argv() for n, h in net.hosts.items() if n != "master"},
        )
        made.append((net, c))
        return net, c

    try:
        yield make
    finally:
        failed = getattr(request.node, "rep_call", None)
        for net, c in made:
            try:
                c.shutdown()
                if failed is not None and failed.failed:
                    print(c.dump_logs())
            finally:
                net.close()


@pytest.fixture()
def netns_cluster_factory(tmp_path, request):
    """Make a cluster on namespaced hosts (tests/netns.py; issue 36): ``make(hosts)``
    returns ``(network, cluster)``, the master to run on host ``master`` (listening on
    its address, SQLite in tmp_path: PostgreSQL on the root namespace's 127.0.0.1 is
    out of reach) and an agent started as ``cluster.start_agent(NAME)`` on host
    ``NAME``. The test process reaches the hosts through the network's gateway link.
    Skips, saying why, where namespaces cannot be made (not root, no ``ip``). Every
    process and namespace is removed at the end, whatever the outcome."""
    yield from _netns_cluster_factory(tmp_path, request)


@pytest.fixture(scope="module")
def module_netns_cluster_factory(tmp_path_factory, request):
    """:func:`netns_cluster_factory` for a module's tests that share one network and
    cluster (each test leaves every link as it found it); removed at the module's end."""
    yield from _netns_cluster_factory(tmp_path_factory.mktemp("netns-cluster"), request)
