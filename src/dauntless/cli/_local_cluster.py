"""Starting and stopping a master and agents on this machine as background processes.

The processes run detached (their own session, so the shell's Ctrl-C does not reach
them), write their output to ``<data_dir>/logs/*.log`` and are recorded in
``<data_dir>/cluster.json`` so that :func:`stop_local_cluster` finds them later.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import platformdirs
import yaml

from dauntless._auth import CLUSTER_SECRET_HEADER
from dauntless.client import ClientError, Session

#: The state file that records the running processes, inside the data directory.
STATE_FILE = "cluster.json"
#: The master config the cluster-up writes (mode 0600: it holds secrets), in the data dir.
MASTER_CONFIG_FILE = "master.yaml"
#: The file holding the cluster secret handed to the agents (mode 0600), in the data dir.
CLUSTER_SECRET_FILE = "cluster_secret"
#: Environment variable naming the root of Dauntless's data (``<root>/local-cluster``).
DATA_DIR_ENV = "DAUNTLESS_DATA_DIR"


class LocalClusterError(Exception):
    """A local cluster could not be started, or its state file is unusable."""


@dataclass(frozen=True)
class ProcessRecord:
    """One started process.

    Attributes:
        name: ``"master"`` or the agent's id.
        pid: the process id (also its process group id).
        module: the Python module it runs (``dauntless.master``), to recognise it later.
        log: the file its stdout and stderr go to.
    """

    name: str
    pid: int
    module: str
    log: str


@dataclass(frozen=True)
class ClusterState:
    """What :func:`start_local_cluster` started.

    Attributes:
        data_dir: the cluster's data directory.
        master_url: the master's base URL.
        master: the master process.
        agents: the agent processes.
        started_at: seconds since the epoch.
    """

    data_dir: str
    master_url: str
    master: ProcessRecord
    agents: list[ProcessRecord] = field(default_factory=list)
    started_at: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ClusterState:
        """Rebuild the state from :func:`dataclasses.asdict` output.

        Raises:
            KeyError, TypeError: for malformed data.
        """
        master = ProcessRecord(**cast("dict[str, Any]", data["master"]))
        agents_raw = cast("list[dict[str, Any]]", data.get("agents") or [])
        agents = [ProcessRecord(**a) for a in agents_raw]
        return cls(
            data_dir=str(data["data_dir"]),
            master_url=str(data["master_url"]),
            master=master,
            agents=agents,
            started_at=float(data.get("started_at") or 0.0),  # type: ignore[arg-type]
        )


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The local cluster's data directory when none is given.

    Args:
        environ: the environment; ``os.environ`` when None.

    Returns:
        ``$DAUNTLESS_DATA_DIR/local-cluster`` when that variable is set, else
        ``platformdirs.user_data_dir("dauntless")/local-cluster``.
    """
    env = os.environ if environ is None else environ
    root = env.get(DATA_DIR_ENV, "").strip()
    base = Path(root).expanduser() if root else Path(platformdirs.user_data_dir("dauntless"))
    return base / "local-cluster"


def read_state(data_dir: str | os.PathLike[str]) -> ClusterState | None:
    """The recorded cluster of ``data_dir``, or None when there is no state file.

    Raises:
        LocalClusterError: when the state file cannot be read or parsed.
    """
    path = Path(data_dir) / STATE_FILE
    if not path.exists():
        return None
    try:
        return ClusterState.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LocalClusterError(
            f"the state file {path} is unreadable ({exc}); delete it if no cluster runs"
        ) from None


def _write_state(state: ClusterState) -> None:
    path = Path(state.data_dir) / STATE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # collects a dead child of this process (tests)
    except ChildProcessError:
        pass


def is_alive(pid: int) -> bool:
    """True when process ``pid`` exists and is not a zombie."""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_ours(record: ProcessRecord) -> bool:
    """True when ``record.pid`` is alive and still runs ``record.module`` (not a reused pid).

    Where ``/proc`` is missing, a live pid is trusted.
    """
    if not is_alive(record.pid):
        return False
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return record.module.encode() in cmdline


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _spawn(cmd: list[str], log: Path, cwd: Path, env: Mapping[str, str] | None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    return proc.pid


def _tail(path: str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_local_cluster(
    data_dir: str | os.PathLike[str],
    *,
    master_port: int = 8080,
    agents: int = 1,
    artificial_slots: int | None = None,
    timeout: float = 60.0,
    python: str = sys.executable,
    master_module: str = "dauntless.master",
    agent_module: str = "dauntless.agent",
    env: Mapping[str, str] | None = None,
    poll_interval: float = 0.2,
    initial_user_password: str | None = None,
    default_task_user: str | None = None,
    master_config: Mapping[str, Any] | None = None,
) -> ClusterState:
    """Start a master and ``agents`` agents in the background and wait until they serve.

    A fresh random cluster secret is written, with ``initial_user_password``, to
    ``DIR/master.yaml`` (``security.cluster_secret``, ``security.initial_user_password``,
    and ``task_proxy.port``: the port after the master's when free, else any free one)
    and to ``DIR/cluster_secret``, both readable by this user only.

    Whoever deploys a local cluster is its admin (issue 29): the config makes this
    user's Unix identity ``security.default_task`` (the identity of tasks whose owner has
    no link), unless ``default_task_user`` names another user of this host (only root
    can run tasks as another user: its agents then run each such task isolated). With
    ``artificial_slots`` it also sets ``security.agents.allow_artificial_slots``. The master runs
    ``python -m <master_module> --port P --data-dir DIR --config-file DIR/master.yaml``;
    once it answers ``GET /api/v1/master``, each agent ``i`` runs ``python -m
    <agent_module> --master-url URL --work-dir DIR/agent-i/work --agent-id agent-i
    --cluster-secret-file DIR/cluster_secret [--artificial-slots N]``, and the call
    returns when every agent is listed by ``GET /api/v1/agents`` (asked with the secret).

    Args:
        data_dir: the cluster's directory (database, checkpoints, logs, state file).
        master_port: the TCP port of the master on 127.0.0.1.
        agents: how many agents to start (>= 0).
        artificial_slots: when set, each agent offers this many CPU slots.
        timeout: seconds to wait for the master and the agents.
        python: the Python interpreter to run them with.
        master_module, agent_module: the modules to run (tests substitute fakes).
        env: the processes' environment; this process's when None.
        poll_interval: seconds between readiness checks.
        initial_user_password: the first password of the built-in ``admin`` and
            ``determined`` users; empty when None. It applies when the users are made
            (a new data directory) and changes nothing afterwards.
        default_task_user: a user of this host whose identity (uid, primary group)
            tasks of unlinked users run as; None: this process's.
        master_config: a master config (Dauntless's or Determined's master.yaml, parsed)
            to start from (``det deploy local cluster-up --master-config-path``): its
            fields win, except that the cluster secret, the data directory and the port
            are this call's unless it sets ``security.cluster_secret``; with
            ``security.tls`` the master serves HTTPS and the agents and this call verify
            it with ``security.tls.cert``.

    Returns:
        The recorded state (also written to ``<data_dir>/cluster.json``).

    Raises:
        ValueError: for a bad port, agent count, slot count or timeout; an unknown
            ``default_task_user``, or another user than this one when not root.
        LocalClusterError: when a cluster of this data directory still runs, the port is
            taken, or the processes do not come up within ``timeout``; then whatever was
            started is stopped again and the message names the log files.
        SystemExit: SIGTERM arrived while waiting (status 143); KeyboardInterrupt: SIGINT.
            Whatever was started is stopped first.
    """
    if not 1 <= master_port <= 65535:
        raise ValueError(f"master_port must be in 1..65535, got {master_port}")
    if agents < 0:
        raise ValueError(f"agents must be >= 0, got {agents}")
    if artificial_slots is not None and artificial_slots < 0:
        raise ValueError(f"artificial_slots must be >= 0, got {artificial_slots}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    identity = deployer_task_identity(default_task_user)
    root = Path(data_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    old = read_state(root)
    if old is not None:
        running = [r for r in [old.master, *old.agents] if is_ours(r)]
        if running:
            raise LocalClusterError(
                f"a local cluster from {root} is already running (master at {old.master_url}, "
                f"pids {', '.join(str(r.pid) for r in running)}); stop it with "
                "`det deploy local cluster-down`"
            )
        (root / STATE_FILE).unlink(missing_ok=True)
    if not _port_free(master_port):
        raise LocalClusterError(
            f"port {master_port} on 127.0.0.1 is already in use; choose another with --master-port"
        )
    # The task services' origin: the next port when free (as a master started by hand
    # takes it), else any free one; the master sends browsers there itself.
    proxy_port = master_port + 1 if master_port < 65535 and _port_free(master_port + 1) else 0
    url = f"http://127.0.0.1:{master_port}"
    logs = root / "logs"
    master_log = logs / "master.log"
    secret = _write_secrets(
        root,
        initial_user_password,
        identity,
        artificial_slots is not None,
        proxy_port,
        dict(master_config or {}),
    )
    tls = ((master_config or {}).get("security") or {}).get("tls") or {}
    cert = str(tls["cert"]) if tls.get("cert") else None
    if cert is not None:
        url = f"https://127.0.0.1:{master_port}"
    master_cmd = [
        python,
        "-m",
        master_module,
        "--port",
        str(master_port),
        "--data-dir",
        str(root),
        "--config-file",
        str(root / MASTER_CONFIG_FILE),
    ]
    master = ProcessRecord(
        "master", _spawn(master_cmd, master_log, root, env), master_module, str(master_log)
    )
    state = ClusterState(str(root), url, master, [], time.time())
    _write_state(state)
    deadline = time.monotonic() + timeout
    try:
        with (
            _stop_on_sigterm(),
            Session(url, timeout=2.0, retries=0, cert_file=cert) as session,
        ):
            _wait_master(session, state, deadline, poll_interval)
            records = []
            for i in range(agents):
                name = f"agent-{i}"
                work = root / name / "work"
                work.mkdir(parents=True, exist_ok=True)
                cmd = [
                    python,
                    "-m",
                    agent_module,
                    "--master-url",
                    url,
                    "--work-dir",
                    str(work),
                    "--agent-id",
                    name,
                    "--cluster-secret-file",
                    str(root / CLUSTER_SECRET_FILE),
                ]
                if artificial_slots is not None:
                    cmd += ["--artificial-slots", str(artificial_slots)]
                if cert is not None:
                    cmd += ["--master-cert-file", cert]
                log = logs / f"{name}.log"
                records.append(
                    ProcessRecord(name, _spawn(cmd, log, root / name, env), agent_module, str(log))
                )
                state = ClusterState(str(root), url, master, list(records), state.started_at)
                _write_state(state)
            _wait_agents(state, secret, deadline, poll_interval, cert)
    except BaseException:
        stop_local_cluster(root, grace=5.0)
        raise
    return state


class _Terminated(SystemExit):
    """SIGTERM while the cluster comes up (exit status 143, as a shell reports it)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(128 + signum)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM raises in the main thread (as Ctrl-C's SIGINT already
    does), so that :func:`start_local_cluster` stops what it started instead of leaving a
    master without its agents; the previous handler comes back after. Off the main
    thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _failure(state: ClusterState, record: ProcessRecord, what: str) -> LocalClusterError:
    logs = ", ".join(r.log for r in [state.master, *state.agents])
    tail = _tail(record.log)
    text = f"{what}. See the log files: {logs}"
    if tail:
        text += f"\nLast lines of {record.log}:\n{tail}"
    return LocalClusterError(text)


def _wait_master(session: Session, state: ClusterState, deadline: float, poll: float) -> None:
    while True:
        if not is_alive(state.master.pid):
            raise _failure(state, state.master, "the master exited during startup")
        try:
            session.master_info()
            return
        except ClientError:
            pass
        if time.monotonic() >= deadline:
            raise _failure(
                state, state.master, f"the master did not answer at {state.master_url} in time"
            )
        time.sleep(poll)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (mode 0600)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def deployer_task_identity(user: str | None = None) -> dict[str, Any]:
    """``security.default_task`` of a local cluster: this process's Unix identity, or that
    of ``user`` (a user of this host: its uid and primary group).

    Raises:
        ValueError: ``user`` does not exist here, or is another user and this process is
            not root (it could not run tasks as that user).
    """
    if user is None:
        uid, gid = os.getuid(), os.getgid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"u{uid}"
    else:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ValueError(f"default_task_user: no user {user!r} on this host") from None
        uid, gid, name = entry.pw_uid, entry.pw_gid, entry.pw_name
        if uid != os.getuid() and os.geteuid() != 0:
            raise ValueError(
                f"default_task_user: only root can run tasks as another user ({user}); "
                "leave it out to run them as yourself"
            )
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = f"g{gid}"
    return {"uid": uid, "gid": gid, "user": name, "group": group}


def _write_secrets(
    root: Path,
    initial_user_password: str | None,
    default_task: dict[str, Any],
    artificial_slots: bool,
    proxy_port: int,
    base: dict[str, Any] | None = None,
) -> str:
    """Make a random cluster secret; write the master config (``base``, the operator's,
    with the deployer's ``default_task`` unless it sets one, for artificial slots their
    allowance, and ``task_proxy.port``: ``proxy_port``, 0 for any free port, unless it
    sets one) and the agents' secret file. Returns the secret (``base``'s
    ``security.cluster_secret`` when it sets one)."""
    config = dict(base or {})
    security: dict[str, Any] = dict(config.get("security") or {})
    secret = str(security.get("cluster_secret") or secrets.token_urlsafe(32))
    security["cluster_secret"] = secret
    security.setdefault("default_task", default_task)
    if artificial_slots:
        security["agents"] = {**(security.get("agents") or {}), "allow_artificial_slots": True}
    if initial_user_password is not None:
        security["initial_user_password"] = initial_user_password
    config["security"] = security
    config["task_proxy"] = {"port": proxy_port, **(config.get("task_proxy") or {})}
    for key in ("port", "data_dir"):  # the cluster-up's own (--master-port, --data-dir)
        config.pop(key, None)
    _write_private(root / MASTER_CONFIG_FILE, yaml.safe_dump(config))
    _write_private(root / CLUSTER_SECRET_FILE, secret + "\n")
    return secret


def _wait_agents(
    state: ClusterState, secret: str, deadline: float, poll: float, cert: str | None = None
) -> None:
    wanted = {r.name for r in state.agents}
    while True:
        for record in [state.master, *state.agents]:
            if not is_alive(record.pid):
                raise _failure(state, record, f"{record.name} exited during startup")
        try:
            r = httpx.get(
                f"{state.master_url}/api/v1/agents",
                timeout=2.0,
                headers={CLUSTER_SECRET_HEADER: secret},
                verify=cert if cert is not None else True,
            )
            r.raise_for_status()
            seen = {str(a.get("id")) for a in r.json().get("agents", [])}
        except (httpx.HTTPError, ValueError, AttributeError):
            seen = set()
        missing = sorted(wanted - seen)
        if not missing:
            return
        if time.monotonic() >= deadline:
            first = next(r for r in state.agents if r.name == missing[0])
            raise _failure(
                state,
                first,
                f"agent(s) {', '.join(missing)} did not register with the master in time",
            )
        time.sleep(poll)


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_local_cluster(
    data_dir: str | os.PathLike[str], *, grace: float = 10.0
) -> ClusterState | None:
    """Stop the recorded processes of ``data_dir`` and remove the state file.

    Agents get SIGTERM first, then the master; whatever still runs after ``grace``
    seconds gets SIGKILL, and so does the rest of each process group. Processes whose pid
    now runs something else are left alone. Calling it again is harmless.

    Args:
        data_dir: the cluster's directory.
        grace: seconds to wait after SIGTERM before SIGKILL.

    Returns:
        The state that was stopped, or None when no state file existed.

    Raises:
        LocalClusterError: when the state file is unreadable.
    """
    root = Path(data_dir).expanduser().resolve()
    state = read_state(root)
    if state is None:
        return None
    ours = [r for r in [*state.agents, state.master] if is_ours(r)]
    for record in ours:
        _signal(record.pid, signal.SIGTERM, group=False)
    end = time.monotonic() + grace
    while any(is_alive(r.pid) for r in ours) and time.monotonic() < end:
        time.sleep(0.05)
    for record in ours:
        _signal(record.pid, signal.SIGKILL, group=True)
    end = time.monotonic() + 5.0
    while any(is_alive(r.pid) for r in ours) and time.monotonic() < end:
        time.sleep(0.05)
    (root / STATE_FILE).unlink(missing_ok=True)
    return state
