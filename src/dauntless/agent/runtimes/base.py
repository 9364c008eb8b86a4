"""The interface every task runtime implements, and what the runtimes share.

A *runtime* is how the agent runs one task (a trial part, a command, a notebook ...) on
its node: as a plain process (:mod:`.process`), or in a container through the
``docker`` or ``podman`` CLI (:mod:`.container`). The agent drives every task through
the same six calls, in this order:

1. :meth:`Runtime.prepare`: slow, once per task, in a background thread: pull an image,
   build a Python environment. Progress goes to the task's logs. Raises
   :class:`PrepareError` when the task cannot run.
2. :meth:`Runtime.start`: start the task; returns a :class:`TaskHandle`.
3. :meth:`Runtime.logs`: the handle's output streams, which the agent ships as logs.
4. :meth:`Runtime.signal`: deliver SIGTERM / SIGKILL (a kill the master ordered).
5. :meth:`Runtime.wait`: the exit code, or None while it runs.
6. :meth:`Runtime.cleanup`: remove what the task left (a container, auth files).

What a task asks of its environment travels from the master in the TaskSpec's
``environment`` object (docs/protocol.md) and is read here as an
:class:`EnvironmentSpec`.
"""

from __future__ import annotations

import abc
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

LogFn = Callable[[str, str], None]
"""``log(stdtype, line)``: add a line to the task's logs (``stdout`` or ``stderr``)."""

STARTUP_HOOK = "startup-hook.sh"
"""The file in the context directory that runs, sourced by ``sh``, before the entrypoint."""


class PrepareError(Exception):
    """A task cannot be started in its environment.

    Attributes:
        message: one or more lines saying why (pip's error, the runtime's refusal).
        exit_code: the failed tool's exit code, or None.
        fatal: True when a restart of the task cannot help (a Python environment that
            does not build): the master ends the trial without counting a restart.
    """

    def __init__(self, message: str, exit_code: int | None = None, fatal: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.fatal = fatal


@dataclass(frozen=True)
class BindMountSpec:
    """One bind mount: ``host_path`` seen by the task at ``container_path``."""

    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


@dataclass(frozen=True)
class DeviceSpec:
    """One host device given to a container (``--device host:container:mode``)."""

    host_path: str
    container_path: str
    mode: str = "mrw"


@dataclass(frozen=True)
class EnvironmentSpec:
    """What a task asks of its environment (the TaskSpec's ``environment``).

    Attributes:
        image: the container image, a name or a ``{cpu, cuda, rocm}`` map (``gpu`` is
            an old name for ``cuda``); None runs the task as a process.
        force_pull_image: pull even when the image is present.
        registry_auth: Docker's auth fields (``username``, ``password``,
            ``serveraddress``, or ``auth``) for pulling the image.
        bind_mounts: host paths the task sees at other paths.
        shm_size: bytes of ``/dev/shm`` in a container; None for the runtime's default.
        devices: host devices for a container.
        add_capabilities, drop_capabilities: Linux capabilities of a container.
        python_requirements: pip requirements (a list), a requirements file in the
            context directory (a str), or None.
        storage_paths: host directories (shared_fs checkpoint storage) a container
            sees at the same path, writable.
        pod_spec: set when the config had a Kubernetes pod spec (warned about).
    """

    image: str | dict[str, str] | None = None
    force_pull_image: bool = False
    registry_auth: dict[str, Any] | None = None
    bind_mounts: tuple[BindMountSpec, ...] = ()
    shm_size: int | None = None
    devices: tuple[DeviceSpec, ...] = ()
    add_capabilities: tuple[str, ...] = ()
    drop_capabilities: tuple[str, ...] = ()
    python_requirements: list[str] | str | None = None
    storage_paths: tuple[str, ...] = ()
    pod_spec: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> EnvironmentSpec:
        """Read the TaskSpec's ``environment`` (absent from older masters: no demands).

        Raises:
            ValueError: a malformed entry.
        """
        if not data:
            return cls()
        try:
            return cls(
                image=data.get("image"),
                force_pull_image=bool(data.get("force_pull_image", False)),
                registry_auth=data.get("registry_auth"),
                bind_mounts=tuple(BindMountSpec(**m) for m in data.get("bind_mounts", [])),
                shm_size=data.get("shm_size"),
                devices=tuple(DeviceSpec(**d) for d in data.get("devices", [])),
                add_capabilities=tuple(data.get("add_capabilities", [])),
                drop_capabilities=tuple(data.get("drop_capabilities", [])),
                python_requirements=data.get("python_requirements"),
                storage_paths=tuple(data.get("storage_paths", [])),
                pod_spec=bool(data.get("pod_spec", False)),
            )
        except TypeError as exc:
            raise ValueError(f"malformed task environment: {exc}") from None

    def image_for(self, slot_type: str) -> str | None:
        """The image for a slot type; None when there is none for it."""
        if self.image is None or isinstance(self.image, str):
            return self.image
        if slot_type == "cuda":
            return self.image.get("cuda") or self.image.get("gpu")
        return self.image.get(slot_type)


@dataclass
class TaskLaunch:
    """One task as the agent hands it to a runtime.

    Attributes:
        allocation_id: the allocation part's id (names containers, tags logs).
        argv: the command, as it would run as a process of the agent's Python
            (``sys.executable`` in it is replaced by the environment's Python).
        work_dir: the task's directory on the host, holding the unpacked context.
        env: the task's environment variables (the agent's, the master's, the config's).
        slot_ids: the agent's slot ids given to the task.
        slot_type: ``cpu``, ``cuda`` or ``rocm``: the type of those slots (``cpu`` for
            a zero-slot task).
        environment: the task's environment demands.
        agent_id: the agent's id (labels containers, for cleanup after a restart).
        python: filled by :meth:`Runtime.prepare` with the environment's Python, when it
            built one.
        cwd: the directory a process runtime starts the task in (a command's or
            notebook's ``work_dir``); None: ``work_dir``.
        user: how the task runs as its Unix identity
            (:class:`dauntless.agent._identity.TaskUser`); None: as the agent does.
        private_dir: the task's own directory (its secret files; its home when it has
            none), mounted into containers at the same path; None: none.
        state_dir: the task's state directory (its shim's files,
            :mod:`dauntless.agent._supervise`); None:
            ``<work_dir's parent>/.tasks/<allocation id>``.
        grace: seconds the task may outlive its agent (``orphan_grace_period``).
    """

    allocation_id: str
    argv: list[str]
    work_dir: str
    env: dict[str, str]
    slot_ids: list[str] = field(default_factory=list)
    slot_type: str = "cpu"
    environment: EnvironmentSpec = field(default_factory=EnvironmentSpec)
    agent_id: str = ""
    python: str | None = None
    cwd: str | None = None
    user: Any = None
    private_dir: str | None = None
    state_dir: str | None = None
    grace: float = 180.0

    def state_path(self) -> str:
        """The task's state directory (see :attr:`state_dir`)."""
        if self.state_dir is not None:
            return self.state_dir
        parent = os.path.dirname(os.path.abspath(self.work_dir))
        return os.path.join(parent, ".tasks", self.allocation_id)

    @property
    def isolated(self) -> bool:
        """Whether the task runs isolated as another identity (a root agent's)."""
        return bool(self.user is not None and self.user.isolate)


class TaskHandle:
    """A started task: its process (for a container: the attached ``run`` client).

    Attributes:
        proc: the process the agent started.
        name: the container's name, or None for a process.
        cleanup_paths: files to remove at cleanup (registry credentials).
    """

    def __init__(self, proc: subprocess.Popen, name: str | None = None) -> None:
        self.proc = proc
        self.name = name
        self.cleanup_paths: list[str] = []

    @property
    def pid(self) -> int:
        """The started process's id."""
        return self.proc.pid

    def poll(self) -> int | None:
        """The exit code once the task has exited, else None."""
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, waiting up to ``timeout`` seconds (None: until it exits);
        None while it runs."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the task's process group (gone already: nothing)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def remove(self) -> None:
        """Remove what the handle keeps on disk (nothing for a plain process)."""

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.proc.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self.proc.stderr


class Runtime(abc.ABC):
    """How tasks run on this agent; see the module docstring for the call order."""

    name: str = ""
    """``process``, ``docker`` or ``podman``."""
    containers: bool = False
    """Whether it runs tasks that name an image."""

    @abc.abstractmethod
    def prepare(self, launch: TaskLaunch, log: LogFn) -> None:
        """Make the task's environment ready (may take minutes; not on the heartbeat
        thread). Warnings about fields this runtime cannot honour go to ``log``.

        Raises:
            PrepareError: the task cannot run here; the message goes to its logs.
        """

    @abc.abstractmethod
    def start(self, launch: TaskLaunch) -> TaskHandle:
        """Start the task after :meth:`prepare`.

        Raises:
            OSError: the process could not be started.
        """

    def signal(self, handle: TaskHandle, sig: int) -> None:
        """Deliver ``sig`` to every process of the task (gone already: nothing)."""
        handle.signal(sig)

    def wait(self, handle: TaskHandle, timeout: float | None = 0) -> int | None:
        """The task's exit code, waiting up to ``timeout`` seconds (None: until it
        exits; 0: do not wait); None while it runs."""
        if timeout == 0:
            return handle.poll()
        return handle.wait(timeout)

    def logs(self, handle: TaskHandle) -> list[tuple[str, IO[bytes]]]:
        """The task's output streams as ``[(stdtype, stream)]``, read to EOF by the agent
        (none for a task under a shim: the agent follows its output file)."""
        out = []
        if handle.stdout is not None:
            out.append(("stdout", handle.stdout))
        if handle.stderr is not None:
            out.append(("stderr", handle.stderr))
        return out

    def cleanup(self, handle: TaskHandle) -> None:
        """Remove what the task left behind, once it has exited."""
        for path in handle.cleanup_paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        handle.cleanup_paths.clear()
        handle.remove()

    def cleanup_orphans(self, agent_id: str, keep: frozenset[str] = frozenset()) -> list[str]:
        """Remove tasks an earlier run of this agent left running (after a crash),
        except those of the allocation parts in ``keep`` (adopted).

        Returns:
            What was removed (container ids); empty for runtimes whose tasks die with
            the agent.
        """
        return []

    def describe(self) -> dict[str, Any]:
        """What the agent reports to the master at registration (``runtime``)."""
        return {"name": self.name, "containers": self.containers}


def startup_hook_script() -> str:
    """The ``sh`` script that sources ``startup-hook.sh`` (when the context has one) and
    then execs its arguments.

    As in Determined, the hook is sourced with ``set -e``, so variables it exports reach
    the entrypoint and its first failing command ends the task; the exit code is the
    hook's, and a line saying so goes to stderr.
    """
    hook = f"./{STARTUP_HOOK}"
    return (
        f"if [ -f {hook} ]; then\n"
        f'  echo "running {STARTUP_HOOK}" >&2\n'
        "  trap 'rc=$?; [ $rc -eq 0 ] || echo "
        f'"{STARTUP_HOOK} failed with exit code $rc" >&2\' EXIT\n'
        "  set -e\n"
        f"  . {hook}\n"
        "  set +e\n"
        "  trap - EXIT\n"
        "fi\n"
        'exec "$@"\n'
    )


def with_python(argv: list[str], python: str | None) -> list[str]:
    """``argv`` with the agent's own Python (``sys.executable``) replaced by ``python``."""
    if python is None:
        return list(argv)
    return [python if a == sys.executable else a for a in argv]


def shell_join(argv: list[str]) -> str:
    """``argv`` quoted for ``sh`` (for log lines)."""
    return " ".join(shlex.quote(a) for a in argv)
