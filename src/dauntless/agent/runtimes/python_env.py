"""Cached Python environments for ``environment.python_requirements`` (process runtime).

An environment is a virtual environment (``python -m venv``, no pip of its own) layered
over the agent's own Python: a ``.pth`` file in it adds the agent's site-packages (and
the ``.pth`` files there, so editable installs work), after its own. Packages the agent
already has (torch, Dauntless) are therefore found and not downloaded again; pip
installs only what is missing or pinned to another version, into the new environment.
pip is the agent's own, run against the new interpreter (``pip --python``).

Environments live under ``<agent work dir>/python-envs/<key>``, where the key is a hash
of the requirement lines and the agent's Python; they are built once, under an
exclusive file lock (``flock``, so concurrent tasks and agents sharing the directory
wait for one build), marked ready only when pip succeeded, and reused by later tasks.
A failed build leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import time
from collections import deque

from .base import LogFn, PrepareError

READY_FILE = ".dauntless-env-ready"
"""Written into an environment once pip succeeded; its absence means "build again"."""
PIP_TIMEOUT_SECONDS = 1800.0
"""Longest one environment build may take."""


def read_requirements(requirements: list[str] | str, context_dir: str) -> list[str]:
    """The requirement lines: the list itself, or the lines of a file in the context.

    Raises:
        PrepareError: (fatal) the file is missing or outside the context directory.
    """
    if isinstance(requirements, list):
        return [r.strip() for r in requirements if r.strip()]
    root = os.path.realpath(context_dir)
    path = os.path.realpath(os.path.join(root, requirements))
    if not path.startswith(root + os.sep):
        raise PrepareError(
            f"environment.python_requirements: {requirements!r} is outside the context directory",
            fatal=True,
        )
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except OSError as exc:
        raise PrepareError(
            f"environment.python_requirements: cannot read {requirements!r} in the context "
            f"directory: {exc.strerror}",
            fatal=True,
        ) from None
    return [line for line in lines if line and not line.startswith("#")]


def environment_key(lines: list[str], base_python: str = sys.executable) -> str:
    """The cache key of an environment: SHA-256 (hex, 24 digits) of the requirement
    lines and the base Python (its path and version)."""
    blob = json.dumps({"requirements": lines, "python": base_python, "version": sys.version})
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _agent_site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


class PythonEnvironments:
    """The cached environments of one agent.

    Args:
        root: directory holding them (created on first use).
        base_python: the Python the environments are layered over (the agent's).
    """

    def __init__(self, root: str, base_python: str = sys.executable) -> None:
        self.root = root
        self.base_python = base_python

    def path(self, key: str) -> str:
        """The directory of the environment with this key."""
        return os.path.join(self.root, key)

    def python(self, key: str) -> str:
        """The interpreter of the environment with this key."""
        return os.path.join(self.path(key), "bin", "python")

    def ensure(self, lines: list[str], cwd: str, log: LogFn) -> str:
        """The environment for these requirements, built now if no ready one exists.

        Args:
            lines: pip requirement lines.
            cwd: where pip runs (relative paths in the requirements resolve from it).
            log: the task's log.

        Returns:
            The environment's directory.

        Raises:
            PrepareError: (fatal) pip failed; the message holds the end of its output.
        """
        key = environment_key(lines, self.base_python)
        env_dir = self.path(key)
        os.makedirs(self.root, exist_ok=True)
        with open(env_dir + ".lock", "w") as lock:
            if not os.path.exists(os.path.join(env_dir, READY_FILE)):
                log("stdout", f"waiting for the lock of Python environment {key}")
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if os.path.exists(os.path.join(env_dir, READY_FILE)):
                log("stdout", f"using cached Python environment {key} ({env_dir})")
                return env_dir
            log("stdout", f"building environment {key}: {' '.join(lines)}")
            started = time.monotonic()
            shutil.rmtree(env_dir, ignore_errors=True)
            try:
                self._build(env_dir, lines, cwd, log)
            except BaseException:
                shutil.rmtree(env_dir, ignore_errors=True)
                raise
            with open(os.path.join(env_dir, READY_FILE), "w") as f:
                f.write(json.dumps({"requirements": lines, "built_at": time.time()}))
            log(
                "stdout",
                f"built Python environment {key} in {time.monotonic() - started:.1f} s",
            )
            return env_dir

    def _build(self, env_dir: str, lines: list[str], cwd: str, log: LogFn) -> None:
        self._run([self.base_python, "-m", "venv", "--without-pip", env_dir], cwd, log, "venv")
        purelib = subprocess.run(
            [
                os.path.join(env_dir, "bin", "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with open(os.path.join(purelib, "_dauntless_agent_site.pth"), "w") as f:
            # "import" lines of a .pth run at start-up; addsitedir also reads the .pth
            # files of the agent's site-packages (editable installs).
            for d in _agent_site_dirs():
                f.write(f"import site; site.addsitedir({d!r})\n")
        req = os.path.join(env_dir, "requirements.txt")
        with open(req, "w") as f:
            f.write("\n".join(lines) + "\n")
        self._run(
            [
                self.base_python,
                "-m",
                "pip",
                "--python",
                os.path.join(env_dir, "bin", "python"),
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "-r",
                req,
            ],
            cwd,
            log,
            "pip",
        )

    @staticmethod
    def _run(argv: list[str], cwd: str, log: LogFn, what: str) -> None:
        """Run a build step, its output line by line into the task's logs.

        Raises:
            PrepareError: (fatal) it failed; the message holds its last 20 lines.
        """
        tail: deque[str] = deque(maxlen=20)
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PIP_NO_INPUT"] = "1"
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            raise PrepareError(f"could not run {what}: {exc}", fatal=True) from None
        assert proc.stdout is not None
        deadline = time.monotonic() + PIP_TIMEOUT_SECONDS
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            log("stdout", line)
            if time.monotonic() > deadline:
                proc.kill()
        code = proc.wait()
        if code != 0:
            raise PrepareError(
                f"building the Python environment failed ({what} exited with {code}):\n"
                + "\n".join(tail),
                exit_code=code,
                fatal=True,
            )
