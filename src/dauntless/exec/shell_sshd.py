"""The SSH server of a shell task (issue 34 scope 6; Determined's SSH shells).

A shell's process (:mod:`dauntless.exec.task_service`) starts OpenSSH's ``sshd`` next
to its WebSocket terminal when the master gave it the shell's public key
(``DAUNTLESS_SSH_PUBLIC_KEY``, :mod:`dauntless.master.shell_ssh`):

* ``sshd -D -e -f <config>``, not a daemon, logging to its stderr (copied to the task's
  logs), as the task's own user (its Unix identity, issue 29), listening on
  ``127.0.0.1`` of the agent on a free port: no port is open to the network;
* its host key is made here, per shell (Ed25519, ``cryptography``), and its only
  authorized key is the shell's; password and keyboard-interactive logins are off;
* its files (config, host key, authorized keys) are in a directory only the task's user
  can enter (mode 0700), removed when the shell ends;
* the sessions get the task's environment (``SetEnv``: ``DET_MASTER``, the owner's
  token ...), never the service token;
* ``scp`` and ``sftp`` use ``internal-sftp``; port forwarding (``ssh -L``) is allowed.

The way in is the shell's service (:class:`SshEndpoint`): ``GET /proxy/<id>/ssh_info``
says which user to log in as and the host key to trust, and the WebSocket
``/proxy/<id>/ssh`` carries the bytes of one SSH connection both ways between the
master's proxy and the ``sshd`` port (binary messages). Both need the service token,
which only the master's proxy presents after its owner check. The client end is
``det shell proxy`` (:mod:`dauntless.cli.shell_ssh`), an SSH ``ProxyCommand``.

A non-root ``sshd`` lets in only its own user; a root one needs ``/run/sshd`` (its
privilege separation directory, made here when missing).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

log = logging.getLogger("dauntless.task_service")

READY_TIMEOUT = 30.0
"""Seconds ``sshd`` may take to say it listens."""

PRIVSEP_DIR = "/run/sshd"
"""The privilege separation directory a root ``sshd`` needs (compiled into Debian's)."""

_SKIP_ENV = frozenset(
    {"_", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TERM", "SHLVL", "MAIL"}
)
_SKIP_ENV_PREFIXES = ("LC_", "SSH_", "DAUNTLESS_SERVICE_TOKEN")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def find_sshd() -> str | None:
    """The ``sshd`` binary: on ``PATH``, else ``/usr/sbin/sshd``; None when missing."""
    found = shutil.which("sshd")
    if found:
        return found
    return "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None


def session_env(env: dict[str, str]) -> dict[str, str]:
    """What of the task's environment SSH sessions get (``SetEnv`` lines): not the
    login's own variables (HOME, USER, TERM, LC_* ...), not the service token, and not
    a value ``sshd_config`` cannot quote (a double quote, backslash or line break)."""
    out = {}
    for name, value in env.items():
        if name in _SKIP_ENV or name.startswith(_SKIP_ENV_PREFIXES):
            continue
        if not _ENV_NAME.match(name) or any(c in value for c in '"\\\n\r'):
            continue
        out[name] = value
    return out


def sshd_config(directory: str, port: int, env: dict[str, str]) -> str:
    """The text of the shell's ``sshd_config``.

    Args:
        directory: where the host key (``host_key``) and ``authorized_keys`` are.
        port: the TCP port on 127.0.0.1.
        env: the sessions' environment (already filtered by :func:`session_env`).
    """
    lines = [
        f"HostKey {directory}/host_key",
        f"AuthorizedKeysFile {directory}/authorized_keys",
        "ListenAddress 127.0.0.1",
        f"Port {port}",
        "PidFile none",
        "UsePAM no",
        # the files are in a 0700 directory of the task's user; StrictModes would also
        # refuse a world-writable /tmp above it
        "StrictModes no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowTcpForwarding yes",
        "X11Forwarding no",
        "PrintMotd no",
        "Subsystem sftp internal-sftp",
    ]
    if env:  # one line: sshd keeps the first SetEnv directive only
        lines.append("SetEnv " + " ".join(f'"{k}={v}"' for k, v in sorted(env.items())))
    return "\n".join(lines) + "\n"


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


@dataclass
class Sshd:
    """A running ``sshd`` of a shell, or why there is none.

    Attributes:
        port: its port on 127.0.0.1 (0 when it is not running).
        user: the user to log in as (the task's user).
        host_key: its public host key (``ssh-ed25519 AAAA...``).
        error: why there is no ``sshd`` (None when it runs).
    """

    port: int = 0
    user: str = ""
    host_key: str = ""
    error: str | None = None
    proc: subprocess.Popen | None = None
    directory: str | None = None
    listening: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Stop ``sshd`` (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def _copy_log(sshd: Sshd, stream: Any) -> None:
    """Copy ``sshd``'s log lines to the task's logs; note when it listens."""
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip()
        if "Server listening on" in line:
            sshd.listening.set()
        print(f"sshd: {line}", file=sys.stderr, flush=True)


def start_sshd(public_key: str | None, env: dict[str, str]) -> Sshd:
    """Start the shell's ``sshd`` (see the module), waiting until it listens.

    Args:
        public_key: the shell's public key (``DAUNTLESS_SSH_PUBLIC_KEY``); None or empty:
            no ``sshd`` (a shell made before shells had keys).
        env: the task's environment, for the sessions (:func:`session_env`).

    Returns:
        The running server, or one whose ``error`` says why none runs (no ``sshd`` on
        the agent, no key, it did not start): the WebSocket terminal works either way.
    """
    if not public_key:
        return Sshd(error="this shell has no SSH key (it was started before shells had keys)")
    binary = find_sshd()
    if binary is None:
        return Sshd(
            error=f"OpenSSH's sshd is not installed on agent {os.environ.get('DET_AGENT_ID', '?')}"
            " (Debian: apt-get install openssh-server)"
        )
    if os.geteuid() == 0 and not os.path.isdir(PRIVSEP_DIR):
        try:
            os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        except OSError as exc:
            return Sshd(error=f"cannot make sshd's directory {PRIVSEP_DIR}: {exc}")
    user = pwd.getpwuid(os.geteuid()).pw_name
    directory = tempfile.mkdtemp(prefix="dauntless-sshd-")  # mode 0700
    host = Ed25519PrivateKey.generate()
    _write(
        os.path.join(directory, "host_key"),
        host.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode("ascii"),
    )
    host_pub = (
        host.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    _write(os.path.join(directory, "authorized_keys"), public_key.strip() + "\n")
    error = "sshd did not start"
    for _attempt in range(3):  # a free port may be taken between the probe and sshd
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        config = os.path.join(directory, f"sshd_config.{port}")
        _write(config, sshd_config(directory, port, session_env(env)))
        proc = subprocess.Popen(
            [binary, "-D", "-e", "-f", config],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,  # in the task's process group: a kill of the task ends it
        )
        sshd = Sshd(port=port, user=user, host_key=host_pub, proc=proc, directory=directory)
        assert proc.stderr is not None
        threading.Thread(target=_copy_log, args=(sshd, proc.stderr), daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            if sshd.listening.wait(0.1):
                print(f"shell: sshd listens on 127.0.0.1:{port} for {user}", flush=True)
                return sshd
        if proc.poll() is None:
            sshd.stop()
            return Sshd(error=f"sshd did not listen within {READY_TIMEOUT:g} s; see the logs")
        error = f"sshd exited with code {proc.returncode}; see the task's logs"
    shutil.rmtree(directory, ignore_errors=True)
    return Sshd(error=error)


class SshEndpoint:
    """The shell service's way to its ``sshd`` (see the module): ``ssh_info`` (HTTP)
    and ``ssh`` (WebSocket), both needing the service token.

    Args:
        sshd: the running server (or why there is none).
        token: the service token the master's proxy presents.
        opened, closed: called when an SSH connection opens and closes (the shell's
            idle watch counts them as connections).
    """

    def __init__(self, sshd: Sshd, token: str, opened: Any, closed: Any) -> None:
        self.sshd = sshd
        self.token = token
        self.opened = opened
        self.closed = closed

    def _allowed(self, conn: Any) -> bool:
        return bool(conn.headers.get("authorization") == f"token {self.token}")

    async def info(self, request: Any) -> Any:
        """``GET ssh_info``: ``{"user", "host_key"}``; 503 naming why without ``sshd``."""
        from starlette.responses import JSONResponse

        if not self._allowed(request):
            return JSONResponse({"detail": "the master's proxy only"}, status_code=403)
        if self.sshd.error is not None or self.sshd.proc is None:
            return JSONResponse({"detail": self.sshd.error}, status_code=503)
        if self.sshd.proc.poll() is not None:
            detail = f"the shell's sshd exited with code {self.sshd.proc.returncode}"
            return JSONResponse({"detail": detail}, status_code=503)
        return JSONResponse({"user": self.sshd.user, "host_key": self.sshd.host_key})

    async def relay(self, ws: Any) -> None:
        """The WebSocket ``ssh``: one SSH connection's bytes both ways to ``sshd``."""
        if not self._allowed(ws):
            await ws.close(code=4403)
            return
        if self.sshd.error is not None or self.sshd.proc is None:
            await ws.close(code=4503, reason=(self.sshd.error or "no sshd")[:120])
            return
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.sshd.port)
        except OSError as exc:
            await ws.close(code=4502, reason=f"cannot reach the shell's sshd: {exc}"[:120])
            return
        await ws.accept()
        self.opened()
        try:
            await _pump(ws, reader, writer)
        finally:
            self.closed()
            writer.close()


async def _pump(ws: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy WebSocket binary messages to the TCP stream and back until either ends."""

    async def to_sshd() -> None:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("bytes")
            if data:
                writer.write(data)
                await writer.drain()

    async def from_sshd() -> None:
        while data := await reader.read(65536):
            await ws.send_bytes(data)

    tasks = [asyncio.ensure_future(to_sshd()), asyncio.ensure_future(from_sshd())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await ws.close()
        except RuntimeError:
            pass  # already closed


__all__ = ["SshEndpoint", "Sshd", "find_sshd", "session_env", "sshd_config", "start_sshd"]
