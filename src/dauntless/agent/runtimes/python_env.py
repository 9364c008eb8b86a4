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

A task isolated as another Unix identity (a root agent's, :mod:`dauntless.agent._identity`)
gets an environment of that identity's own, ``python-envs/uid-<uid>/<key>``, built by
that identity (venv, pip and every file of it; pip runs the requirements' build code),
so that no task's build runs as root and no identity's environment can be changed by
another. The locks stay in the agent's ``python-envs/.locks`` (root's).
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
from typing import Any

from .base import LogFn, PrepareError

_WRITE_STDIN_TO = "import sys; open(sys.argv[1], 'w').write(sys.stdin.read())"
"""What writes a file of an environment as its identity (``python -c``)."""

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

    def ensure(self, lines: list[str], cwd: str, log: LogFn, user: Any = None) -> str:
        """The environment for these requirements, built now if no ready one exists.

        Args:
            lines: pip requirement lines.
            cwd: where pip runs (relative paths in the requirements resolve from it).
            log: the task's log.
            user: the isolated task's :class:`~dauntless.agent._identity.TaskUser`: the
                environment is that identity's, built as it (see the module); None:
                the agent's.

        Returns:
            The environment's directory.

        Raises:
            PrepareError: (fatal) pip failed; the message holds the end of its output.
        """
        key = environment_key(lines, self.base_python)
        os.makedirs(self.root, exist_ok=True)
        if user is None:
            env_dir = self.path(key)
            lock_path = env_dir + ".lock"
        else:
            uid = user.identity.uid
            home = os.path.join(self.root, f"uid-{uid}")
            if not os.path.isdir(home):
                os.mkdir(home, 0o700)
                os.chown(home, uid, user.identity.gid)
            env_dir = os.path.join(home, key)
            locks = os.path.join(self.root, ".locks")
            os.makedirs(locks, mode=0o700, exist_ok=True)
            lock_path = os.path.join(locks, f"uid-{uid}-{key}.lock")
        with open(lock_path, "w") as lock:
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
                self._build(env_dir, lines, cwd, log, user)
            except BaseException:
                shutil.rmtree(env_dir, ignore_errors=True)
                raise
            ready = json.dumps({"requirements": lines, "built_at": time.time()})
            self._write(os.path.join(env_dir, READY_FILE), ready, user)
            log(
                "stdout",
                f"built Python environment {key} in {time.monotonic() - started:.1f} s",
            )
            return env_dir

    @staticmethod
    def _as(user: Any) -> dict[str, Any]:
        """``subprocess`` arguments that run a build step as ``user`` (nothing: as the
        agent)."""
        if user is None:
            return {}
        ident = user.identity
        return {"user": ident.uid, "group": ident.gid, "extra_groups": list(user.groups)}

    def _write(self, path: str, text: str, user: Any) -> None:
        """Write a file of the environment: as ``user`` into its own environment (never
        as root into a directory another identity owns)."""
        if user is None:
            with open(path, "w") as f:
                f.write(text)
            return
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", _WRITE_STDIN_TO, path],
            input=text,
            text=True,
            check=True,
            timeout=60,
            **self._as(user),
        )

    def _build(
        self, env_dir: str, lines: list[str], cwd: str, log: LogFn, user: Any = None
    ) -> None:
        self._run(
            [self.base_python, "-m", "venv", "--without-pip", env_dir], cwd, log, "venv", user
        )
        purelib = subprocess.run(
            [
                os.path.join(env_dir, "bin", "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
            **self._as(user),
        ).stdout.strip()
        # "import" lines of a .pth run at start-up; addsitedir also reads the .pth files
        # of the agent's site-packages (editable installs).
        pth = "".join(f"import site; site.addsitedir({d!r})\n" for d in _agent_site_dirs())
        self._write(os.path.join(purelib, "_dauntless_agent_site.pth"), pth, user)
        req = os.path.join(env_dir, "requirements.txt")
        self._write(req, "\n".join(lines) + "\n", user)
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
            user,
        )

    def _run(self, argv: list[str], cwd: str, log: LogFn, what: str, user: Any = None) -> None:
        """Run a build step, its output line by line into the task's logs.

        Raises:
            PrepareError: (fatal) it failed; the message holds its last 20 lines.
        """
        tail: deque[str] = deque(maxlen=20)
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PIP_NO_INPUT"] = "1"
        if user is not None:  # its own home and pip cache, not the agent's
            home = os.path.join(self.root, f"uid-{user.identity.uid}")
            env["HOME"] = home
            env["PIP_CACHE_DIR"] = os.path.join(home, ".pip-cache")
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
                **self._as(user),
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
