"""Tasks as their owner's Unix identity, isolated from each other (issue 29).

The master resolves the identity a task runs as (the owner's link, else
``security.default_task``; :mod:`dauntless.config._identity`) and sends it in the
TaskSpec's ``identity``. The agent:

- **runs as that identity already** (a non-root agent's own tasks; a root agent's root
  tasks): starts the task as it always did (the warm worker may fork it);
- **is root, and the identity is another**: starts it *isolated*: in a PID namespace
  and a mount namespace of its own (``unshare --pid --fork --mount-proc --kill-child``,
  util-linux), whose process 1 (:mod:`dauntless.agent._nsinit`) drops to the uid, gid
  and supplementary groups (those of the user on this host when it has one of that name
  and uid, else only the gid) before it starts the task with umask 077. The task sees
  only its own processes (``/proc`` is the namespace's), so no other task's environment;
  its work directory, context and secret files belong to it (0700/0600); the agent's
  work dir is 0711 (no listing), the agent's own files (state directories, the warm
  worker's socket) are 0700/0600 root's, and other tasks' directories belong to their
  own uids. Tasks of one identity share that identity's files, as processes of one Unix
  user do: users who must not see each other's work need links of their own;
- **is not root, and the identity is another**: cannot switch; it refuses the task
  (the master does not place it there: the agent reports ``{uid, gid, root,
  pid_namespace}`` at registration).

**Secrets** (``DET_SESSION_TOKEN``, ``DET_USER_TOKEN``, ``DAUNTLESS_SERVICE_TOKEN``)
never go on a command line. They are written to files of mode 0600, owned by the task's
uid, in a directory only it can enter (``<work dir>/.private/<allocation>/secrets``),
and the task gets ``<NAME>_FILE`` naming each; Dauntless's clients read ``NAME``, else
``NAME_FILE`` (:func:`dauntless._auth.read_task_secret`). The variables themselves are
also kept for an isolated task, whose environment no other task can read (its own PID
namespace, its own uid): there Determined code reading ``DET_SESSION_TOKEN`` works as is.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass

from dauntless._auth import TASK_SECRETS
from dauntless.config import TaskIdentity

from ._supervise import NSINIT
from .runtimes.base import PrepareError

PRIVATE_DIR = ".private"
"""Per-task directories of the task's own (secrets, a home when it has none), under the
agent's work dir."""


@dataclass(frozen=True)
class AgentIdentity:
    """Who the agent runs as, and whether it can run tasks as others.

    Attributes:
        uid, gid: the agent's.
        root: whether it runs as root (it may switch to any identity).
        pid_namespace: whether it can make PID namespaces (the isolation of tasks of
            other identities); ``why_not`` says why not.
    """

    uid: int
    gid: int
    root: bool
    pid_namespace: bool
    why_not: str = ""

    @classmethod
    def probe(cls) -> AgentIdentity:
        """This process's identity; as root, a PID namespace is tried for real."""
        uid, gid, root = os.getuid(), os.getgid(), os.geteuid() == 0
        if not root:
            return cls(uid, gid, False, False, "the agent is not root")
        unshare = shutil.which("unshare")
        if unshare is None:
            return cls(uid, gid, True, False, "unshare (util-linux) is not installed")
        try:
            res = subprocess.run(
                [unshare, *UNSHARE_ARGS, "--", "true"], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return cls(uid, gid, True, False, f"unshare failed: {exc}")
        if res.returncode != 0:
            lines = (res.stderr or res.stdout).strip().splitlines()
            return cls(uid, gid, True, False, lines[-1] if lines else f"exit {res.returncode}")
        return cls(uid, gid, True, True)

    def describe(self) -> dict[str, object]:
        """``runtime.identity`` of the agent's registration (docs/protocol.md)."""
        return {
            "uid": self.uid,
            "gid": self.gid,
            "root": self.root,
            "pid_namespace": self.pid_namespace,
        }


UNSHARE_ARGS = ("--pid", "--fork", "--mount-proc", "--kill-child")
"""A new PID namespace (and mount namespace, for its own ``/proc``) whose process 1 dies
(and with it every process in it) when ``unshare`` itself dies."""


@dataclass(frozen=True)
class TaskUser:
    """How a task runs on this agent.

    Attributes:
        identity: its Unix identity.
        groups: its supplementary groups (gids).
        home: its ``HOME``: the user's home on this host when it has one of its own,
            else None (the agent gives it a private one).
        isolate: whether it runs isolated (see the module); False: as the agent runs.
    """

    identity: TaskIdentity
    groups: tuple[int, ...] = ()
    home: str | None = None
    isolate: bool = False


def plan_task_user(identity: TaskIdentity | None, agent: AgentIdentity) -> TaskUser | None:
    """How a task of ``identity`` runs here; None: as the agent itself (a TaskSpec
    without an identity, from an older master).

    Raises:
        PrepareError: (fatal) this agent cannot run tasks as ``identity``.
    """
    if identity is None:
        return None
    if identity.uid == agent.uid and identity.gid == agent.gid:
        return TaskUser(identity)
    if not agent.root:
        raise PrepareError(
            f"this agent runs as uid {agent.uid}, gid {agent.gid} without root, so it cannot "
            f"run tasks as {identity.describe()}; run the agent as root, or link the task's "
            "owner to the agent's identity",
            fatal=True,
        )
    if not agent.pid_namespace:
        raise PrepareError(
            f"this agent cannot isolate tasks of other users ({agent.why_not}), so it does "
            f"not run tasks as {identity.describe()}",
            fatal=True,
        )
    groups: list[int] = [identity.gid]
    home = None
    try:
        entry = pwd.getpwnam(identity.user)
    except KeyError:
        entry = None
    if entry is not None and entry.pw_uid == identity.uid:
        groups = sorted(set(os.getgrouplist(identity.user, identity.gid)))
        try:
            st = os.stat(entry.pw_dir)
            if st.st_uid == identity.uid and os.path.isdir(entry.pw_dir):
                home = entry.pw_dir
        except OSError:
            pass
    return TaskUser(identity, tuple(groups), home, isolate=True)


_RUNNABLE: dict[tuple[int, int], str | None] = {}
"""(uid, gid) -> why the agent's Python cannot be run as them (None: it can)."""


def check_python_runnable(user: TaskUser) -> None:
    """Refuse a task whose identity cannot run the agent's Python (the harness, the
    launcher and the services are Python): a Python under a home other users cannot
    enter (pyenv under ``/root``) would fail every task of another identity with
    "Permission denied". Tried once per identity, as that identity.

    Raises:
        PrepareError: (fatal) naming the interpreter and the identity.
    """
    ident = user.identity
    key = (ident.uid, ident.gid)
    if key not in _RUNNABLE:
        try:
            res = subprocess.run(
                [sys.executable, "-I", "-S", "-c", "pass"],
                capture_output=True,
                text=True,
                timeout=60,
                user=ident.uid,
                group=ident.gid,
                extra_groups=list(user.groups),
                cwd="/",
            )
            why = None if res.returncode == 0 else (res.stderr.strip() or f"exit {res.returncode}")
        except OSError as exc:
            why = str(exc)
        _RUNNABLE[key] = why
    why = _RUNNABLE[key]
    if why is not None:
        raise PrepareError(
            f"the agent's Python ({sys.executable}) cannot be run as {ident.describe()}: "
            f"{why.splitlines()[-1]}; install Dauntless in a Python environment every task "
            "identity can read and run (not under a home others cannot enter, such as /root)",
            fatal=True,
        )


def isolated_command(user: TaskUser, argv: list[str], mounts_script: str | None) -> list[str]:
    """The argv that runs ``argv`` isolated as ``user`` (see the module): ``unshare``,
    then (as root, in the new mount namespace) ``mounts_script`` if given, then
    :mod:`dauntless.agent._nsinit`, which drops to the user and starts ``argv``."""
    unshare = shutil.which("unshare") or "unshare"
    ident = user.identity
    init = [
        sys.executable,
        "-I",
        "-S",
        NSINIT,
        str(ident.uid),
        str(ident.gid),
        ",".join(str(g) for g in user.groups),
        "--",
        *argv,
    ]
    if mounts_script:
        return [
            unshare,
            *UNSHARE_ARGS,
            "--",
            "sh",
            "-c",
            mounts_script + 'exec "$@"\n',
            "sh",
            *init,
        ]
    return [unshare, *UNSHARE_ARGS, "--", *init]


def give(path: str, user: TaskUser, mode: int | None = 0o700) -> None:
    """Make ``path`` and everything under it the task user's (links are not followed);
    ``mode`` for ``path`` itself."""
    uid, gid = user.identity.uid, user.identity.gid
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)
    if mode is not None:
        os.chmod(path, mode)


def private_dir_path(work_dir: str, allocation_id: str) -> str:
    """Where a task's own directory lies (:func:`private_dir`)."""
    return os.path.join(work_dir, PRIVATE_DIR, allocation_id)


def private_dir(work_dir: str, allocation_id: str, user: TaskUser | None) -> str:
    """A fresh directory of the task's own, ``<work dir>/.private/<allocation>``, with
    ``secrets/`` (and, for an isolated task, ``home/``); :func:`move_secrets` makes it
    the task user's. Mode 0700."""
    parent = os.path.join(work_dir, PRIVATE_DIR)
    os.makedirs(parent, mode=0o711, exist_ok=True)
    path = private_dir_path(work_dir, allocation_id)
    shutil.rmtree(path, ignore_errors=True)
    os.mkdir(path, 0o700)
    os.mkdir(os.path.join(path, "secrets"), 0o700)
    if user is not None and user.isolate:
        os.mkdir(os.path.join(path, "home"), 0o700)
    return path


def move_secrets(env: dict[str, str], private: str, user: TaskUser | None) -> dict[str, str]:
    """Write the task's secrets (:data:`dauntless._auth.TASK_SECRETS`) to files of mode
    0600 in ``<private>/secrets`` and name them in ``<NAME>_FILE``; the variables stay
    only for an isolated task (see the module). Then ``private`` becomes the task
    user's.

    Returns:
        The task's variables.
    """
    out = dict(env)
    secrets_dir = os.path.join(private, "secrets")
    for name, filename in TASK_SECRETS.items():
        value = out.get(name)
        if value is None:
            continue
        path = os.path.join(secrets_dir, filename)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value)
        out[name + "_FILE"] = path
        if user is None or not user.isolate:
            del out[name]
    if user is not None and user.isolate:
        ident = user.identity
        out["HOME"] = user.home or os.path.join(private, "home")
        out["USER"] = out["LOGNAME"] = ident.user
        give(private, user)
    return out


def prepare_work_root(work_dir: str, agent: AgentIdentity) -> None:
    """Make the agent's work dir traversable but not listable by tasks of other
    identities (0711), when the agent runs as root; its state directories stay 0700."""
    os.makedirs(work_dir, exist_ok=True)
    if agent.root:
        os.chmod(work_dir, 0o711)
