"""Helpers for tests that drive the master in-process: through ``fastapi.testclient``, or
served over real sockets by :func:`serve` (for clients such as the ``det`` CLI that open
their own connections)."""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_HEADER

T = TypeVar("T")


def login(client: Any, username: str = "admin", password: str = "") -> str:
    """Sign in through ``POST /api/v1/auth/login`` and return the token.

    The cookie the login sets is dropped, so that the client sends only what the caller
    gives it.

    Raises:
        AssertionError: the login was refused.
    """
    r = client.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, f"login as {username} failed: {r.status_code} {r.text}"
    client.cookies.clear()
    return r.json()["token"]


def sign_in(client: Any, username: str = "admin", password: str = "") -> str:
    """Sign ``client`` in (default: the built-in admin, empty password): every later
    request carries ``Authorization: Bearer <token>``. Returns the token."""
    token = login(client, username, password)
    client.headers["Authorization"] = f"Bearer {token}"
    return token


def bearer(token: str) -> dict[str, str]:
    """Headers presenting ``token``."""
    return {"Authorization": f"Bearer {token}"}


def agent_headers(app: Any) -> dict[str, str]:
    """Headers presenting the cluster secret of ``app`` (what agents register with)."""
    return {CLUSTER_SECRET_HEADER: app.state.auth.cluster_secret}


def register_agent(client: Any, app: Any, body: dict[str, Any]) -> dict[str, str]:
    """Register an agent (``POST /api/v1/agents`` with ``body``) as agents do, with the
    cluster secret, and return the headers presenting the credential it was issued
    (what the agent sends on every later call).

    Raises:
        AssertionError: the registration was refused.
    """
    r = client.post("/api/v1/agents", json=body, headers=agent_headers(app))
    assert r.status_code == 200, f"registering agent {body.get('id')} failed: {r.text}"
    return {AGENT_TOKEN_HEADER: r.json()["token"]}


def model_def_tarball(source: bytes = b"print('hello')\n") -> bytes:
    """A gzipped tar holding one file, ``model_def.py`` with ``source``: the smallest
    context directory the master accepts (``POST /api/v1/experiments``'s ``model_definition``).

    The bytes are the same on every call (the gzip header's time stamp is fixed at 0), so a
    test may compare what the master serves back with a fresh call; with the default time
    stamp two calls straddling a second differ in byte 4.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("model_def.py")
        info.size = len(source)
        tar.addfile(info, io.BytesIO(source))
    return gzip.compress(buf.getvalue(), mtime=0)


@dataclass
class LiveMaster:
    """A master application answering on ``url`` (``http://127.0.0.1:<port>``), its
    task services' origin on ``proxy_url`` (``http://127.0.0.1:<other port>``)."""

    url: str
    app: Any
    proxy_url: str = ""


@contextlib.contextmanager
def serve(
    data_dir: str, run_loop: bool = True, start_timeout: float = 60.0, **config: Any
) -> Iterator[LiveMaster]:
    """Serve the real master application (:func:`dauntless.master.app.create_app`) with
    uvicorn in a thread of this process, on a port of 127.0.0.1 the OS picks, until the
    block ends.

    The sockets (the master's and its task proxy origin's, :mod:`dauntless.master.serving`)
    are bound before the application is built (its config names the ports), so no other
    process can take a port in between; this yields once the application's start-up has
    run and both listen.

    Args:
        data_dir: the master's data directory (its SQLite database unless ``db_url``).
        run_loop: run the background scheduling loop.
        start_timeout: seconds to wait for the application's start-up (migration).
        **config: further :class:`~dauntless.config.MasterConfig` fields.

    Raises:
        RuntimeError: the application did not start within ``start_timeout`` seconds, or
            its start-up failed.
    """
    import asyncio

    import uvicorn

    from dauntless.config import MasterConfig
    from dauntless.master import serving
    from dauntless.master.app import create_app

    sock = serving.bind("127.0.0.1", 0)
    proxy_sock = serving.bind("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    proxy_port = int(proxy_sock.getsockname()[1])
    config.setdefault("task_proxy", {"port": proxy_port})
    app = create_app(MasterConfig(data_dir=data_dir, port=port, **config), run_loop=run_loop)
    started = threading.Event()
    failed: list[BaseException] = []

    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))

    def run() -> None:
        try:
            asyncio.run(serving.serve(app, server, proxy_sock, [sock], on_started=started.set))
        except BaseException as exc:  # reported to the caller below
            failed.append(exc)
        finally:
            started.set()  # also when start-up failed (then ``server.started`` is False)

    thread = threading.Thread(target=run, name="live-master", daemon=True)
    thread.start()
    try:
        if not started.wait(start_timeout) or not server.started:
            raise RuntimeError(f"the master did not start: {failed or 'timed out'}")
        yield LiveMaster(
            url=f"http://127.0.0.1:{port}", app=app, proxy_url=f"http://127.0.0.1:{proxy_port}"
        )
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        proxy_sock.close()


#: How long a test waits for the master to do something it is about to do (schedule a
#: trial, reach a state); the waits end as soon as it happens.
DEADLINE = 60.0


def wait_for(what: str, check: Callable[[], T], interval: float = 0.02) -> T:
    """Call ``check()`` until it returns something truthy, and return that: a wait on a
    condition that has no event to wait on (it comes from another process or thread).

    Args:
        what: what is waited for, for the error (``"the trial to start"``).
        check: the condition; called at once, then every ``interval`` seconds.
        interval: seconds between calls (0: call again at once, for a ``check`` that
            itself waits, such as a long poll).

    Raises:
        AssertionError: naming ``what``, when :data:`DEADLINE` seconds pass first.
    """
    end = time.monotonic() + DEADLINE
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(interval)


class Cluster:
    """The real master at ``url``, and its other parties acting through its API.

    ``admin`` is an HTTP client signed in as the built-in administrator; ``agent`` is the
    agents' client: it registers with the cluster secret and then presents each agent's
    own credential (``credentials``), as agents do. The trial-side calls (reports, logs, checkpoints) are
    made as the administrator, whom the master lets make them. ``running`` holds, per
    agent, the allocation ids the agent runs (what its heartbeats report).

    Every call raises AssertionError (naming the request and the answer) when the master
    refuses it, and the waits raise it after :data:`DEADLINE` seconds.

    Args:
        url: the master's base URL (``http://127.0.0.1:<port>``).
        app: its application (for the cluster secret agents present).
    """

    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.admin = httpx.Client(base_url=url, timeout=30)
        sign_in(self.admin)
        self.agent = httpx.Client(base_url=url, timeout=30)
        self.credentials: dict[str, dict[str, str]] = {}
        self.running: dict[str, list[str]] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP clients."""
        self.admin.close()
        self.agent.close()

    def _ok(self, r: httpx.Response) -> Any:
        if r.status_code >= 300:
            raise AssertionError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
        return r.json()

    # -- as the administrator ----------------------------------------------------------

    def create_experiment(self, config: str, context: bool = True, activate: bool = True) -> int:
        """Submit ``config`` (YAML) with a one-file context; the new experiment's id."""
        files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
        r = self.admin.post(
            "/api/v1/experiments",
            data={"config": config, "activate": str(activate).lower()},
            files=files if context else None,
        )
        return int(self._ok(r)["experiment"]["id"])

    def experiment(self, exp_id: int) -> dict[str, Any]:
        """``GET /experiments/{id}``: ``{"experiment": ..., "trials": [...]}``."""
        return dict(self._ok(self.admin.get(f"/api/v1/experiments/{exp_id}")))

    def action(self, exp_id: int, action: str) -> None:
        """``POST /experiments/{id}/{action}`` (``cancel``, ``archive``, ...)."""
        self._ok(self.admin.post(f"/api/v1/experiments/{exp_id}/{action}"))

    def wait_state(self, exp_id: int, *states: str) -> dict[str, Any]:
        """Wait until the experiment is in one of ``states``; its ``GET`` answer."""

        def reached() -> dict[str, Any]:
            body = self.experiment(exp_id)
            return body if body["experiment"]["state"] in states else {}

        return wait_for(f"experiment {exp_id} to reach {states}", reached)

    # -- as an agent -------------------------------------------------------------------

    def register_agent(self, agent_id: str = "agent-0", slots: int = 2) -> None:
        """Register an agent on host ``box`` in the default pool with ``slots`` CPU slots
        (ids ``"0"``, ``"1"``, ...; devices ``cpu0``, ...), running nothing."""
        self.running[agent_id] = []
        answer = self._ok(
            self.agent.post(
                "/api/v1/agents",
                headers=agent_headers(self.app),
                json={
                    "id": agent_id,
                    "hostname": "box",
                    "slots": [
                        {"id": str(i), "type": "cpu", "device": f"cpu{i}"} for i in range(slots)
                    ],
                },
            )
        )
        self.credentials[agent_id] = {AGENT_TOKEN_HEADER: answer["token"]}

    def heartbeat(self, agent_id: str = "agent-0") -> dict[str, Any]:
        """One heartbeat reporting what the agent runs; the master's answer (``start``,
        ``kill``), whose starts the agent then runs."""
        body = self._ok(
            self.agent.post(
                f"/api/v1/agents/{agent_id}/heartbeat",
                json={"running": self.running[agent_id]},
                headers=self.credentials[agent_id],
            )
        )
        self.running[agent_id] += [spec["allocation_id"] for spec in body["start"]]
        return dict(body)

    def start_trials(self, n: int = 1, agent_id: str = "agent-0") -> list[tuple[int, str]]:
        """Heartbeat until the master has started ``n`` trials on the agent: their
        ``(trial id, allocation id)``, in the order they started."""
        started: list[tuple[int, str]] = []

        def enough() -> bool:
            for spec in self.heartbeat(agent_id)["start"]:
                started.append((int(spec["trial_id"]), str(spec["allocation_id"])))
            return len(started) >= n

        wait_for(f"{n} trial(s) to start on {agent_id}", enough)
        return started

    def wait_preempted(self, alloc: str) -> None:
        """Wait, as a trial that checks for it, until the master signals ``alloc`` to stop
        (the preemption long poll answers true: a pause, cancel or preemption)."""

        def signalled() -> bool:
            r = self.admin.get(
                f"/api/v1/allocations/{alloc}/signals/preemption", params={"timeout_seconds": 5}
            )
            return bool(self._ok(r)["preempt"])

        wait_for(f"the master to signal {alloc} to stop", signalled, interval=0)

    def exited(self, alloc: str, code: int, agent_id: str = "agent-0") -> None:
        """Report, as the agent, that ``alloc``'s process exited with ``code``."""
        self._ok(
            self.agent.post(
                f"/api/v1/allocations/{alloc}/exited",
                json={"exit_code": code},
                headers=self.credentials[agent_id],
            )
        )
        self.running[agent_id].remove(alloc)

    # -- as a trial --------------------------------------------------------------------

    def report(self, trial_id: int, group: str, batches: int, metrics: dict[str, Any]) -> None:
        """Report ``metrics`` of ``group`` (``training``/``validation``) after ``batches``
        batches, as the trial's first run."""
        self._ok(
            self.admin.post(
                f"/api/v1/trials/{trial_id}/metrics",
                json={
                    "group": group,
                    "steps_completed": batches,
                    "trial_run_id": 1,
                    "metrics": metrics,
                },
            )
        )

    def log(self, alloc: str, *lines: str, rank_id: int | None = 0) -> None:
        """Ship ``lines`` of ``alloc``'s stdout (of rank ``rank_id``; None: no rank)."""
        self._ok(
            self.admin.post(
                "/api/v1/task/logs",
                json={
                    "logs": [{"allocation_id": alloc, "log": x, "rank_id": rank_id} for x in lines]
                },
            )
        )

    def checkpoint(self, trial_id: int, alloc: str, uuid: str, batches: int, **fields: Any) -> None:
        """Report checkpoint ``uuid`` taken after ``batches`` batches; ``fields`` adds
        ``resources`` (``{path: bytes}``) and ``metadata``."""
        self._ok(
            self.admin.post(
                "/api/v1/checkpoints",
                json={
                    "uuid": uuid,
                    "trial_id": trial_id,
                    "allocation_id": alloc,
                    "steps_completed": batches,
                    **fields,
                },
            )
        )

    def complete(self, trial_id: int, length: int, metric: float) -> None:
        """Tell the searcher the trial trained to ``length`` batches, with its searcher
        ``metric``."""
        self._ok(
            self.admin.post(
                f"/api/v1/trials/{trial_id}/searcher/completed_operation",
                json={"op": {"length": length}, "searcher_metric": metric},
            )
        )
