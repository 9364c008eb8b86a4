"""A real OpenID Provider for the single sign-on tests: npm's ``oidc-provider`` (a certified
OpenID Connect implementation) run by ``tests/oidc/provider.mjs`` with Node.

``scripts/test.sh`` installs the package under ``.venv/oidc-provider``. :func:`start`
raises :class:`ProviderUnavailable` saying why when Node or the package is missing or
the provider does not start, and the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / ".venv" / "oidc-provider" / "node_modules" / "oidc-provider" / "lib" / "index.js"
SCRIPT = REPO / "tests" / "oidc" / "provider.mjs"


class ProviderUnavailable(RuntimeError):
    """The provider cannot run here; the message says why."""


@dataclass
class Provider:
    """A running provider.

    Attributes:
        issuer: its issuer URL (``http://127.0.0.1:<port>``).
        client_id, client_secret: the one client registered with it.
        proc: the Node process.
        log: its output.
    """

    issuer: str
    client_id: str
    client_secret: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop the provider (its state is in its memory only)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    tmp: Path,
    redirect_uris: list[str],
    accounts: dict[str, dict[str, Any]],
    timeout: float = 60.0,
) -> Provider:
    """Start a provider with one confidential client.

    Args:
        tmp: a directory for its config and log.
        redirect_uris: the client's registered redirect URIs.
        accounts: claims by login name (``email``, ``name``, ``groups``).
        timeout: seconds to wait for it to listen.

    Raises:
        ProviderUnavailable: Node or the package is missing, or it did not start.
    """
    node = shutil.which("node")
    if node is None:
        raise ProviderUnavailable("node is not installed")
    if not PACKAGE.is_file():
        raise ProviderUnavailable(
            "npm's oidc-provider is not installed under .venv/oidc-provider (scripts/test.sh)"
        )
    port = free_port()
    config = {
        "module": str(PACKAGE),
        "port": port,
        "client_id": "dauntless-master",
        "client_secret": "client-secret-" + os.urandom(12).hex(),
        "redirect_uris": redirect_uris,
        "accounts": accounts,
    }
    path = tmp / "oidc-provider.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    log = tmp / "oidc-provider.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [node, str(SCRIPT), str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    issuer = f"http://127.0.0.1:{port}"
    provider = Provider(issuer, config["client_id"], config["client_secret"], proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ProviderUnavailable(f"oidc-provider exited: {log.read_text()[-2000:]}")
        if b"listening " in log.read_bytes():
            return provider
        time.sleep(0.05)
    provider.stop()
    raise ProviderUnavailable(f"oidc-provider did not start in {timeout} s: {log.read_text()}")
