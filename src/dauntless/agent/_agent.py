"""The agent: registers with the master, heartbeats, runs tasks as processes, ships their
output as logs and reports their exit codes.

Everything the agent runs was handed to it by the master in a heartbeat answer. When the
master goes away the agent keeps its tasks running and retries; when the master answers
again (re-)registering lists the tasks it still runs, and the master adopts those it
knows and orders the others killed.

Each task runs under a supervisor of its own (:mod:`dauntless.agent._shim`; a
warm-started trial's is forked by the warm worker) that outlives the agent: an agent process started again
on the same work dir within ``orphan_grace_period`` adopts the tasks its predecessor
left (their state directories, :mod:`dauntless.agent._supervise`): it lists them when it
registers, ships their output on from where the last agent stopped and reports their
exits. A task whose agent stays away longer is ended whole by its supervisor. Tasks of
another Unix identity than the agent's run isolated (:mod:`dauntless.agent._identity`).

An agent cut off from its master for most of the master's ``agent_timeout`` kills its
tasks itself before the master restarts them elsewhere (:mod:`dauntless.agent._fence`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import signal
import socket
import sys
import tarfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import httpx

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_ENV, CLUSTER_SECRET_HEADER
from dauntless._http import RetryPolicy
from dauntless._tls import (
    CERT_FILE_ENV,
    NO_VERIFY,
    describe_cert_error,
    is_cert_verify_error,
    make_verify,
)
from dauntless.compat import SHIM_PATH as COMPAT_SHIM_PATH
from dauntless.config import AgentConfig, TaskIdentity
from dauntless.config._experiment import ENTRYPOINT_CLASS_RE

from ._fence import FENCE_FRACTION, Fence, connection_refused, master_accepts
from ._identity import (
    AgentIdentity,
    TaskUser,
    give,
    move_secrets,
    plan_task_user,
    prepare_work_root,
    private_dir,
    private_dir_path,
)
from ._logs import LogShipper
from ._prom import AgentUsage, serve_metrics
from ._slots import Slot, discover_slots
from ._supervise import ShimHandle, adoptable, state_dir
from ._taskmetrics import TaskSampler
from ._warm import WarmStarter
from .runtimes import EnvironmentSpec, PrepareError, RuntimeSet, TaskLaunch, select_runtimes
from .runtimes.base import Runtime, TaskHandle

log = logging.getLogger("dauntless.agent")

MAX_BEAT_HOLD_SECONDS = 10.0
"""The longest an idle agent asks the master to hold a heartbeat (its ``wait_seconds``):
well under the client's 30 s read timeout and the master's own bound (30 s)."""

KILL_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when the master orders a task killed."""

CONTEXT_CACHE_BYTES = 64 * 1024 * 1024
"""Bytes of experiment contexts (gzipped tars) an agent keeps in memory, by SHA-256, so
that the trials of a search after the first need no download (issue 19)."""


@dataclass
class _Task:
    allocation_id: str
    proc: TaskHandle | None  # None while the runtime prepares it
    work_dir: str
    readers: list[threading.Thread] = field(default_factory=list)
    kill_sent_at: float | None = None
    # --- runtimes (issue 23): set by the preparing thread
    runtime: Runtime | None = None
    term_sent: bool = False
    prepare_exit: tuple[int | None, str | None, bool] | None = None
    # --- identity (issue 29): the task's own directory (secret files, a home)
    private: str | None = None
    # --- the slots its spec named (issue 34: the agent's slot usage metric)
    slot_ids: tuple[str, ...] = ()


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
    """The argv the agent starts, once per node (agent) of an allocation.

    As in Determined 0.38, a ``module:Class`` entrypoint runs under the rank launcher
    (:mod:`dauntless.launch.torch_distributed`, which starts one harness per slot, or
    execs it directly for one rank); any other entrypoint runs once per node as it is,
    and a script that wants one process per slot names the launcher itself
    (``python3 -m dauntless.launch.torch_distributed -- python3 train.py``).
    """
    command = task_command(entrypoint)
    if isinstance(entrypoint, str) and ENTRYPOINT_CLASS_RE.match(entrypoint):
        return [sys.executable, "-m", "dauntless.launch.torch_distributed", "--", *command]
    return command


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
        # The cluster secret registers this agent (and registers it again after a
        # restart of either side); every other call carries the credential the
        # registration returned (issue 29).
        self._secret = config.cluster_secret
        self.slots: list[Slot] = discover_slots(
            config.slot_type, config.artificial_slots, config.visible_gpus
        )
        # Who this agent runs as, and whether it can run tasks as others (issue 29).
        self.identity = AgentIdentity.probe()
        prepare_work_root(config.work_dir, self.identity)
        # How tasks run (issue 23); RuntimeError: an asked-for engine does not answer.
        self.runtimes: RuntimeSet = select_runtimes(config.runtime, config.work_dir, self.agent_id)
        self._task_lock = threading.Lock()
        self.tasks: dict[str, _Task] = {}
        # allocation id -> (exit code, message, fatal: not worth a restart)
        self.pending_exits: dict[str, tuple[int | None, str | None, bool]] = {}
        self.shipper = LogShipper(self.client)
        self.task_sampler = TaskSampler()
        self.registered = False
        # When to end the tasks of an agent cut off from its master (issue 36).
        self.fence = Fence()
        self._fence_messages: dict[str, str] = {}
        self.advertise_addr = config.advertise_addr or advertise_address(config.master_url)
        #: ``host:port`` of this agent's Prometheus page once it serves one (issue 34).
        self.prometheus_target: str | None = None
        os.makedirs(config.work_dir, exist_ok=True)
        # Set when a task exits: the loop reports it and fetches new work at once.
        self.wake = threading.Event()
        # Contexts by the SHA-256 their TaskSpecs name (least recently used first).
        self._contexts: OrderedDict[str, bytes] = OrderedDict()
        self._contexts_lock = threading.Lock()
        self.warm: WarmStarter | None = None
        if config.warm_start:
            self.warm = WarmStarter(
                os.path.join(config.work_dir, "forkserver.sock"), self._base_env(), os.getpid()
            )
            self.runtimes.process.warm = self.warm

    # ------------------------------------------------------------------ master calls

    def register(self) -> None:
        """Announce this agent and its slots to the master.

        Raises:
            httpx.HTTPError: the master is unreachable or refused (4xx names why).
        """
        body: dict[str, Any] = {
            "id": self.agent_id,
            "resource_pool": self.config.resource_pool,
            "hostname": socket.gethostname(),
            "slots": [s.to_json() for s in self.slots],
            # What still runs here: the master adopts the allocations it knows.
            # Exits not reported yet too: adopted, then reported with the real code.
            "running": sorted(set(self.tasks) | set(self.pending_exits)),
            "runtime": {**self.runtimes.describe(), "identity": self.identity.describe()},
        }
        if self.prometheus_target is not None:
            body["runtime"]["prometheus_target"] = self.prometheus_target
        headers = {}
        if self._secret is not None:
            headers[CLUSTER_SECRET_HEADER] = self._secret.get_secret_value()
        sent = self.fence.now()
        r = self.client.post("/api/v1/agents", json=body, headers=headers)
        if r.status_code == 400:
            raise RuntimeError(f"the master refused this agent: {r.json().get('detail')}")
        r.raise_for_status()
        self.fence.answered(sent, r.json().get("agent_timeout"))
        token = r.json().get("token")
        if token:
            self.client.headers[AGENT_TOKEN_HEADER] = token
        self.registered = True
        log.info("registered as %s with %d slot(s)", self.agent_id, len(self.slots))

    def run_once(self, hold: float = 0.0) -> float:
        """One cycle: reap exited tasks, report exits, heartbeat, start and kill tasks.

        Args:
            hold: seconds the master may hold the heartbeat as a long poll when this
                agent runs no task and reports no exit (issue 37: work placed on an
                idle agent then reaches it at once instead of at its next beat); it is
                asked for only then, as an exit must not wait behind a held beat. At
                most :data:`MAX_BEAT_HOLD_SECONDS`.

        Returns:
            The seconds of hold asked for (0.0 when none was).

        Raises:
            httpx.HTTPError: the master could not be reached (the caller backs off).
        """
        self._reap()
        if self.warm is not None:
            self.warm.restart_if_dead()
        if not self.registered:
            self.register()
        body: dict[str, Any] = {"running": sorted(self.tasks)}
        if self.task_sampler.due():  # issue 34: each task's CPU and memory, every 10 s
            roots = {a: t.proc.pid for a, t in list(self.tasks.items()) if t.proc is not None}
            body["resources"] = self.task_sampler.sample({a: p for a, p in roots.items() if p > 0})
        exits = dict(self.pending_exits)
        if exits:
            # The exits ride on the heartbeat (one request, and its answer already
            # holds the work the freed slots got); the lines the tasks printed last
            # are stored first, as the master records failures with their last line.
            self.shipper.flush()
            body["exited"] = [
                {"allocation_id": alloc_id, "exit_code": code, "message": msg, "fatal": fatal}
                for alloc_id, (code, msg, fatal) in exits.items()
            ]
        held = min(hold, MAX_BEAT_HOLD_SECONDS) if not self.tasks and not exits else 0.0
        params = {"wait_seconds": f"{held:g}"} if held > 0 else None
        sent = self.fence.now()
        r = self.client.post(f"/api/v1/agents/{self.agent_id}/heartbeat", json=body, params=params)
        # 404: the master does not know this agent; 401: not its credential (a later
        # registration of this id replaced it). The exits stay pending: sent after.
        if r.status_code in (401, 404):
            self.registered = False
            self.register()
            return held
        r.raise_for_status()
        for alloc_id in exits:
            self.pending_exits.pop(alloc_id, None)
        work = r.json()
        self.fence.answered(sent, work.get("agent_timeout"))
        for alloc_id in work.get("kill", []):
            self._kill(alloc_id)
        for spec in work.get("start", []):
            self._start(spec)
        return held

    def run(self, stop: threading.Event) -> None:
        """Loop :meth:`run_once` until ``stop`` is set.

        Connection failures back off by the clients' one retry policy
        (:class:`dauntless._http.RetryPolicy`: 0.5 s doubling to 10 s, with jitter),
        shortened near the fence (:meth:`Fence.retry_delay`), and never end the loop:
        the master may be restarting.
        """
        self.shipper.start()
        if self.warm is not None:  # from this thread: the server dies when it ends
            self.warm.start()
        adopted = self.adopt()
        for rt in self.runtimes.all():  # containers an earlier run of this agent left
            for cid in rt.cleanup_orphans(self.agent_id, frozenset(adopted)):
                log.info("removed container %s left by an earlier run of this agent", cid)
        policy = RetryPolicy(attempts=None, backoff=0.5, max_backoff=10.0)
        failures = 0
        stop_metrics = None
        if self.config.prometheus_port is not None:
            port, stop_metrics = serve_metrics(
                self.agent_id,
                self.usage,
                self.config.prometheus_host,
                self.config.prometheus_port,
            )
            host = self.config.prometheus_host
            if host in ("0.0.0.0", "::", ""):  # every address: the one the master sees
                host = self.advertise_addr
            self.prometheus_target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        watchdog = threading.Thread(
            target=self._watch_fence, args=(stop,), daemon=True, name="fence"
        )
        watchdog.start()
        try:
            while not stop.is_set():
                try:
                    interval = self.config.heartbeat_interval
                    began = time.monotonic()
                    if self.run_once(hold=interval) > 0:
                        # A held beat took the interval's place; a master that does
                        # not hold (an older one) answered at once: wait the rest.
                        interval -= time.monotonic() - began
                    elif not self.tasks and not self.pending_exits:
                        # Idle now (its last task's exit was just reported): the
                        # next beat is held at once instead of after an interval.
                        interval = 0.0
                    failures = 0
                    if interval > 0:
                        self.wake.wait(interval)
                    self.wake.clear()
                except (httpx.HTTPError, OSError) as exc:
                    failures += 1
                    if connection_refused(exc):
                        self.fence.refused()  # the master is down, not cut off
                    backoff = self.fence.retry_delay(policy.delay(failures))
                    if is_cert_verify_error(exc):
                        log.error(
                            "%s; retrying in %.1f s",
                            describe_cert_error(
                                self.config.master_url, exc, "--master-cert-file PATH"
                            ),
                            backoff,
                        )
                    else:
                        log.warning("master unreachable (%s); retrying in %.1f s", exc, backoff)
                    stop.wait(backoff)
                    # Still registered: a master that restarted knows this agent from its
                    # database, and one that does not answers the heartbeat 404, upon
                    # which register() reports the running tasks for adoption.
        finally:
            if stop_metrics is not None:
                stop_metrics()
            self.shutdown()

    def usage(self) -> AgentUsage:
        """Slots offered and held and tasks run, now (the agent's Prometheus metrics)."""
        types = {sl.id: sl.type for sl in self.slots}
        slots: dict[str, int] = {}
        for sl in self.slots:
            slots[sl.type] = slots.get(sl.type, 0) + 1
        used: dict[str, int] = {}
        tasks = list(self.tasks.values())
        for task in tasks:
            for sid in task.slot_ids:
                typ = types.get(sid, "cpu")
                used[typ] = used.get(typ, 0) + 1
        return AgentUsage(slots, used, len(tasks))

    def _watch_fence(self, stop: threading.Event, period: float = 0.2) -> None:
        """Check the fence every ``period`` seconds until ``stop`` (a thread of its own:
        a heartbeat may hang for its whole timeout in a partition). While the master is
        silent, probe whether its host accepts connections: one that does is busy or
        stopped, not cut off (:mod:`dauntless.agent._fence`)."""
        said_at = float("-inf")  # the probe's warning: at most once a minute
        while not stop.wait(period):
            timeout = self.fence.probe_timeout()
            if timeout is not None and master_accepts(self.config.master_url, timeout):
                if time.monotonic() - said_at >= 60.0:
                    said_at = time.monotonic()
                    log.warning(
                        "the master has not answered for %.0f s but accepts connections: "
                        "it is busy or stopped, not cut off; the tasks keep running",
                        self.fence.silent_for(),
                    )
                self.fence.reachable()
            if self.fence.due():
                self.fence_tasks()

    def fence_tasks(self) -> None:
        """End every task at once (SIGKILL through its supervisor): this agent has been
        cut off from its master for so long that the master is about to declare it lost
        and restart its trials elsewhere (:mod:`dauntless.agent._fence`). The exits are
        reported when the master answers again."""
        silent = self.fence.silent_for()
        message = (
            f"agent {self.agent_id} had no answer from the master for {silent:.0f} s "
            f"({FENCE_FRACTION:g} of its agent_timeout of {self.fence.agent_timeout:g} s): "
            "the task was ended so that it never runs twice at once"
        )
        tasks = list(self.tasks.items())
        if tasks:
            log.warning("%s (%d task(s))", message, len(tasks))
        for alloc_id, task in tasks:
            self._fence_messages[alloc_id] = message
            with self._task_lock:
                if task.kill_sent_at is None:
                    task.kill_sent_at = time.time()
                task.term_sent = True
                handle, runtime = task.proc, task.runtime
            if handle is not None and runtime is not None:
                runtime.signal(handle, signal.SIGKILL)

    def shutdown(self) -> None:
        """Kill every task (SIGTERM, SIGKILL after 3 s), report the exits if the master
        is reachable, stop shipping. A stopped agent leaves nothing running: its tasks'
        supervisors end with them."""
        for alloc_id in list(self.tasks):
            self._kill(alloc_id, grace=3.0)
        deadline = time.time() + 3
        while self.tasks and time.time() < deadline:
            self._reap()
            time.sleep(0.05)
        for task in list(self.tasks.values()):
            if task.proc is not None and task.runtime is not None:
                task.runtime.signal(task.proc, signal.SIGKILL)
        deadline = time.time() + 5
        while self.tasks and time.time() < deadline:
            self._reap()
            time.sleep(0.05)
        try:
            self._flush_exits()
        except (httpx.HTTPError, OSError):
            log.warning("could not report %d task exit(s) at shutdown", len(self.pending_exits))
        self.shipper.stop()
        if self.warm is not None:
            self.warm.stop()

    # ------------------------------------------------------------------ tasks

    def _start(self, spec: dict[str, Any]) -> None:
        """Take a TaskSpec: the context download, the runtime's prepare (an image pull,
        a Python environment build) and the start run in a thread, so heartbeats go on;
        the task counts as running meanwhile."""
        alloc_id = spec["allocation_id"]
        if alloc_id in self.tasks:
            return
        work_dir = os.path.join(self.config.work_dir, alloc_id)
        task = _Task(alloc_id, None, work_dir)
        task.slot_ids = tuple(str(x) for x in spec.get("slot_ids", []))
        self.tasks[alloc_id] = task
        threading.Thread(
            target=self._prepare_and_start,
            args=(spec, task),
            daemon=True,
            name=f"prepare-{alloc_id[:8]}",
        ).start()

    def _prepare_and_start(self, spec: dict[str, Any], task: _Task) -> None:
        alloc_id, work_dir = task.allocation_id, task.work_dir

        def task_log(stdtype: str, line: str) -> None:
            self.shipper.add(alloc_id, stdtype, line)

        try:
            user = self._task_user(spec)
            shutil.rmtree(work_dir, ignore_errors=True)
            os.makedirs(work_dir)
            os.chmod(work_dir, 0o700)  # the task's own (other identities cannot read it)
            if spec.get("context_url"):
                context = self._context(spec)
                if context is not None:
                    _safe_extract(context, work_dir)
            if user is not None and user.isolate:
                give(work_dir, user)
            if spec.get("task_type", "TRIAL") == "TRIAL":
                argv = launched_command(spec["entrypoint"])
            else:  # a command, notebook, shell or TensorBoard: no rank launcher
                argv = task_command(spec["entrypoint"])
            cwd = spec.get("work_dir") or work_dir
            if not os.path.isdir(cwd):
                raise ValueError(f"work_dir {cwd!r} is not a directory on agent {self.agent_id}")
            task.private = private_dir(self.config.work_dir, alloc_id, user)
            launch = self._task_launch(spec, argv, work_dir, user, task.private)
            launch.cwd = cwd
            runtime = self.runtimes.for_task(launch.environment)
            task.runtime = runtime
            runtime.prepare(launch, task_log)
        except PrepareError as exc:
            log.error("task %s cannot start: %s", alloc_id, exc.message.splitlines()[0])
            for line in exc.message.splitlines():
                task_log("stderr", line)
            task.prepare_exit = (exc.exit_code, exc.message, exc.fatal)
            return
        except (httpx.HTTPError, OSError, tarfile.TarError, ValueError) as exc:
            msg = f"could not prepare task {alloc_id}: {exc}"
            log.error(msg)
            task_log("stderr", msg)
            task.prepare_exit = (None, msg, False)
            return
        except Exception as exc:  # a bug must end the task, not leave it "running"
            log.exception("preparing task %s failed", alloc_id)
            task.prepare_exit = (None, f"could not prepare task {alloc_id}: {exc!r}", False)
            return
        with self._task_lock:
            if task.kill_sent_at is not None:
                task.prepare_exit = (None, "killed before it started", False)
                return
            try:
                handle = runtime.start(launch)
            except OSError as exc:
                msg = f"could not start {argv}: {exc}"
                task_log("stderr", msg)
                task.prepare_exit = (None, msg, False)
                return
            if isinstance(handle, ShimHandle):  # this thread follows its output
                # Its lines are numbered after those of the preparation (an environment
                # build's): recorded now, so that an agent that adopts the task before
                # any of them is acknowledged numbers them the same.
                handle.record_shipped(self.shipper.follow(alloc_id, handle.record_shipped), 0)
                task.readers.append(threading.current_thread())
            for name, stream in runtime.logs(handle):
                t = threading.Thread(
                    target=self.shipper.pump,
                    args=(alloc_id, name, stream),
                    daemon=True,
                    name=f"logs-{alloc_id[:8]}-{name}",
                )
                t.start()
                task.readers.append(t)
            task.proc = handle
        log.info(
            "started task %s (%s %s, %s runtime%s%s): %s",
            alloc_id,
            spec.get("task_type", "TRIAL").lower(),
            spec.get("trial_id") or spec.get("task_id"),
            runtime.name,
            ", warm" if getattr(handle, "warm", False) else "",
            f", isolated as uid {user.identity.uid}" if user is not None and user.isolate else "",
            " ".join(argv),
        )
        if isinstance(handle, ShimHandle):
            self._follow(alloc_id, handle, 0)
        else:
            # A warm trial: the fork server forked it; the exit arrives on its socket.
            runtime.wait(handle, None)
        self.wake.set()

    def _follow(self, alloc_id: str, handle: ShimHandle, offset: int) -> None:
        """Ship a task's output from its output file (from byte ``offset``) until it
        has ended; then wake the loop to report the exit."""
        try:
            for pos, stdtype, line in handle.lines(offset):
                self.shipper.add(alloc_id, stdtype, line, pos)
        except OSError as exc:  # its state directory was removed under it
            log.warning("stopped following the output of task %s: %s", alloc_id, exc)
        self.wake.set()

    def _task_user(self, spec: dict[str, Any]) -> TaskUser | None:
        """How the TaskSpec's ``identity`` runs here (None: as the agent).

        Raises:
            PrepareError: (fatal) a malformed identity, or one this agent cannot take.
        """
        raw = spec.get("identity")
        if raw is None:
            return None
        try:
            identity = TaskIdentity.from_json(raw)
        except ValueError as exc:
            raise PrepareError(f"malformed task identity: {exc}", fatal=True) from None
        return plan_task_user(identity, self.identity)

    def adopt(self) -> list[str]:
        """Take over the tasks an earlier run of this agent left under its work dir
        (their supervisors still run, or recorded the exit): follow their output from
        where the last agent stopped, and report them as running at registration.

        Returns:
            Their allocation ids.
        """
        ids = []
        for meta, handle in adoptable(self.config.work_dir):
            alloc_id = str(meta["allocation_id"])
            container = self.runtimes.container
            runtime: Runtime = (
                container
                if container is not None and meta.get("runtime") == container.name
                else self.runtimes.process
            )
            task = _Task(alloc_id, handle, os.path.join(self.config.work_dir, alloc_id))
            task.runtime = runtime
            task.private = private_dir_path(self.config.work_dir, alloc_id)
            seq, offset = handle.shipped()
            self.shipper.follow(alloc_id, handle.record_shipped, seq)
            t = threading.Thread(
                target=self._follow,
                args=(alloc_id, handle, offset),
                daemon=True,
                name=f"logs-{alloc_id[:8]}",
            )
            task.readers.append(t)
            self.tasks[alloc_id] = task
            t.start()
            log.info(
                "adopted task %s from an earlier run of this agent (%s)",
                alloc_id,
                "still running" if handle.poll() is None else "ended meanwhile",
            )
            ids.append(alloc_id)
        return ids

    def _context(self, spec: dict[str, Any]) -> bytes | None:
        """A TaskSpec's context (gzipped tar bytes), None when the experiment has none.

        Kept in memory by the ``context_sha256`` the spec names (up to
        :data:`CONTEXT_CACHE_BYTES`, least recently used dropped first); downloaded
        from ``context_url`` when not kept, and kept only when the download has that
        digest.

        Raises:
            httpx.HTTPError: the download failed.
        """
        digest = spec.get("context_sha256") or None
        if digest is not None:
            with self._contexts_lock:
                data = self._contexts.get(digest)
                if data is not None:
                    self._contexts.move_to_end(digest)
                    return data
        r = self.client.get(spec["context_url"])
        if r.status_code == 404:
            return None
        r.raise_for_status()
        data = r.content
        if (
            digest is not None
            and len(data) <= CONTEXT_CACHE_BYTES
            and hashlib.sha256(data).hexdigest() == digest
        ):
            with self._contexts_lock:
                self._contexts[digest] = data
                while sum(len(v) for v in self._contexts.values()) > CONTEXT_CACHE_BYTES:
                    self._contexts.popitem(last=False)
        return data

    @staticmethod
    def _base_env() -> dict[str, str]:
        """The agent's variables as its tasks (and its warm worker) start with them."""
        env = dict(os.environ)
        env.pop(CLUSTER_SECRET_ENV, None)  # the agent's credential never reaches a task
        bin_dir = os.path.dirname(sys.executable)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _task_launch(
        self,
        spec: dict[str, Any],
        argv: list[str],
        work_dir: str,
        user: TaskUser | None = None,
        private: str | None = None,
    ) -> TaskLaunch:
        """The :class:`TaskLaunch` of a TaskSpec: its variables on top of the agent's,
        its secrets moved to files in ``private`` (the task's own directory)."""
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
        slot_ids = [str(x) for x in spec.get("slot_ids", [])]
        cuda = [sid for sid in slot_ids if slot_types.get(sid) == "cuda"]
        if cuda:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(cuda)
        elif any(sl.type == "cuda" for sl in self.slots):
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU task on a GPU agent sees no GPU
        # The work dir, then the `determined` compatibility package (never installed in
        # site-packages: dauntless.compat). Trials need it for Determined model code; a
        # command's or notebook's Python gets it too, as Determined's have `determined`,
        # and its import has no side effects, so services (TensorBoard) are unaffected.
        env["PYTHONPATH"] = os.pathsep.join([work_dir, COMPAT_SHIM_PATH]) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        types = {slot_types.get(sid, "cpu") for sid in slot_ids}
        if private is not None:  # tokens as files of the task's own (issue 29)
            env = move_secrets(env, private, user)
        return TaskLaunch(
            allocation_id=spec["allocation_id"],
            argv=argv,
            work_dir=work_dir,
            env=env,
            slot_ids=slot_ids,
            slot_type=types.pop() if len(types) == 1 else "cpu",
            environment=EnvironmentSpec.from_json(spec.get("environment")),
            agent_id=self.agent_id,
            user=user,
            private_dir=private,
            state_dir=state_dir(self.config.work_dir, spec["allocation_id"]),
            grace=self.config.orphan_grace_period,
        )

    def _kill(self, alloc_id: str, grace: float = KILL_GRACE_SECONDS) -> None:
        task = self.tasks.get(alloc_id)
        if task is None:
            return
        now = time.time()
        with self._task_lock:
            if task.kill_sent_at is None:
                task.kill_sent_at = now
            handle, runtime = task.proc, task.runtime
        if handle is None or runtime is None:
            return  # still preparing: it will not start
        if not task.term_sent:
            runtime.signal(handle, signal.SIGTERM)
            task.term_sent = True
        elif now - task.kill_sent_at > grace:
            runtime.signal(handle, signal.SIGKILL)

    def _reap(self) -> None:
        for alloc_id, task in list(self.tasks.items()):
            if task.proc is None or task.runtime is None:
                if task.prepare_exit is not None:
                    del self.tasks[alloc_id]
                    self._remove_private(task)
                    self.pending_exits[alloc_id] = task.prepare_exit
                    log.info("task %s ended before it started", alloc_id)
                continue
            code = task.runtime.wait(task.proc, 0)
            # A supervised task may end with no known code (its supervisor died).
            ended = code is not None or bool(getattr(task.proc, "ended", False))
            if not ended:
                if task.kill_sent_at is not None:
                    self._kill(alloc_id)
                continue
            for t in task.readers:
                if t is not threading.current_thread():
                    t.join(timeout=5)
            message = self._fence_messages.pop(alloc_id, None) or getattr(
                task.proc, "exit_message", None
            )
            task.runtime.cleanup(task.proc)
            self.shipper.forget(alloc_id)
            self._remove_private(task)
            del self.tasks[alloc_id]
            self.pending_exits[alloc_id] = (
                code,
                message or (None if code == 0 else f"exit code {code}"),
                False,
            )
            log.info("task %s exited with %s", alloc_id, code)

    @staticmethod
    def _remove_private(task: _Task) -> None:
        """Remove a task's own directory (its secret files: void once it has ended)."""
        if task.private is not None:
            shutil.rmtree(task.private, ignore_errors=True)

    def _flush_exits(self) -> None:
        if self.pending_exits:
            self.shipper.flush()
        for alloc_id, (code, msg, fatal) in list(self.pending_exits.items()):
            body: dict[str, Any] = {"exit_code": code, "message": msg}
            if fatal:
                body["fatal"] = True
            r = self.client.post(f"/api/v1/allocations/{alloc_id}/exited", json=body)
            if r.status_code not in (200, 404):
                r.raise_for_status()
            del self.pending_exits[alloc_id]
