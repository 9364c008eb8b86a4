"""The container runtimes: tasks in containers started through the ``docker`` or
``podman`` command line (the engines' own, stable interface; no Python client needed).

A task's container (``<cli> run``, attached, so its output is the task's logs and the
client's exit code is the container's):

- image: ``environment.image`` for the slot type of the task's slots; pulled when
  absent or with ``force_pull_image``, the pull's output in the task's logs;
  ``registry_auth`` is written to a private, temporary auth file (``docker --config
  DIR`` / ``podman --authfile FILE``), never onto a command line.
- name ``dauntless-<allocation id>``, labels ``ai.dauntless.agent`` and
  ``ai.dauntless.allocation``: an agent removes its leftovers when it starts again.
- ``--network host``: the task reaches the master and, for distributed trials, its
  peers (rendezvous at ``DET_ADVERTISE_ADDR``) as the agent does.
- the task's work dir (the context) at ``/run/determined/workdir`` (the working
  directory), Dauntless's own package read-only at ``/run/dauntless/lib/dauntless``
  (on ``PYTHONPATH``; the image must have Python >= 3.10 with Dauntless's dependencies,
  as Determined's images have its harness's), shared_fs checkpoint storage and the
  master's CA bundle at their host paths.
- environment variables by name only (``-e NAME``; the values come from the client's
  environment), so tokens never appear in a process list.
- ``bind_mounts`` as ``--mount type=bind,...`` with ``readonly`` and
  ``bind-propagation``; ``resources.shm_size`` as ``--shm-size``; ``resources.devices``
  as ``--device``; capabilities as ``--cap-add``/``--cap-drop``.
- GPUs: the task's cuda slots, ``--gpus "device=0,1"`` (docker) or CDI devices
  ``--device nvidia.com/gpu=0`` (podman); rocm slots get ``/dev/kfd`` and ``/dev/dri``.
- ``startup-hook.sh`` and ``python_requirements`` (``pip install`` at each start, not
  cached) run in the container before the entrypoint.
- the task's Unix identity (issue 29): ``--user UID:GID`` and ``--group-add`` for its
  supplementary groups; its private directory (secret files, a home) at its host path,
  with ``HOME`` there when the user has no home of its own on the agent.
- the ``run`` client runs under the task's supervisor (:mod:`dauntless.agent._shim`):
  an agent started again adopts the container; one that stays away longer than
  ``orphan_grace_period`` gets it removed (``<cli> rm --force``).
- kill: ``<cli> kill --signal``; cleanup: ``<cli> rm --force``.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from typing import Any

import dauntless

from .base import (
    LogFn,
    PrepareError,
    Runtime,
    TaskHandle,
    TaskLaunch,
    startup_hook_script,
    with_python,
)
from .python_env import read_requirements

WORKDIR = "/run/determined/workdir"
"""The task's working directory in its container (Determined's path)."""
LIB_DIR = "/run/dauntless/lib"
"""Where Dauntless's package is mounted in the container (on ``PYTHONPATH``)."""
SHIM_DIR = f"{LIB_DIR}/dauntless/compat/_shim"
"""The `determined` compatibility package in the container (:data:`dauntless.compat.SHIM_PATH`)."""
LABEL_AGENT = "ai.dauntless.agent"
LABEL_ALLOCATION = "ai.dauntless.allocation"
REQUIREMENTS_FILE = ".dauntless-requirements.txt"
CLI_TIMEOUT_SECONDS = 60.0
"""Longest a short CLI call (inspect, kill, rm, ps, info) may take."""
PULL_TIMEOUT_SECONDS = 3600.0


def _mount_opt(fields: list[str]) -> str:
    """A ``--mount`` value: CSV, so a path holding a comma is quoted as the CLIs expect."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def container_name(allocation_id: str) -> str:
    """The container's name for an allocation part."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in allocation_id)
    return f"dauntless-{safe}"


class ContainerRuntime(Runtime):
    """Tasks in containers through a docker-compatible CLI; see the module docstring.

    Args:
        cli: the executable (``docker`` or ``podman``, or a path).
        agent_id: labels this agent's containers.
    """

    name = "docker"
    containers = True

    def __init__(self, cli: str, agent_id: str = "") -> None:
        self.cli = cli
        self.agent_id = agent_id

    # ------------------------------------------------------------ engine

    def available(self) -> tuple[bool, str]:
        """Whether the CLI exists and its engine answers ``<cli> version`` (client and
        server; ``info`` can take minutes while podman tidies its storage)."""
        exe = shutil.which(self.cli)
        if exe is None:
            return False, f"{self.cli} is not installed"
        try:
            res = subprocess.run(
                [self.cli, "version"], capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{self.cli} version failed: {exc}"
        if res.returncode != 0:
            lines = (res.stderr or res.stdout).strip().splitlines()
            return False, f"{self.cli} version: {lines[-1] if lines else res.returncode}"
        return True, ""

    def _call(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.cli, *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=CLI_TIMEOUT_SECONDS,
        )

    # ------------------------------------------------------------ registry auth

    def _auth_args(self, auth: dict[str, Any], scratch: str) -> list[str]:
        """Write ``registry_auth`` to a private auth file; the CLI options that use it."""
        server = auth.get("serveraddress") or "https://index.docker.io/v1/"
        entry: dict[str, str] = {}
        if auth.get("auth"):
            entry["auth"] = str(auth["auth"])
        elif auth.get("username") is not None:
            pair = f"{auth.get('username')}:{auth.get('password', '')}"
            entry["auth"] = base64.b64encode(pair.encode()).decode()
        if auth.get("identitytoken"):
            entry["identitytoken"] = str(auth["identitytoken"])
        path = os.path.join(scratch, "config.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"auths": {server: entry}}, f)
        return self._auth_options(scratch, path)

    def _auth_options(self, scratch_dir: str, auth_file: str) -> list[str]:
        """Global options placed before ``pull`` (docker: a config directory)."""
        return ["--config", scratch_dir]

    def pull_command(self, image: str, auth_opts: list[str]) -> list[str]:
        """The argv that pulls ``image``."""
        return [self.cli, *auth_opts, "pull", image]

    # ------------------------------------------------------------ lifecycle

    def prepare(self, launch: TaskLaunch, log: LogFn) -> None:
        spec = launch.environment
        image = spec.image_for(launch.slot_type)
        if image is None:
            raise PrepareError(
                f"environment.image names no image for {launch.slot_type} slots ({spec.image!r})",
                fatal=True,
            )
        if spec.pod_spec:
            log("stderr", "warning: environment.pod_spec applies to Kubernetes only; ignored")
        for m in spec.bind_mounts:
            if not os.path.exists(m.host_path):
                raise PrepareError(
                    f"bind_mounts: host_path {m.host_path} does not exist on agent "
                    f"{launch.agent_id or '(this agent)'}"
                )
        if spec.python_requirements is not None:
            lines = read_requirements(spec.python_requirements, launch.work_dir)
            with open(os.path.join(launch.work_dir, REQUIREMENTS_FILE), "w") as f:
                f.write("\n".join(lines) + "\n")
        present = False
        if not spec.force_pull_image:
            present = self._call("image", "inspect", image).returncode == 0
        if present:
            log("stdout", f"image {image} is present; not pulling")
            return
        with tempfile.TemporaryDirectory(prefix="dauntless-auth-") as scratch:
            opts = self._auth_args(spec.registry_auth, scratch) if spec.registry_auth else []
            argv = self.pull_command(image, opts)
            log("stdout", f"pulling image {image}")
            code, tail = _stream(argv, log, PULL_TIMEOUT_SECONDS)
        if code != 0:
            raise PrepareError(f"pulling image {image} failed (exit code {code}):\n{tail}", code)

    def gpu_args(self, launch: TaskLaunch) -> list[str]:
        """Options that give the container the task's GPUs (docker: ``--gpus``)."""
        if launch.slot_type == "cuda" and launch.slot_ids:
            return ["--gpus", '"device=' + ",".join(launch.slot_ids) + '"']
        return []

    def run_command(self, launch: TaskLaunch) -> list[str]:
        """The full ``run`` argv for a prepared task."""
        spec = launch.environment
        image = spec.image_for(launch.slot_type)
        assert image is not None  # prepare() refused otherwise
        name = container_name(launch.allocation_id)
        argv = [
            self.cli,
            "run",
            "--name",
            name,
            "--label",
            f"{LABEL_AGENT}={launch.agent_id or self.agent_id}",
            "--label",
            f"{LABEL_ALLOCATION}={launch.allocation_id}",
            "--network",
            "host",
            "--workdir",
            WORKDIR,
            "--entrypoint",
            "sh",
            "--mount",
            _mount_opt(["type=bind", f"source={launch.work_dir}", f"target={WORKDIR}"]),
            "--mount",
            _mount_opt(
                [
                    "type=bind",
                    f"source={os.path.dirname(os.path.abspath(dauntless.__file__))}",
                    f"target={LIB_DIR}/dauntless",
                    "readonly",
                ]
            ),
        ]
        for path in spec.storage_paths:
            argv += ["--mount", _mount_opt(["type=bind", f"source={path}", f"target={path}"])]
        if launch.private_dir:  # the task's secret files (and home), at their host path
            argv += [
                "--mount",
                _mount_opt(
                    [
                        "type=bind",
                        f"source={launch.private_dir}",
                        f"target={launch.private_dir}",
                    ]
                ),
            ]
        if launch.user is not None:  # the task's Unix identity
            ident = launch.user.identity
            argv += ["--user", f"{ident.uid}:{ident.gid}"]
            for gid in launch.user.groups:
                if gid != ident.gid:
                    argv += ["--group-add", str(gid)]
        cert = launch.env.get("DET_MASTER_CERT_FILE")
        if cert and os.path.isabs(cert):
            argv += [
                "--mount",
                _mount_opt(["type=bind", f"source={cert}", f"target={cert}", "readonly"]),
            ]
        for m in spec.bind_mounts:
            fields = ["type=bind", f"source={m.host_path}", f"target={m.container_path}"]
            if m.read_only:
                fields.append("readonly")
            fields.append(f"bind-propagation={m.propagation}")
            argv += ["--mount", _mount_opt(fields)]
        if spec.shm_size is not None:
            argv += ["--shm-size", str(spec.shm_size)]
        for d in spec.devices:
            argv += ["--device", f"{d.host_path}:{d.container_path}:{d.mode}"]
        for cap in spec.add_capabilities:
            argv += ["--cap-add", cap]
        for cap in spec.drop_capabilities:
            argv += ["--cap-drop", cap]
        argv += self.gpu_args(launch)
        if launch.slot_type == "rocm":
            argv += ["--device", "/dev/kfd", "--device", "/dev/dri"]
        for key in sorted(self.container_env(launch)):
            argv += ["--env", key]
        python = launch.env.get("DET_PYTHON_EXECUTABLE", "python3")
        script = startup_hook_script()
        if spec.python_requirements is not None:
            pip = (
                f"{shlex.quote(python)} -m pip install --user --disable-pip-version-check "
                f"--no-input -r {REQUIREMENTS_FILE}"
            )
            script = (
                'echo "building environment (pip, in the container)"\n'
                f'{pip} || {{ rc=$?; echo "pip install failed with exit code $rc" >&2; '
                "exit $rc; }\n" + script
            )
        argv += [image, "-c", script, "sh", *with_python(launch.argv, python)]
        return argv

    def container_env(self, launch: TaskLaunch) -> dict[str, str]:
        """The variables the container gets (passed by name)."""
        env = {
            k: v
            for k, v in launch.env.items()
            if k not in ("PATH", "HOME", "HOSTNAME", "PWD", "SHLVL", "VIRTUAL_ENV", "_")
            and not k.startswith(("LC_", "PYENV", "CUDA_VISIBLE_DEVICES"))
        }
        # The host's PYTHONPATH (the task's work dir first) means nothing inside. As on
        # the host, the `determined` compatibility package (dauntless.compat) comes before
        # the image's site-packages, so model code for Determined imports ours, not a
        # `determined` the image may have installed.
        env["PYTHONPATH"] = os.pathsep.join([WORKDIR, SHIM_DIR, LIB_DIR])
        home = launch.env.get("HOME", "")
        if launch.private_dir and home.startswith(launch.private_dir + os.sep):
            env["HOME"] = home  # the private home, mounted at the same path
        env["DET_CONTAINER_ID"] = container_name(launch.allocation_id)
        return env

    def start(self, launch: TaskLaunch) -> TaskHandle:
        from .._supervise import start_shim

        env = dict(os.environ)
        env.update(self.container_env(launch))
        name = container_name(launch.allocation_id)
        return start_shim(
            launch.state_path(),
            self.run_command(launch),
            env,
            launch.work_dir,
            launch.grace,
            {"allocation_id": launch.allocation_id, "runtime": self.name},
            on_orphan=[self.cli, "rm", "--force", name],
            name=name,
        )

    def signal(self, handle: TaskHandle, sig: int) -> None:
        import signal as _signal

        name = _signal.Signals(sig).name
        try:
            self._call("kill", "--signal", name, handle.name or "")
        except (OSError, subprocess.SubprocessError):
            pass
        if sig == _signal.SIGKILL:  # the client too, should the engine not answer
            super().signal(handle, sig)

    def cleanup(self, handle: TaskHandle) -> None:
        if handle.name:
            try:
                self._call("rm", "--force", handle.name)
            except (OSError, subprocess.SubprocessError):
                pass
        super().cleanup(handle)

    def cleanup_orphans(self, agent_id: str, keep: frozenset[str] = frozenset()) -> list[str]:
        try:
            res = self._call(
                "ps",
                "--all",
                "--filter",
                f"label={LABEL_AGENT}={agent_id}",
                "--format",
                f'{{{{.ID}}}} {{{{.Label "{LABEL_ALLOCATION}"}}}}',
            )
        except (OSError, subprocess.SubprocessError):
            return []
        ids = []
        for line in res.stdout.splitlines() if res.returncode == 0 else []:
            cid, _, alloc = line.strip().partition(" ")
            if cid and alloc.strip() not in keep:  # an adopted task's container stays
                ids.append(cid)
        if ids:
            try:
                self._call("rm", "--force", *ids)
            except (OSError, subprocess.SubprocessError):
                return []
        return ids


class DockerRuntime(ContainerRuntime):
    """Containers through the ``docker`` CLI."""

    name = "docker"

    def __init__(self, agent_id: str = "", cli: str = "docker"):
        super().__init__(cli, agent_id)


class PodmanRuntime(ContainerRuntime):
    """Containers through the ``podman`` CLI (GPUs as CDI devices)."""

    name = "podman"

    def __init__(self, agent_id: str = "", cli: str = "podman"):
        super().__init__(cli, agent_id)

    def _auth_options(self, scratch_dir: str, auth_file: str) -> list[str]:
        return []  # podman takes the file as an option of pull

    def _auth_args(self, auth: dict[str, Any], scratch: str) -> list[str]:
        super()._auth_args(auth, scratch)
        return ["--authfile", os.path.join(scratch, "config.json")]

    def pull_command(self, image: str, auth_opts: list[str]) -> list[str]:
        return [self.cli, "pull", *auth_opts, image]

    def gpu_args(self, launch: TaskLaunch) -> list[str]:
        if launch.slot_type == "cuda":
            return [a for sid in launch.slot_ids for a in ("--device", f"nvidia.com/gpu={sid}")]
        return []


def _stream(argv: list[str], log: LogFn, timeout: float) -> tuple[int, str]:
    """Run ``argv``, each output line into the task's logs; its exit code and last lines."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return 127, str(exc)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        log("stdout", line)
        tail = (tail + [line])[-20:]
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return code, "\n".join(tail)
