"""A task's supervisor (:mod:`dauntless.agent._shim`) with real processes: it records the
task's output and exit, ends what the task leaves running, outlives its agent for the
grace period (a new agent that claims the task keeps it), and then ends every process
of the task, also those that left its session (issue 29, "no orphans").

The "agent" of these tests is a ``sleep`` process named in the task's ``agent`` file;
killing it is the agent dying.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dauntless.agent._supervise import ShimHandle, claim, process_ident, start_shim


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _fake_agent() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"])


def _hand_to(handle: ShimHandle, agent: subprocess.Popen) -> None:
    ident = process_ident(agent.pid)
    assert ident is not None
    (Path(handle.dir) / "agent").write_text(ident)


def _pids_file(tmp_path: Path) -> Path:
    return tmp_path / "pids"


def _start(tmp_path: Path, script: str, grace: float = 60.0) -> ShimHandle:
    return start_shim(
        str(tmp_path / "state" / "t1"),
        ["sh", "-c", script],
        {"PATH": os.environ["PATH"]},
        str(tmp_path),
        grace,
        {"allocation_id": "t1", "runtime": "process"},
    )


def _wait_for(path: Path, lines: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            got = [int(x) for x in path.read_text().split()]
            if len(got) >= lines:
                return got
        time.sleep(0.02)
    raise AssertionError(f"{path} has fewer than {lines} pids")


def test_output_exit_and_leftovers(tmp_path):
    """Lines keep their stream, a long line is cut, the code is the task's, and a
    process the task left in a session of its own is ended with it."""
    pids = _pids_file(tmp_path)
    script = (
        f"setsid sleep 600 & echo $! > {pids}; "
        "echo out; echo err >&2; printf '%070000d\\n' 0; printf 'no newline'; exit 3"
    )
    handle = _start(tmp_path, script)
    out, err = handle.communicate(timeout=60)
    assert handle.returncode == 3
    lines = out.decode().split("\n")
    assert lines[0] == "out" and len(lines[1]) == 64 * 1024 and len(lines[2]) == 70000 - 65536
    assert lines[3] == "no newline"
    assert err.decode() == "err\n"
    (leftover,) = _wait_for(pids, 1)
    assert not _alive(leftover)
    assert handle.proc.wait(10) == 0  # type: ignore[union-attr]  # the shim is done too


def test_a_task_outlives_its_agent_for_the_grace_period_only(tmp_path):
    """Agent gone: the task runs on; claimed by another agent within the grace period,
    it keeps running; when that one is gone for longer than the grace period, every
    process of the task ends (the main one, a child, and one in another session), and
    the exit record says why."""
    pids = _pids_file(tmp_path)
    script = f"setsid sleep 600 & echo $! >> {pids}; sleep 600 & echo $! >> {pids}; wait"
    first = _fake_agent()
    handle = _start(tmp_path, script, grace=1.5)
    _hand_to(handle, first)
    task = _wait_for(pids, 2)
    first.kill()
    first.wait()
    time.sleep(0.8)  # under the grace period: a new agent claims it
    second = _fake_agent()
    _hand_to(handle, second)
    time.sleep(2.5)  # longer than the grace period, counted from the first agent's death
    assert handle.poll() is None and all(_alive(p) for p in task)
    # The second agent dies too and nobody claims the task: it is ended.
    second.kill()
    second.wait()
    assert handle.wait(30) is None and handle.ended
    assert "gone for" in (handle.exit_message or "")
    assert not any(_alive(p) for p in task)
    assert handle.proc.wait(10) == 0  # type: ignore[union-attr]


def test_signals_and_adoption_by_a_handle_of_a_later_agent(tmp_path):
    """SIGTERM reaches the task's group; SIGUSR1 (a kill) ends every process; a handle
    made from the state directory alone (a restarted agent's) reads the same output."""
    pids = _pids_file(tmp_path)
    script = (
        f"trap 'echo got TERM' TERM; setsid sleep 600 & echo $! > {pids}; "
        "echo ready; while :; do sleep 0.05; done"
    )
    handle = _start(tmp_path, script)
    (leftover,) = _wait_for(pids, 1)
    claim(handle.dir)
    later = ShimHandle(handle.dir, None)
    assert later.pid == handle.pid and later.shim_alive()
    assert next(iter(later.lines()))[1:] == ("stdout", "ready")
    later.signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while b"got TERM" not in (Path(handle.dir) / "output").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert later.poll() is None  # the trap keeps it running
    later.signal(signal.SIGKILL)
    assert later.wait(30) == -signal.SIGKILL
    assert not _alive(leftover)
    texts = [text for _pos, _kind, text in later.lines()]
    assert texts[0] == "ready" and "got TERM" in texts
    handle.proc.wait(10)  # type: ignore[union-attr]
    later.remove()
    assert not os.path.exists(handle.dir)


def test_the_supervisor_imports_nothing_but_the_standard_library():
    """It runs by path with ``python -I``: no site-packages, so no package of ours."""
    from dauntless.agent import _nsinit, _shim

    for module in (_shim, _nsinit):
        code = (
            f"import runpy, sys; runpy.run_path({module.__file__!r}, run_name='x'); "
            "print(sorted(m for m in sys.modules if m.startswith('dauntless')))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "[]"


def test_has_children_sees_every_child_and_orphans_a_subreaper_adopts(tmp_path):
    """``has_children``, which lets a supervisor whose task left nothing running skip
    its scans of /proc: False with no child; True for a running child and for an exited
    one not yet reaped (it reaps nothing); in a child subreaper, True for a grandchild
    whose parent exited and was reaped (adopted), False once that one is reaped too."""
    from dauntless.agent import _shim

    code = f"""
import os, signal, sys, time
sys.path.insert(0, {os.path.dirname(_shim.__file__)!r})
import _shim
seen = [_shim.has_children()]
pid = os.fork()
if pid == 0:
    time.sleep(600)
seen.append(_shim.has_children())
os.kill(pid, signal.SIGKILL)
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
seen.append(_shim.has_children())
os.waitpid(pid, 0)
seen.append(_shim.has_children())
_shim._prctl(_shim.PR_SET_CHILD_SUBREAPER, 1)
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(600)
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.waitpid(middle, 0)
grandchild = int(os.read(r, 64))
seen.append(_shim.has_children())
os.kill(grandchild, signal.SIGKILL)
os.waitpid(grandchild, 0)
seen.append(_shim.has_children())
print(seen)
"""
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False, True, True, False, True, False]"


def test_a_task_that_leaves_a_child_behind_in_its_group_still_has_it_ended(tmp_path):
    """The supervisor's quick end (no child left: no scan) does not skip a process the
    task left behind in its own process group, as a plain ``cmd &`` does."""
    pids = _pids_file(tmp_path)
    handle = _start(tmp_path, f"sleep 600 & echo $! > {pids}; exit 0")
    assert handle.wait(60) == 0
    (leftover,) = _wait_for(pids, 1)
    assert not _alive(leftover)
    assert handle.proc.wait(10) == 0  # type: ignore[union-attr]


def test_a_follower_sees_the_end_when_the_supervisor_exits(tmp_path, monkeypatch):
    """A follower of the output (``lines``) that found no new line waits for the
    supervisor's exit itself, not for its poll interval to pass: with the interval set
    to an hour, both a handle of the agent that started the task and a handle made
    from the state directory alone (an adopted task's) return every line and the end
    within seconds."""
    import threading

    from dauntless.agent import _supervise

    monkeypatch.setattr(_supervise, "TAIL_IDLE_SECONDS", 3600.0)
    release = tmp_path / "release"
    handle = _start(tmp_path, f"echo one; while [ ! -e {release} ]; do sleep 0.02; done; echo two")
    claim(handle.dir)
    deadline = time.monotonic() + 30
    while not (Path(handle.dir) / "shim").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    adopted = ShimHandle(handle.dir, None)
    got: dict[str, list[str]] = {}

    def follow(name: str, h: ShimHandle) -> None:
        got[name] = [text for _pos, _kind, text in h.lines()]

    threads = [
        threading.Thread(target=follow, args=(name, h), daemon=True)
        for name, h in (("started", handle), ("adopted", adopted))
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)  # both followers read "one" and wait
    release.write_text("")
    for t in threads:
        t.join(30)
    assert got == {"started": ["one", "two"], "adopted": ["one", "two"]}
    assert handle.poll() == 0 and adopted.poll() == 0
