"""The process runtime: a task is a process group of the agent's host.

- ``bind_mounts`` are made in a private mount namespace of the task (util-linux
  ``unshare --mount``, with ``--user --map-root-user`` when the agent is not root), so
  the host and other tasks never see them; ``read_only`` remounts the bind read-only;
  ``propagation`` is applied with ``mount --make-*``. A missing mount point is created
  on the host (an empty directory, or an empty file for a file). Agents that cannot
  create a mount namespace report so at registration, and the master refuses
  experiments with bind mounts in pools of such agents only.
- ``environment.python_requirements`` runs the task in a cached virtual environment
  (:mod:`.python_env`).
- ``resources.shm_size``, ``resources.devices`` and the capabilities cannot be applied
  to a host process: they are warned about in the task's logs.
- ``startup-hook.sh`` is sourced before the entrypoint (:func:`.base.startup_hook_script`).

Every task is started under its own supervisor (:mod:`dauntless.agent._shim`), which
holds its output, outlives the agent for ``orphan_grace_period`` seconds (an agent
started again adopts the task) and then ends every process of the task. A single-rank
trial that the agent's warm worker can fork (:mod:`dauntless.agent._warm`,
docs/warm-start.md) is forked by it under a supervisor the worker forks too, with the
same state directory, so it is adopted as any other.

A task of another Unix identity than the agent's (a root agent's) runs isolated in
PID and mount namespaces of its own as that identity (:mod:`dauntless.agent._identity`);
its bind mounts are made in that mount namespace, before the identity is dropped.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from .base import (
    LogFn,
    PrepareError,
    Runtime,
    TaskHandle,
    TaskLaunch,
    startup_hook_script,
    with_python,
)
from .python_env import PythonEnvironments, read_requirements

if TYPE_CHECKING:
    from .._warm import WarmStarter


def mount_namespace_prefix() -> tuple[list[str] | None, str]:
    """The argv prefix that runs a command in a new private mount namespace, if this
    agent may make one, tried for real.

    Returns:
        ``(prefix, "")``, or ``(None, why not)``.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return None, "unshare (util-linux) is not installed"
    if os.geteuid() == 0:
        prefix = [unshare, "--mount", "--propagation", "private"]
    else:
        prefix = [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"]
    try:
        res = subprocess.run(
            [*prefix, "--", "sh", "-c", "mount --bind / /mnt 2>/dev/null || mount -t tmpfs x /mnt"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"unshare failed: {exc}"
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip().splitlines()
        return None, f"cannot create a mount namespace: {why[-1] if why else res.returncode}"
    return prefix, ""


def _runs_agent_python(argv: list[str]) -> bool:
    """Whether ``argv`` starts the agent's Python (a trial's launcher, a service's
    ``python -m``); a shell command may or may not, and is not checked."""
    names = ("python", "python3", f"python3.{sys.version_info[1]}")
    return sys.executable in argv or os.path.basename(argv[0]) in names


def bind_mount_script(mounts: list[Any]) -> str:
    """``sh`` lines that make ``mounts`` (:class:`.base.BindMountSpec`) inside a fresh
    mount namespace; the first failure ends the script with its exit code."""
    lines = ["set -e"]
    for m in mounts:
        host, target = shlex.quote(m.host_path), shlex.quote(m.container_path)
        lines.append(
            f"if [ -d {host} ]; then mkdir -p -- {target}; "
            f'elif [ ! -e {target} ]; then mkdir -p -- "$(dirname -- {target})"; '
            f": > {target}; fi"
        )
        lines.append(f"mount --bind -- {host} {target}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro -- {target}")
        lines.append(f"mount --make-{m.propagation} -- {target}")
    lines.append("set +e")
    return "\n".join(lines) + "\n"


class ProcessRuntime(Runtime):
    """Tasks as processes of the agent's host; see the module docstring.

    Args:
        envs_dir: where cached Python environments live.
        namespace_prefix: the ``unshare`` argv prefix, or None when this agent cannot
            make mount namespaces; probed with :func:`mount_namespace_prefix` when not
            given.
    """

    name = "process"
    containers = False

    _PROBE = object()

    def __init__(
        self,
        envs_dir: str,
        namespace_prefix: list[str] | None | object = _PROBE,
    ) -> None:
        if namespace_prefix is ProcessRuntime._PROBE:
            prefix, self.namespace_reason = mount_namespace_prefix()
        else:
            prefix, self.namespace_reason = namespace_prefix, "disabled"  # type: ignore[assignment]
        self.namespace_prefix: list[str] | None = prefix  # type: ignore[assignment]
        self.envs = PythonEnvironments(envs_dir)
        self.warm: WarmStarter | None = None
        """The agent's fork server, when warm trial start is on (set by the agent)."""
        self.log = logging.getLogger("dauntless.agent")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "mount_namespace": self.namespace_prefix is not None}

    def prepare(self, launch: TaskLaunch, log: LogFn) -> None:
        if launch.isolated and _runs_agent_python(launch.argv):
            from .._identity import check_python_runnable

            check_python_runnable(launch.user)  # the harness, launcher, services
        spec = launch.environment
        # (an isolated task has a mount namespace of its own: its mounts are made there)
        if spec.bind_mounts and self.namespace_prefix is None and not launch.isolated:
            raise PrepareError(
                "bind_mounts: this agent cannot create a private mount namespace "
                f"({self.namespace_reason}); run it as root or allow unprivileged user "
                "namespaces, or use a container runtime",
                fatal=True,
            )
        for m in spec.bind_mounts:
            if not os.path.exists(m.host_path):
                raise PrepareError(
                    f"bind_mounts: host_path {m.host_path} does not exist on agent "
                    f"{launch.agent_id or '(this agent)'}"
                )
        if spec.shm_size is not None:
            log(
                "stderr",
                f"warning: resources.shm_size ({spec.shm_size} bytes) is not applied by the "
                "process runtime: the task uses the host's /dev/shm",
            )
        if spec.devices:
            log(
                "stderr",
                "warning: resources.devices is not applied by the process runtime: the task "
                "sees the host's devices at their host paths",
            )
        if spec.add_capabilities or spec.drop_capabilities:
            log(
                "stderr",
                "warning: environment.add_capabilities/drop_capabilities are not applied by "
                "the process runtime: the task has the agent's privileges",
            )
        if spec.pod_spec:
            log("stderr", "warning: environment.pod_spec applies to Kubernetes only; ignored")
        if spec.force_pull_image or spec.registry_auth:
            log(
                "stderr",
                "warning: environment.force_pull_image/registry_auth apply to images only; "
                "this task names no environment.image",
            )
        if spec.python_requirements is not None:
            lines = read_requirements(spec.python_requirements, launch.work_dir)
            if lines:
                # An isolated task's environment is built as its identity: pip runs
                # code of the requirements (setup.py), never as the agent's root.
                env_dir = self.envs.ensure(
                    lines, launch.work_dir, log, user=launch.user if launch.isolated else None
                )
                launch.python = os.path.join(env_dir, "bin", "python")

    def command(self, launch: TaskLaunch) -> list[str]:
        """The full argv this runtime's shim starts for a prepared task."""
        from .._identity import isolated_command

        argv = with_python(launch.argv, launch.python)
        script = startup_hook_script()
        inner = ["sh", "-c", script, "sh", *argv]
        mounts = list(launch.environment.bind_mounts)
        if launch.isolated:  # mounts as root in the task's namespace, then its identity
            return isolated_command(
                launch.user, inner, bind_mount_script(mounts) if mounts else None
            )
        if mounts:
            assert self.namespace_prefix is not None  # prepare() refused otherwise
            script = bind_mount_script(mounts) + script
            inner = [*self.namespace_prefix, "--", "sh", "-c", script, "sh", *argv]
        return inner

    def task_env(self, launch: TaskLaunch) -> dict[str, str]:
        """The task's variables, with a built Python environment first on ``PATH``."""
        env = dict(launch.env)
        if launch.python is not None:
            venv = os.path.dirname(os.path.dirname(launch.python))
            env["VIRTUAL_ENV"] = venv
            env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
        return env

    def start(self, launch: TaskLaunch) -> TaskHandle:
        from .._supervise import start_shim

        warm = self._start_warm(launch)
        if warm is not None:
            return warm
        return start_shim(
            launch.state_path(),
            self.command(launch),
            self.task_env(launch),
            launch.cwd or launch.work_dir,
            launch.grace,
            {"allocation_id": launch.allocation_id, "runtime": self.name},
            status_fd=launch.isolated,
        )

    def _start_warm(self, launch: TaskLaunch) -> TaskHandle | None:
        """Fork the task from the warm worker when it may be (:mod:`.._warm`); None: start
        it cold."""
        from .._warm import warm_request

        if self.warm is None or launch.isolated:  # the worker cannot isolate a task
            return None
        if launch.python is not None or launch.environment.bind_mounts:
            return None
        if launch.environment.image is not None:
            return None
        request = warm_request(
            launch.argv, self.task_env(launch), launch.cwd or launch.work_dir, self.warm.env
        )
        if request is None:
            return None
        # A server still importing torch is ready sooner than a cold start would be (that
        # imports torch too, competing for the same CPUs): wait for it (this runs in the
        # task's prepare thread, not the agent's loop).
        if not self.warm.ready() and not self.warm.wait_if_starting():
            return None
        from .._supervise import make_state_dir

        # Under a supervisor of its own, as a cold start: it outlives the agent and is
        # adopted by the agent started again (docs/partitions.md).
        directory = launch.state_path()
        env = self.task_env(launch)
        meta = {"allocation_id": launch.allocation_id, "runtime": self.name}
        try:
            make_state_dir(
                directory, launch.argv, env, launch.cwd or launch.work_dir, launch.grace, meta
            )
            return self.warm.fork_supervised(request, directory)
        except OSError as exc:
            self.log.warning("task %s starts cold: %s", launch.allocation_id, exc)
            shutil.rmtree(directory, ignore_errors=True)
            return None
