"""The process of a notebook, shell or TensorBoard task, on its agent.

``python -m dauntless.exec.task_service notebook|tensorboard|shell`` starts the service
on a free port of the agent's advertised address (``DET_ADVERTISE_ADDR``), waits until it
answers, reports its address to the master (``POST /api/v1/tasks/{id}/service`` with
``DET_SESSION_TOKEN``) and then lives as long as the service does, exiting with its
exit code. When the service cannot start (JupyterLab or TensorBoard missing from the
agent's Python environment) it reports why, naming the ``dauntless`` extra to install,
and exits with :data:`MISSING_EXTRA_EXIT`.

Reports to the master are retried with backoff (:class:`dauntless._http.RetryPolicy`:
a master that is restarting answers 502/503 or refuses connections) for
:data:`REPORT_DEADLINE` seconds. A report the master refuses (4xx), or one still
failing then, is logged as an error; a service whose address could not be reported is
stopped and the process exits with :data:`REPORT_FAILED_EXIT` (nobody could reach it).

Idle tasks (``idle_timeout``, ``DAUNTLESS_IDLE_TIMEOUT`` seconds) ask the master to kill
them:

* a notebook is idle when no kernel is busy, no kernel or server connection is open
  and nothing happened (Jupyter's ``/api/status`` and ``/api/kernels``
  ``last_activity``) for the timeout: Determined's rule;
* a shell is idle when no connection has been open for the timeout.

The shell is a WebSocket server (Starlette under uvicorn) at
``/proxy/<task id>/pty``: each connection runs a login shell, or the JSON argv in the
``cmd`` query parameter, under a pseudo-terminal (``ptyprocess``; ``pty=0`` runs it with
pipes instead, for a caller without a terminal). Binary messages are the terminal's
bytes both ways; text messages are JSON: ``{"resize": [rows, cols]}`` from the client,
``{"exit": code}`` from the server before it closes (a signal N gives 128 + N, as a
shell reports it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx

from dauntless._auth import read_task_secret
from dauntless._http import APIError, ClientError, MasterUnreachableError, RetryPolicy
from dauntless._tls import cert_file_from_env, make_verify

log = logging.getLogger("dauntless.task_service")

MISSING_EXTRA_EXIT = 3
"""Exit code when the service's package is not installed."""

READY_TIMEOUT = 180.0
"""Seconds a service may take to answer before the task fails."""

REPORT_DEADLINE = 300.0
"""Seconds a report to the master is retried before the task gives up (counted from the
first attempt; an attempt under way then still ends within the client's 30 s timeout)."""

REPORT_FAILED_EXIT = 4
"""Exit code when the service's address could not be reported to the master."""


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set: this module runs inside a task started by an agent")
    return value


def _secret(name: str) -> str:
    """A secret the agent handed the task (``NAME``, else the file ``$NAME_FILE``)."""
    value = read_task_secret(name)
    if not value:
        raise SystemExit(
            f"neither {name} nor {name}_FILE is set: this module runs inside a task started "
            "by an agent"
        )
    return value


def _without_service_token(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the service token, for what the service starts (kernels, shells)."""
    out = dict(env)
    out.pop("DAUNTLESS_SERVICE_TOKEN", None)
    out.pop("DAUNTLESS_SERVICE_TOKEN_FILE", None)
    return out


class _Master:
    """The calls a task's process makes to the master (its own session token)."""

    def __init__(
        self, report_deadline: float = REPORT_DEADLINE, sleep: Callable[[float], Any] = time.sleep
    ) -> None:
        """Args: ``report_deadline``, seconds (:data:`REPORT_DEADLINE`); ``sleep``,
        how the retries wait (tests pass their own)."""
        self.report_deadline = report_deadline
        self.sleep = sleep
        self.task_id = _env("DET_TASK_ID")
        self.client = httpx.Client(
            base_url=_env("DET_MASTER").rstrip("/"),
            headers={"Authorization": f"Bearer {_secret('DET_SESSION_TOKEN')}"},
            timeout=30.0,
            verify=make_verify(cert_file_from_env()),
            transport=None,
        )

    def report(self, **body: Any) -> None:
        """Report where the service listens (``addr``, ``port``) or why it failed
        (``error``), retrying as the module docstring says.

        Args:
            **body: the JSON body of ``POST /api/v1/tasks/{id}/service``.

        Raises:
            APIError: the master refused the report (or still answered 5xx at the
                deadline).
            MasterUnreachableError: no answer until :attr:`report_deadline` seconds
                had passed.
        """
        path = f"/api/v1/tasks/{self.task_id}/service"
        deadline = time.monotonic() + self.report_deadline

        def wait(seconds: float) -> None:
            self.sleep(max(0.0, min(seconds, deadline - time.monotonic())))

        policy = RetryPolicy(
            attempts=None, backoff=0.5, max_backoff=10.0, repeatable=True, sleep=wait
        )

        def send() -> httpx.Response:
            try:
                answer = self.client.post(path, json=body)
            except httpx.TransportError as exc:
                log.warning("could not reach the master to report this task's service (%s)", exc)
                raise
            if policy.retryable_status("POST", answer.status_code):
                log.warning("the master answered %d to this task's report", answer.status_code)
            return answer

        try:
            answer = policy.call(
                send,
                retry_error=lambda exc: (
                    isinstance(exc, httpx.TransportError)
                    and policy.retryable_error("POST", exc, sent=True)
                ),
                retry_result=lambda r: policy.retryable_status("POST", r.status_code),
                stopped=lambda: time.monotonic() >= deadline,
            )
        except httpx.TransportError as exc:
            raise MasterUnreachableError(
                str(self.client.base_url),
                str(exc) or type(exc).__name__,
                message=f"could not reach the master at {self.client.base_url} to report "
                f"this task's service for {self.report_deadline:g} s ({exc})",
            ) from exc
        if answer.status_code >= 400:
            try:
                doc = answer.json()
            except ValueError:
                doc = None
            raise APIError.from_body(
                answer.status_code, doc, answer.text[:200], method="POST", path=path
            )

    def report_error(self, message: str) -> None:
        """Report why the service could not start; a failure to do so is logged as an
        error (the process exits next anyway)."""
        try:
            self.report(error=message)
        except ClientError as exc:
            log.error("the master was not told why this task failed: %s", exc)

    def kill_self(self, reason: str) -> bool:
        """Ask the master to kill this task (idle); False (logged) when it could not be
        asked, so that the caller asks again at its next check."""
        try:
            r = self.client.post(f"/api/v1/tasks/{self.task_id}/kill", json={"reason": reason})
            r.raise_for_status()
            return True
        except httpx.HTTPError as exc:
            log.warning("could not ask the master to stop this task (will ask again): %s", exc)
            return False


def free_port(addr: str) -> int:
    """A TCP port free on ``addr`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def _missing(master: _Master, what: str, extra: str, module: str) -> int:
    msg = (
        f"{what} is not installed in the Python environment of agent "
        f"{os.environ.get('DET_AGENT_ID', '?')} ({sys.executable}): install the "
        f"'{extra}' extra there: pip install 'dauntless[{extra}]' (module {module!r} missing)"
    )
    print(msg, file=sys.stderr, flush=True)
    master.report_error(msg)
    return MISSING_EXTRA_EXIT


def _unreported(exc: ClientError, proc: subprocess.Popen) -> int:
    """Stop a service whose address the master was not told; :data:`REPORT_FAILED_EXIT`."""
    log.error("stopping the service: its address was not reported to the master: %s", exc)
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return REPORT_FAILED_EXIT


def _wait_ready(proc: subprocess.Popen, url: str, headers: dict[str, str]) -> bool:
    deadline = time.time() + READY_TIMEOUT
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            r = httpx.get(url, headers=headers, timeout=5.0, trust_env=False)
            if r.status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def _forward_term(proc: subprocess.Popen) -> None:
    def handler(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _iso(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def notebook_idle_since(status: dict[str, Any], kernels: list[dict[str, Any]]) -> float | None:
    """When a Jupyter server became idle (seconds since the epoch), or None while busy.

    Args:
        status: the answer of ``GET /api/status`` (``last_activity``, ``connections``).
        kernels: the answer of ``GET /api/kernels`` (each: ``execution_state``,
            ``connections``, ``last_activity``).
    """
    if status.get("connections", 0) > 0:
        return None
    for k in kernels:
        if k.get("execution_state") == "busy" or k.get("connections", 0) > 0:
            return None
    times = [_iso(status.get("last_activity"))] + [_iso(k.get("last_activity")) for k in kernels]
    return max(times)


def service_origin(addr: str, port: int) -> str:
    """The origin of a service listening on ``addr:port`` (``http://addr:port``): the
    only one it accepts, as the master's proxy presents its requests with it."""
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}"


def write_jupyter_config(directory: str, token: str, origin: str) -> str:
    """Write JupyterLab's secrets and origin rule to ``directory/jupyter_config.json``,
    mode 0600, created anew (never over an existing file), and return its path.

    The token is never on a command line (``/proc/<pid>/cmdline`` is world-readable)
    nor in the environment (the kernels inherit it); Jupyter reads the file at start
    (``--config``) and the caller removes it once the server answers.

    Args:
        directory: a directory only this task's user can enter (mode 0700).
        token: the service token the master's proxy presents.
        origin: the one origin JupyterLab accepts (``ServerApp.allow_origin``).
    """
    path = os.path.join(directory, "jupyter_config.json")
    doc = {"IdentityProvider": {"token": token}, "ServerApp": {"allow_origin": origin}}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def run_notebook(master: _Master) -> int:
    """Run JupyterLab under the task's proxy prefix until it exits (or is idle)."""
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return _missing(master, "JupyterLab", "notebook", "jupyterlab")
    addr = os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1")
    port = free_port(addr)
    prefix = os.environ.get("DAUNTLESS_PROXY_PREFIX", "/")
    token = _secret("DAUNTLESS_SERVICE_TOKEN")
    secrets_dir = tempfile.mkdtemp(prefix="dauntless-jupyter-")  # mode 0700
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ip={addr}",
        f"--port={port}",
        "--port-retries=0",
        f"--config={write_jupyter_config(secrets_dir, token, service_origin(addr, port))}",
        f"--ServerApp.base_url={prefix}",
        f"--ServerApp.root_dir={os.getcwd()}",
        "--ServerApp.quit_button=False",
    ]
    if os.environ.get("DAUNTLESS_DEBUG"):
        argv.append("--debug")
    if os.geteuid() == 0:  # agents in containers often run as root
        argv.append("--allow-root")
    env = _without_service_token(dict(os.environ))  # the kernel needs no key to its server
    try:
        proc = subprocess.Popen(argv, env=env)
        _forward_term(proc)
        base = f"http://{addr}:{port}{prefix}"
        headers = {"Authorization": f"token {token}"}
        ready = _wait_ready(proc, base + "api/status", headers)
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)  # read at start: not needed after
    if not ready:
        master.report_error("JupyterLab did not start; see the task's logs")
        proc.terminate()
        return proc.wait() or 1
    try:
        master.report(addr=addr, port=port)
    except ClientError as exc:
        return _unreported(exc, proc)
    print(f"JupyterLab is ready at {prefix} (through the master's proxy)", flush=True)
    idle = float(os.environ.get("DAUNTLESS_IDLE_TIMEOUT") or 0)
    asked = False
    while proc.poll() is None:
        time.sleep(min(5.0, max(idle / 4, 0.5)) if idle else 5.0)
        if not idle or asked:
            continue
        try:
            q = {"no_track_activity": "1"}
            status = httpx.get(base + "api/status", headers=headers, params=q, timeout=5).json()
            kernels = httpx.get(base + "api/kernels", headers=headers, params=q, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            continue
        since = notebook_idle_since(status, kernels)
        if since is not None and time.time() - since > idle:
            reason = f"idle for {time.time() - since:.0f} s (idle_timeout {idle:g} s)"
            print(f"JupyterLab is {reason}: stopping", flush=True)
            asked = master.kill_self(reason)
    return proc.returncode


def run_tensorboard(master: _Master) -> int:
    """Run TensorBoard over ``DAUNTLESS_TENSORBOARD_LOGDIRS`` (``name:dir,...``)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return _missing(master, "TensorBoard", "tensorboard", "tensorboard")
    addr = os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1")
    port = free_port(addr)
    prefix = os.environ.get("DAUNTLESS_PROXY_PREFIX", "/").rstrip("/")
    spec = os.environ.get("DAUNTLESS_TENSORBOARD_LOGDIRS", "")
    argv = [
        sys.executable,
        "-m",
        "dauntless.exec.tensorboard_server",  # tensorboard.main, its fonts under the prefix
        "--logdir_spec",
        spec,
        "--host",
        addr,
        "--port",
        str(port),
        "--path_prefix",
        prefix,
        "--reload_interval",
        "5",
    ]
    print("TensorBoard over " + (spec or "(no event files)"), flush=True)
    proc = subprocess.Popen(argv)
    _forward_term(proc)
    if not _wait_ready(proc, f"http://{addr}:{port}{prefix}/", {}):
        master.report_error("TensorBoard did not start; see the task's logs")
        proc.terminate()
        return proc.wait() or 1
    try:
        master.report(addr=addr, port=port)
    except ClientError as exc:
        return _unreported(exc, proc)
    print(f"TensorBoard is ready at {prefix}/ (through the master's proxy)", flush=True)
    return proc.wait()


# ---------------------------------------------------------------------- shell


def _exit_status(code: int | None, signum: int | None) -> int:
    if signum:
        return 128 + signum
    return int(code or 0)


def _login_shell() -> list[str]:
    shell = os.environ.get("SHELL") or ("/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh")
    return [shell]


class _ShellServer:
    def __init__(self, master: _Master, token: str, idle: float) -> None:
        self.master = master
        self.token = token
        self.idle = idle
        self.connections = 0
        self.last_seen = time.time()

    def opened(self) -> None:
        """A connection opened (a terminal or an SSH connection)."""
        self.connections += 1

    def closed(self) -> None:
        """A connection closed."""
        self.connections -= 1
        self.last_seen = time.time()

    async def handle(self, ws: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        if ws.headers.get("authorization") != f"token {self.token}":
            await ws.close(code=4403)
            return
        await ws.accept()
        self.connections += 1
        try:
            q = ws.query_params
            argv = json.loads(q["cmd"]) if q.get("cmd") else _login_shell()
            rows, cols = int(q.get("rows") or 24), int(q.get("cols") or 80)
            env = _without_service_token(dict(os.environ))
            env["TERM"] = q.get("term") or env.get("TERM") or "xterm"
            if q.get("pty", "1") == "0":
                code = await self._run_pipes(ws, argv, env)
            else:
                code = await self._run_pty(ws, argv, env, rows, cols)
            await ws.send_text(json.dumps({"exit": code}))
            await ws.close()
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.connections -= 1
            self.last_seen = time.time()

    async def _run_pty(self, ws: Any, argv: list[str], env: dict, rows: int, cols: int) -> int:
        from ptyprocess import PtyProcess

        try:
            proc = PtyProcess.spawn(argv, cwd=os.getcwd(), env=env, dimensions=(rows, cols))
        except (OSError, FileNotFoundError) as exc:
            await ws.send_bytes(f"cannot run {argv}: {exc}\r\n".encode())
            return 127
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[bytes | None] = asyncio.Queue()

        def readable() -> None:
            try:
                data = os.read(proc.fd, 65536)
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(proc.fd)
                out.put_nowait(None)
            else:
                out.put_nowait(data)

        loop.add_reader(proc.fd, readable)

        async def pump_out() -> None:
            while (data := await out.get()) is not None:
                await ws.send_bytes(data)

        async def pump_in() -> None:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                if msg.get("bytes"):
                    os.write(proc.fd, msg["bytes"])
                elif msg.get("text"):
                    ctl = json.loads(msg["text"])
                    if "resize" in ctl:
                        r, c = ctl["resize"]
                        proc.setwinsize(int(r), int(c))

        sender = asyncio.ensure_future(pump_out())
        receiver = asyncio.ensure_future(pump_in())
        done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
        if receiver in done:  # the client went away: end the session's processes
            sender.cancel()
            loop.remove_reader(proc.fd)
            proc.terminate(force=True)
            return 129
        receiver.cancel()
        while proc.isalive():
            await asyncio.sleep(0.02)
        proc.close()
        return _exit_status(proc.exitstatus, proc.signalstatus)

    async def _run_pipes(self, ws: Any, argv: list[str], env: dict) -> int:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            await ws.send_bytes(f"cannot run {argv}: {exc}\n".encode())
            return 127
        assert proc.stdout is not None
        while data := await proc.stdout.read(65536):
            await ws.send_bytes(data)
        code = await proc.wait()
        return 128 - code if code < 0 else code

    async def watch_idle(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, max(self.idle / 4, 0.5)))
            if self.connections == 0 and time.time() - self.last_seen > self.idle:
                reason = f"no connection for {time.time() - self.last_seen:.0f} s (idle_timeout {self.idle:g} s)"
                print(f"shell: {reason}: stopping", flush=True)
                if await asyncio.to_thread(self.master.kill_self, reason):
                    return


def run_shell(master: _Master) -> int:
    """Serve PTY sessions over WebSocket until killed."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Route, WebSocketRoute

    from .shell_sshd import SshEndpoint, start_sshd

    addr = os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1")
    port = free_port(addr)
    prefix = os.environ.get("DAUNTLESS_PROXY_PREFIX", "/")
    idle = float(os.environ.get("DAUNTLESS_IDLE_TIMEOUT") or 0)
    token = _secret("DAUNTLESS_SERVICE_TOKEN")
    server = _ShellServer(master, token, idle)
    # issue 34: an sshd for IDEs and scp, reached through /ssh (dauntless.exec.shell_sshd)
    sshd = start_sshd(os.environ.get("DAUNTLESS_SSH_PUBLIC_KEY"), dict(os.environ))
    if sshd.error:
        print(f"shell: no SSH access: {sshd.error}", flush=True)
    ssh = SshEndpoint(sshd, token, server.opened, server.closed)
    app = Starlette(
        routes=[
            WebSocketRoute(prefix + "pty", server.handle),
            WebSocketRoute(prefix + "ssh", ssh.relay),
            Route(prefix + "ssh_info", ssh.info),
        ]
    )
    config = uvicorn.Config(app, host=addr, port=port, log_level="warning", lifespan="off")
    uv = uvicorn.Server(config)

    unreported: list[ClientError] = []

    def announce() -> None:
        while not uv.started:
            time.sleep(0.05)
        try:
            master.report(addr=addr, port=port)
        except ClientError as exc:
            log.error("stopping the shell: its address was not reported to the master: %s", exc)
            unreported.append(exc)
            uv.should_exit = True
            return
        print(f"shell is ready at {prefix}pty (through the master's proxy)", flush=True)

    threading.Thread(target=announce, daemon=True).start()

    async def main() -> None:
        if idle:
            asyncio.ensure_future(server.watch_idle())
        await uv.serve()

    try:
        asyncio.run(main())
    finally:
        sshd.stop()
    return REPORT_FAILED_EXIT if unreported else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``notebook``, ``tensorboard`` or ``shell``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not every poll in the task's logs
    args = sys.argv[1:] if argv is None else argv
    kinds = {"notebook": run_notebook, "tensorboard": run_tensorboard, "shell": run_shell}
    if len(args) != 1 or args[0] not in kinds:
        print(f"usage: python -m dauntless.exec.task_service {'|'.join(kinds)}", file=sys.stderr)
        return 2
    return kinds[args[0]](_Master())


if __name__ == "__main__":
    sys.exit(main())
