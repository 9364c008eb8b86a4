"""Task runtimes: how an agent runs a task on its node (:mod:`.base` has the interface).

``process`` (always there), and ``docker`` or ``podman`` for tasks that name an image.
An agent's runtime is chosen with ``--runtime`` (``auto``: docker or podman when its
engine answers ``version``, else process) and reported to the master at registration, so
that the master places tasks that need an image, or bind mounts, only on agents that
can honour them.
"""

from __future__ import annotations

import os

from .base import (
    BindMountSpec,
    DeviceSpec,
    EnvironmentSpec,
    PrepareError,
    Runtime,
    TaskHandle,
    TaskLaunch,
    startup_hook_script,
)
from .container import ContainerRuntime, DockerRuntime, PodmanRuntime
from .process import ProcessRuntime, mount_namespace_prefix
from .python_env import PythonEnvironments

__all__ = [
    "BindMountSpec",
    "ContainerRuntime",
    "DeviceSpec",
    "DockerRuntime",
    "EnvironmentSpec",
    "PodmanRuntime",
    "PrepareError",
    "ProcessRuntime",
    "PythonEnvironments",
    "Runtime",
    "RuntimeSet",
    "TaskHandle",
    "TaskLaunch",
    "mount_namespace_prefix",
    "select_runtimes",
    "startup_hook_script",
]


class RuntimeSet:
    """The runtimes of one agent: the process runtime, and at most one container runtime.

    Args:
        process: runs tasks that name no image.
        container: runs tasks that name one; None when the agent has none.
    """

    def __init__(self, process: ProcessRuntime, container: ContainerRuntime | None) -> None:
        self.process = process
        self.container = container

    @property
    def name(self) -> str:
        """The agent's runtime: the container runtime's name, else ``process``."""
        return self.container.name if self.container else self.process.name

    def for_task(self, environment: EnvironmentSpec) -> Runtime:
        """The runtime for a task.

        Raises:
            PrepareError: (fatal) the task names an image and this agent has no
                container runtime (the master should not have sent it here).
        """
        if environment.image is None:
            return self.process
        if self.container is None:
            raise PrepareError(
                "environment.image needs a container runtime; this agent runs tasks as "
                "processes (start it with --runtime docker or podman)",
                fatal=True,
            )
        return self.container

    def describe(self) -> dict[str, object]:
        """The ``runtime`` object of the agent's registration (docs/protocol.md)."""
        return {
            "name": self.name,
            "containers": self.container is not None,
            # bind_mounts of tasks without an image (those with one run in containers)
            "mount_namespace": self.process.namespace_prefix is not None,
        }

    def all(self) -> list[Runtime]:
        """Every runtime of the agent."""
        return [self.process] + ([self.container] if self.container else [])


def select_runtimes(choice: str, work_dir: str, agent_id: str) -> RuntimeSet:
    """The runtimes for ``--runtime CHOICE``.

    Args:
        choice: ``auto``, ``process``, ``docker`` or ``podman``.
        work_dir: the agent's work dir (Python environments go under it).
        agent_id: the agent's id (labels its containers).

    Raises:
        RuntimeError: ``docker``/``podman`` was asked for and its engine does not answer.
        ValueError: an unknown choice.
    """
    process = ProcessRuntime(os.path.join(work_dir, "python-envs"))
    if choice == "process":
        return RuntimeSet(process, None)
    if choice not in ("auto", "docker", "podman"):
        raise ValueError(f"runtime must be auto, process, docker or podman; got {choice!r}")
    names = ["docker", "podman"] if choice == "auto" else [choice]
    reasons = []
    for name in names:
        rt: ContainerRuntime = (DockerRuntime if name == "docker" else PodmanRuntime)(agent_id)
        ok, why = rt.available()
        if ok:
            return RuntimeSet(process, rt)
        reasons.append(why)
    if choice == "auto":
        return RuntimeSet(process, None)
    raise RuntimeError(f"--runtime {choice}: {'; '.join(reasons)}")
