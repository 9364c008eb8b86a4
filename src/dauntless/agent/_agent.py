"""The agent: registers with the master, heartbeats, runs tasks as processes, ships their
output as logs and reports their exit codes.

The agent is stateless (ARCHITECTURE.md): everything it runs was handed to it by the
master in a heartbeat answer, and after a restart it registers anew; the master then
treats what it ran before as lost.
"""

from __future__ import annotations

import io
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from dauntless._auth import CLUSTER_SECRET_ENV, CLUSTER_SECRET_HEADER
from dauntless._tls import (
    CERT_FILE_ENV,
    NO_VERIFY,
    describe_cert_error,
    is_cert_verify_error,
    make_verify,
)
from dauntless.config import AgentConfig
from dauntless.config._experiment import ENTRYPOINT_CLASS_RE

from ._logs import LogShipper
from ._slots import Slot, discover_slots

log = logging.getLogger("dauntless.agent")

KILL_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when the master orders a task killed."""


@dataclass
class _Task:
    allocation_id: str
    proc: subprocess.Popen
    work_dir: str
    readers: list[threading.Thread] = field(default_factory=list)
    kill_sent_at: float | None = None


def task_command(entrypoint: str | list[str]) -> list[str]:
    """The argv that runs an entrypoint.

    ``module:Class`` runs the PyTorchTrial harness with this Python; a string runs through
    ``sh -c``; a list is the argv itself.

    Raises:
        ValueError: an empty entrypoint.
    """
    if isinstance(entrypoint, list):
        if not entrypoint:
            raise ValueError("entrypoint must not be an empty list")
        return [str(x) for x in entrypoint]
    if not entrypoint.strip():
        raise ValueError("entrypoint must not be empty")
    if ENTRYPOINT_CLASS_RE.match(entrypoint):
        return [sys.executable, "-m", "dauntless.exec.harness"]
    return ["sh", "-c", entrypoint]


def launched_command(entrypoint: str | list[str]) -> list[str]:
    """The argv the agent starts: :func:`task_command` under the rank launcher
    (:mod:`dauntless.launch.torch_distributed`), which execs it directly for one rank."""
    return [sys.executable, "-m", "dauntless.launch.torch_distributed", "--",
            *task_command(entrypoint)]


def advertise_address(master_url: str) -> str:
    """The address of this host that the master (and so other agents) can reach: the
    source address of a route to the master; 127.0.0.1 for a master on loopback."""
    host = httpx.URL(master_url).host or "127.0.0.1"
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # no packet is sent for a UDP connect
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _safe_extract(data: bytes, dest: str) -> None:
    """Unpack a gzipped tar into ``dest``, refusing links and paths that leave it."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")


class Agent:
    """One agent process.

    Args:
        config: the agent config.
        client: an httpx client for the master (tests may hand their own); built from
            ``config.master_url`` (verifying TLS with ``config.master_cert_file``) when None.

    Raises:
        ValueError: when ``config.master_cert_file`` names no readable CA bundle.
    """

    def __init__(self, config: AgentConfig, client: httpx.Client | None = None) -> None:
        self.config = config
        self.agent_id = config.agent_id or socket.gethostname()
        verify = make_verify(config.master_cert_file)  # ValueError: no such CA bundle
        self.client = client or httpx.Client(
            base_url=config.master_url.rstrip("/"),
            timeout=httpx.Timeout(30.0, connect=5.0),
            transport=httpx.HTTPTransport(retries=2, verify=verify),
        )
        if config.cluster_secret is not None:  # every call to the master carries it
            self.client.headers[CLUSTER_SECRET_HEADER] = config.cluster_secret.get_secret_value()
        self.slots: list[Slot] = discover_slots(
            config.slot_type, config.artificial_slots, config.visible_gpus
        )
        self.tasks: dict[str, _Task] = {}
        self.pending_exits: dict[str, tuple[int | None, str | None]] = {}
        self.shipper = LogShipper(self.client)
        self.registered = False
        self.advertise_addr = config.advertise_addr or advertise_address(config.master_url)
        os.makedirs(config.work_dir, exist_ok=True)

    # ------------------------------------------------------------------ master calls

    def register(self) -> None:
        """Announce this agent and its slots to the master.

        Raises:
            httpx.HTTPError: the master is unreachable or refused (4xx names why).
        """
        body = {
            "id": self.agent_id,
            "resource_pool": self.config.resource_pool,
            "hostname": socket.gethostname(),
            "slots": [s.to_json() for s in self.slots],
        }
        r = self.client.post("/api/v1/agents", json=body)
        if r.status_code == 400:
            raise RuntimeError(f"the master refused this agent: {r.json().get('detail')}")
        r.raise_for_status()
        self.registered = True
        log.info("registered as %s with %d slot(s)", self.agent_id, len(self.slots))

    def run_once(self) -> None:
        """One cycle: reap exited tasks, report exits, heartbeat, start and kill tasks.

        Raises:
            httpx.HTTPError: the master could not be reached (the caller backs off).
        """
        self._reap()
        self._flush_exits()
        if not self.registered:
            self.register()
        r = self.client.post(
            f"/api/v1/agents/{self.agent_id}/heartbeat",
            json={"running": sorted(self.tasks)},
        )
        if r.status_code == 404:
            self.registered = False
            self.register()
            return
        r.raise_for_status()
        work = r.json()
        for alloc_id in work.get("kill", []):
            self._kill(alloc_id)
        for spec in work.get("start", []):
            self._start(spec)

    def run(self, stop: threading.Event) -> None:
        """Loop :meth:`run_once` until ``stop`` is set.

        Connection failures back off exponentially (0.5 s doubling to 10 s, with jitter)
        and never end the loop: the master may be restarting. This loop is the agent's
        fault tolerance, so it is written here rather than taken from a retry library.
        """
        self.shipper.start()
        backoff = 0.5
        try:
            while not stop.is_set():
                try:
                    self.run_once()
                    backoff = 0.5
                    stop.wait(self.config.heartbeat_interval)
                except (httpx.HTTPError, OSError) as exc:
                    if is_cert_verify_error(exc):
                        log.error("%s; retrying in %.1f s",
                                  describe_cert_error(self.config.master_url, exc,
                                                      "--master-cert-file PATH"), backoff)
                    else:
                        log.warning("master unreachable (%s); retrying in %.1f s", exc, backoff)
                    stop.wait(backoff * (0.8 + 0.4 * random.random()))
                    backoff = min(backoff * 2, 10.0)
                    self.registered = self.registered and not isinstance(exc, httpx.ConnectError)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Kill every task, report the exits if the master is reachable, stop shipping."""
        for alloc_id in list(self.tasks):
            self._kill(alloc_id, grace=3.0)
        deadline = time.time() + 5
        while self.tasks and time.time() < deadline:
            self._reap()
            time.sleep(0.05)
        try:
            self._flush_exits()
        except (httpx.HTTPError, OSError):
            log.warning("could not report %d task exit(s) at shutdown", len(self.pending_exits))
        self.shipper.stop()

    # ------------------------------------------------------------------ tasks

    def _start(self, spec: dict[str, Any]) -> None:
        alloc_id = spec["allocation_id"]
        if alloc_id in self.tasks:
            return
        work_dir = os.path.join(self.config.work_dir, alloc_id)
        try:
            shutil.rmtree(work_dir, ignore_errors=True)
            os.makedirs(work_dir)
            if spec.get("context_url"):
                r = self.client.get(spec["context_url"])
                if r.status_code != 404:
                    r.raise_for_status()
                    _safe_extract(r.content, work_dir)
            argv = launched_command(spec["entrypoint"])
        except (httpx.HTTPError, OSError, tarfile.TarError, ValueError) as exc:
            msg = f"could not prepare task {alloc_id}: {exc}"
            log.error(msg)
            self.shipper.add(alloc_id, "stderr", msg)
            self.pending_exits[alloc_id] = (None, msg)
            return
        env = dict(os.environ)
        env.pop(CLUSTER_SECRET_ENV, None)  # the agent's credential never reaches a task
        env.update({k: str(v) for k, v in spec.get("env", {}).items()})
        bin_dir = os.path.dirname(sys.executable)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        env["DET_ADVERTISE_ADDR"] = self.advertise_addr
        if self.config.master_cert_file:  # trials verify the master as the agent does
            cert = self.config.master_cert_file
            env[CERT_FILE_ENV] = cert if cert == NO_VERIFY else os.path.abspath(cert)
        slot_types = {sl.id: sl.type for sl in self.slots}
        cuda = [sid for sid in spec.get("slot_ids", []) if slot_types.get(str(sid)) == "cuda"]
        if cuda:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(x) for x in cuda)
        elif any(sl.type == "cuda" for sl in self.slots):
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU task on a GPU agent sees no GPU
        env["PYTHONPATH"] = work_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            launch = [sys.executable, "-m", "dauntless.agent._launch", str(os.getpid()), "--"]
            proc = subprocess.Popen(
                launch + argv, cwd=work_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            msg = f"could not start {argv}: {exc}"
            self.shipper.add(alloc_id, "stderr", msg)
            self.pending_exits[alloc_id] = (None, msg)
            return
        task = _Task(alloc_id, proc, work_dir)
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            t = threading.Thread(
                target=self.shipper.pump, args=(alloc_id, name, stream), daemon=True,
                name=f"logs-{alloc_id[:8]}-{name}",
            )
            t.start()
            task.readers.append(t)
        self.tasks[alloc_id] = task
        log.info("started task %s (trial %s): %s", alloc_id, spec.get("trial_id"), " ".join(argv))

    def _kill(self, alloc_id: str, grace: float = KILL_GRACE_SECONDS) -> None:
        task = self.tasks.get(alloc_id)
        if task is None:
            return
        now = time.time()
        try:
            if task.kill_sent_at is None:
                os.killpg(task.proc.pid, signal.SIGTERM)
                task.kill_sent_at = now
            elif now - task.kill_sent_at > grace:
                os.killpg(task.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        for alloc_id, task in list(self.tasks.items()):
            code = task.proc.poll()
            if code is None:
                if task.kill_sent_at is not None:
                    self._kill(alloc_id)
                continue
            for t in task.readers:
                t.join(timeout=5)
            del self.tasks[alloc_id]
            self.pending_exits[alloc_id] = (code, None if code == 0 else f"exit code {code}")
            log.info("task %s exited with %s", alloc_id, code)

    def _flush_exits(self) -> None:
        if self.pending_exits:
            self.shipper.flush()
        for alloc_id, (code, msg) in list(self.pending_exits.items()):
            r = self.client.post(
                f"/api/v1/allocations/{alloc_id}/exited", json={"exit_code": code, "message": msg}
            )
            if r.status_code not in (200, 404):
                r.raise_for_status()
            del self.pending_exits[alloc_id]
