"""The ``local`` provider: an instance is an agent process on the master's machine.

It exists to try dynamic agents out on one machine and to test the provisioner end to
end with real processes. Each instance runs, in its own session (process group), a
shell script: the pool's ``startup_script``, then ``exec`` of
``python -m dauntless.agent`` with the instance's name as agent id and
``instance_type.slots`` artificial slots. The cluster secret reaches the agent through
its environment, never its command line. Processes outlive a master restart; the master
finds them again by name in ``/proc``.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from dauntless._auth import CLUSTER_SECRET_ENV
from dauntless.config import LocalProviderConfig

from ._base import Provider, ProviderError

log = logging.getLogger("dauntless.master.provisioner")


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


class LocalProvider(Provider):
    """Agent processes on this host.

    Args:
        config: the pool's ``provider`` section (``type: local``).
        pool: the resource pool the agents join.
        master_url: the URL agents reach the master at.
        cluster_secret: the secret agents present.
        work_dir: where each instance gets ``<name>/`` (agent work dir) and
            ``<name>.log`` (its output).
        master_cert_file: handed to agents as ``--master-cert-file`` (an HTTPS master).
    """

    kind = "local"

    def __init__(
        self,
        config: LocalProviderConfig,
        pool: str,
        master_url: str,
        cluster_secret: str,
        work_dir: str,
        master_cert_file: str | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.master_url = master_url
        self.secret = cluster_secret
        self.work_dir = Path(work_dir)
        self.master_cert_file = master_cert_file
        self._children: dict[str, subprocess.Popen] = {}

    def _script(self, name: str) -> Path:
        agent = [
            sys.executable,
            "-m",
            "dauntless.agent",
            "--master-url",
            self.master_url,
            "--agent-id",
            name,
            "--resource-pool",
            self.pool,
            "--work-dir",
            str(self.work_dir / name),
            "--artificial-slots",
            str(self.config.instance_type.slots),
            "--slot-type",
            "cpu" if self.config.instance_type.slots else "none",
        ]
        if self.master_cert_file:
            agent += ["--master-cert-file", self.master_cert_file]
        path = self.work_dir / f"{name}.sh"
        path.write_text(
            "#!/bin/bash\n"
            "# startup_script of the pool's provider\n"
            f"{self.config.startup_script}\n"
            f"exec {shlex.join(agent)}\n"
        )
        return path

    def launch(self, name: str) -> str:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        script = self._script(name)
        env = dict(os.environ)
        env[CLUSTER_SECRET_ENV] = self.secret
        env["DAUNTLESS_INSTANCE_NAME"] = name
        env["PYTHONUNBUFFERED"] = "1"
        try:
            with open(self.work_dir / f"{name}.log", "ab") as out:
                proc = subprocess.Popen(
                    ["bash", str(script), name],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(self.work_dir),
                    start_new_session=True,
                )
        except OSError as exc:
            raise ProviderError(f"could not start local instance {name}: {exc}") from exc
        self._children[name] = proc
        log.info("local instance %s started (pid %d)", name, proc.pid)
        return str(proc.pid)

    def _ours(self, pid: int, name: str) -> bool:
        # The script's argv ends with the name; after exec the agent's has --agent-id name.
        return name in _cmdline(pid)

    def terminate(self, name: str, provider_id: str | None) -> None:
        pid = int(provider_id) if provider_id else None
        if pid is None or not self._ours(pid, name):
            found = self.find(name)
            pid = int(found) if found else None
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self._ours(pid, name):
                child = self._children.get(name)
                if child is not None and child.poll() is not None:
                    break
                time.sleep(0.1)
            if self._ours(pid, name):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        child = self._children.pop(name, None)
        if child is not None:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        log.info("local instance %s stopped", name)

    def find(self, name: str) -> str | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                argv = _cmdline(int(entry))
                if (
                    argv
                    and name in argv
                    and any("dauntless" in a or a.endswith(".sh") for a in argv)
                ):
                    return entry
        return None
