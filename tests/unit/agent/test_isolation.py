"""A root agent runs a task of another Unix identity isolated (issue 29): as that uid,
gid and groups, in a PID namespace of its own (it sees only its own processes), with
umask 077, its secrets in files only it can read, its bind mounts made in its own mount
namespace, and the agent's files closed to it.
The isolated run needs root (skipped otherwise, saying why)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dauntless.agent._identity import (
    AgentIdentity,
    check_python_runnable,
    move_secrets,
    plan_task_user,
    prepare_work_root,
    private_dir,
)
from dauntless.agent.runtimes import (
    BindMountSpec,
    EnvironmentSpec,
    PrepareError,
    ProcessRuntime,
    TaskLaunch,
)
from dauntless.config import TaskIdentity

AGENT = AgentIdentity.probe()
needs_root = pytest.mark.skipif(
    not (AGENT.root and AGENT.pid_namespace),
    reason=f"isolating tasks needs a root agent with PID namespaces ({AGENT.why_not})",
)
NOBODY = TaskIdentity(65534, 65534, "nobody", "nogroup")

# In sh, not Python: the agent's interpreter may lie where other users cannot run it
# (pyenv under /root here; the agent refuses such tasks, see the last test).
PROBE = """
echo "ids $(id -u) $(id -g) groups $(id -G)"
echo "umask $(umask)"
echo "pids $(ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' ')"
echo "token $(cat "$DET_SESSION_TOKEN_FILE") env ${DET_SESSION_TOKEN:-none} home $HOME"
cat "$1" >/dev/null 2>&1 && echo "secret read" || echo "secret denied"
echo "mount $(cat "$3/hello.txt") $(touch "$3/new" 2>/dev/null && echo writable || echo read-only)"
ls "$2" >/dev/null 2>&1 && echo "agent_dir read" || echo "agent_dir denied"
"""


@needs_root
def test_an_isolated_task_sees_only_itself_and_runs_as_its_identity(tmp_path):
    root = tmp_path / "agent"  # an agent's work dir, the way the agent lays it out
    prepare_work_root(str(root), AGENT)
    os.chmod(tmp_path, 0o711)  # pytest's own parents are open to root only
    for parent in tmp_path.parents:
        if parent.stat().st_mode & 0o001 == 0:
            os.chmod(parent, parent.stat().st_mode | 0o001)
    data, target = tmp_path / "data", tmp_path / "mnt"
    data.mkdir()
    (data / "hello.txt").write_text("hi")
    os.chmod(data / "hello.txt", 0o644)
    secret = root / "cluster_secret"
    secret.write_text("agent-only")
    secret.chmod(0o600)
    (root / ".tasks").mkdir(mode=0o700)
    user = plan_task_user(NOBODY, AGENT)
    assert user is not None and user.isolate and NOBODY.gid in user.groups
    work = root / "al-1"
    work.mkdir(mode=0o700)
    (work / "probe.sh").write_text(PROBE)
    os.chown(work, NOBODY.uid, NOBODY.gid)
    os.chown(work / "probe.sh", NOBODY.uid, NOBODY.gid)
    private = private_dir(str(root), "al-1", user)
    env = move_secrets({"PATH": os.environ["PATH"], "DET_SESSION_TOKEN": "tok-1"}, private, user)
    token_file = Path(env["DET_SESSION_TOKEN_FILE"])
    st = token_file.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY.uid, 0o600)
    rt = ProcessRuntime(str(root / "python-envs"), namespace_prefix=None)
    launch = TaskLaunch(
        allocation_id="al-1",
        argv=["sh", "probe.sh", str(secret), str(root), str(target)],
        environment=EnvironmentSpec(bind_mounts=(BindMountSpec(str(data), str(target), True),)),
        work_dir=str(work),
        env=env,
        user=user,
        private_dir=private,
        state_dir=str(root / ".tasks" / "al-1"),
    )
    rt.prepare(launch, lambda *a: None)
    handle = rt.start(launch)
    out, err = handle.communicate(timeout=60)
    assert handle.returncode == 0, err.decode()
    seen = dict(line.split(" ", 1) for line in out.decode().splitlines())
    groups = " ".join(str(g) for g in user.groups)
    assert seen["ids"] == f"65534 65534 groups {groups}"
    assert seen["umask"] == "0077"
    # process 1 (the namespace's init), the probe's shell and what it runs: nothing of
    # the host, no other task
    pids = [int(p) for p in seen["pids"].split()]
    host = [p for p in os.listdir("/proc") if p.isdigit()]
    assert pids[0] == 1 and len(pids) < 20 < len(host), (pids, len(host))
    home = os.path.join(private, "home")
    assert seen["token"] == f"tok-1 env tok-1 home {home}"  # alone in its namespace
    assert seen["secret"] == "denied" and seen["agent_dir"] == "denied"
    # its bind mount, made as root in its own mount namespace, read-only; the host never
    # saw it
    assert seen["mount"] == "hi read-only"
    assert not target.exists() or list(target.iterdir()) == []
    rt.cleanup(handle)


@needs_root
def test_a_python_other_users_cannot_run_is_refused_clearly():
    """Where the agent's Python lies under a directory the task's identity cannot enter
    (pyenv under /root on this host), the task is refused before it starts, naming the
    interpreter; where it can, nothing is said."""
    user = plan_task_user(NOBODY, AGENT)
    assert user is not None
    try:
        runnable = (
            subprocess.run(
                [sys.executable, "-I", "-S", "-c", "pass"],
                user=NOBODY.uid,
                group=NOBODY.gid,
                cwd="/",
            ).returncode
            == 0
        )
    except PermissionError:
        runnable = False
    if runnable:
        check_python_runnable(user)  # no refusal
        return
    with pytest.raises(PrepareError, match="cannot be run as nobody") as exc:
        check_python_runnable(user)
    assert exc.value.fatal and sys.executable in exc.value.message


def test_a_task_an_agent_cannot_isolate_is_refused():
    alice = TaskIdentity(4242, 4242, "alice", "alice")
    plain = AgentIdentity(1000, 1000, False, False, "the agent is not root")
    with pytest.raises(PrepareError, match="without root") as exc:
        plan_task_user(alice, plain)
    assert exc.value.fatal
    no_ns = AgentIdentity(0, 0, True, False, "unshare is not installed")
    with pytest.raises(PrepareError, match="unshare is not installed"):
        plan_task_user(alice, no_ns)
    same = plan_task_user(TaskIdentity(1000, 1000, "me", "me"), plain)
    assert same is not None and not same.isolate  # its own identity: runs as it always did
