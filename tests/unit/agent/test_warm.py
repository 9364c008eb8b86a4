"""Which tasks the agent forks from its warm worker, and the fork server itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dauntless.agent._agent import launched_command
from dauntless.agent._warm import WarmStarter, warm_request

BASE = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def _env(**extra: str) -> dict[str, str]:
    config = {"entrypoint": "model:Trial"}
    return {
        **BASE,
        "DET_TASK_TYPE": "TRIAL",
        "DET_WORLD_SIZE": "1",
        "DET_NUM_PARTS": "1",
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        **extra,
    }


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def test_scripts_modules_and_trial_classes_are_forked(ctx: Path) -> None:
    req = warm_request(launched_command("python3 train.py --lr 0.1"), _env(), str(ctx), BASE)
    assert req is not None and req["kind"] == "script"
    assert (req["target"], req["args"]) == ("train.py", ["--lr", "0.1"])
    req = warm_request(launched_command("python -m pkg.train x"), _env(), str(ctx), BASE)
    assert req is not None and (req["kind"], req["target"], req["args"]) == (
        "module",
        "pkg.train",
        ["x"],
    )
    req = warm_request(launched_command("model:Trial"), _env(), str(ctx), BASE)
    assert req is not None and (req["kind"], req["target"]) == ("harness", "model:Trial")
    assert req["env"]["RANK"] == "0" and req["env"]["WORLD_SIZE"] == "1"


@pytest.mark.parametrize(
    "entrypoint",
    [
        "python3 train.py; rm -rf x",  # shell syntax
        "python3 train.py > out.txt",
        "python3 $SCRIPT",
        "bash run.sh",
        "python3 missing.py",
        "python3 -c 'print(1)'",
        "/usr/bin/python3 train.py",  # another interpreter than the agent's
        ["python3", "train.py"],  # an argv list runs as given
    ],
)
def test_other_entrypoints_start_cold(ctx: Path, entrypoint: str | list[str]) -> None:
    assert warm_request(launched_command(entrypoint), _env(), str(ctx), BASE) is None


@pytest.mark.parametrize(
    "extra",
    [
        {"DET_WORLD_SIZE": "2"},
        {"DET_NUM_PARTS": "2"},
        {"DET_TASK_TYPE": "COMMAND"},
        {"PYTHONHASHSEED": "0"},
        {"OMP_NUM_THREADS": "1"},
        {"LD_PRELOAD": "/lib/x.so"},
    ],
)
def test_tasks_the_worker_cannot_reproduce_start_cold(ctx: Path, extra: dict[str, str]) -> None:
    argv = launched_command("python3 train.py")
    assert warm_request(argv, _env(**extra), str(ctx), BASE) is None


def test_a_startup_hook_starts_cold(ctx: Path) -> None:
    (ctx / "startup-hook.sh").write_text("export X=1\n")
    assert warm_request(launched_command("python3 train.py"), _env(), str(ctx), BASE) is None


def test_forked_processes_are_separate(tmp_path: Path) -> None:
    """Two forks from one worker: own cwd, environment, seeds and exit codes; an
    ``os._exit`` and a SIGKILL in one leave the worker serving."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import json, os, random, sys\n"
        "import numpy, torch\n"
        "print(json.dumps({'cwd': os.getcwd(), 'leak': os.environ.get('LEAK'),\n"
        "  'mine': os.environ.get('MINE'), 'argv': sys.argv, 'path0': sys.path[0],\n"
        "  'r': [random.random(), float(numpy.random.rand()), float(torch.rand(1))]}))\n"
        "os.environ['LEAK'] = '1'\n"
        "sys.stdout.flush()\n"
        "if sys.argv[1:] == ['crash']:\n"
        "    os._exit(3)\n"
        "if sys.argv[1:] == ['hang']:\n"
        "    import time; time.sleep(600)\n"
    )
    sock = str(tmp_path / "fs.sock")
    starter = WarmStarter(sock, dict(os.environ), os.getpid())
    starter.start()
    try:
        assert starter.wait_ready(120), "the fork server did not become ready"
        outs, codes = [], []
        for i, arg in enumerate(["crash", "ok", "hang"]):
            cwd = tmp_path / f"w{i}"
            cwd.mkdir()
            proc = starter.fork(
                {
                    "kind": "script",
                    "target": str(script),
                    "args": [arg],
                    "env": {**os.environ, "MINE": str(i)},
                    "cwd": str(cwd),
                }
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            outs.append(json.loads(line))
            if arg == "hang":
                assert proc.poll() is None
                with pytest.raises(subprocess.TimeoutExpired):
                    proc.wait(0.2)
                os.killpg(proc.pid, signal.SIGKILL)
            codes.append(proc.wait(60))
        assert codes == [3, 0, -signal.SIGKILL]
        assert [o["cwd"] for o in outs] == [str(tmp_path / f"w{i}") for i in range(3)]
        assert [o["mine"] for o in outs] == ["0", "1", "2"]
        assert all(o["leak"] is None for o in outs)
        assert all(o["path0"] == str(tmp_path) for o in outs)
        assert outs[1]["argv"] == [str(script), "ok"]
        draws = [tuple(o["r"]) for o in outs]
        assert len(set(draws)) == 3 and all(len(set(d)) == 3 for d in draws)
        assert starter.ready()
        # A worker that dies is started again (not sooner than RESTART_SECONDS after
        # its last start), and serves.
        assert starter.proc is not None
        old = starter.proc.pid
        starter.proc.kill()
        starter.proc.wait()
        assert not starter.restart_if_dead()  # started moments ago
        starter.RESTART_SECONDS = 0.0
        assert starter.restart_if_dead()
        assert starter.wait_ready(120) and starter.proc.pid != old
    finally:
        starter.stop()
    deadline = time.monotonic() + 10
    while starter.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not starter.ready()


def test_a_starting_worker_is_waited_for_and_a_failed_start_is_not(tmp_path: Path) -> None:
    """Tasks that arrive while the server imports torch wait for it instead of starting
    cold; a server that dies while starting releases them at once, not at the timeout."""
    starter = WarmStarter(str(tmp_path / "fs.sock"), dict(os.environ), os.getpid())
    assert not starter.wait_if_starting()  # never started
    starter.start()
    try:
        assert not starter.ready()  # still importing torch
        assert starter.wait_if_starting() and starter.ready()
    finally:
        starter.stop()

    # Its socket in a directory that does not exist: the server exits before "ready".
    broken = WarmStarter(str(tmp_path / "missing" / "fs.sock"), dict(os.environ), os.getpid())
    broken.READY_TIMEOUT_SECONDS = 3600.0
    result: list[bool] = []
    broken.start()
    waiter = threading.Thread(target=lambda: result.append(broken.wait_if_starting()))
    waiter.start()
    waiter.join(120)  # a wait until READY_TIMEOUT_SECONDS would still be blocked here
    assert result == [False]
    broken.stop()


def test_a_supervised_fork_outlives_the_worker(tmp_path: Path) -> None:
    """A trial forked under a supervisor of its own (``fork_supervised``): its output
    goes to its state directory, and it runs on when the worker (and so, in an agent,
    the agent) is killed; its exit is recorded there for the agent that adopts it."""
    from dauntless.agent._supervise import ShimHandle, make_state_dir

    script = tmp_path / "probe.py"
    release = tmp_path / "release"
    script.write_text(
        "import os, sys, time\n"
        "print('started', os.getcwd(), os.environ['MINE'], flush=True)\n"
        f"while not os.path.exists({str(release)!r}):\n"
        "    time.sleep(0.05)\n"
        "print('after the worker died; parent', os.getppid(), flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "sys.exit(5)\n"
    )
    sock = str(tmp_path / "fs.sock")
    starter = WarmStarter(sock, dict(os.environ), os.getpid())
    starter.start()
    directory = str(tmp_path / "state" / "alloc-1")
    try:
        assert starter.wait_ready(120), "the fork server did not become ready"
        assert starter.proc is not None
        env = {**os.environ, "MINE": "7"}
        make_state_dir(directory, ["python", str(script)], env, str(tmp_path), 60.0, {})
        request = {
            "kind": "script",
            "target": str(script),
            "args": [],
            "env": env,
            "cwd": str(tmp_path),
        }
        handle = starter.fork_supervised(request, directory)
        assert isinstance(handle, ShimHandle) and handle.shim_alive()
        lines = handle.lines()
        assert next(lines)[1:] == ("stdout", f"started {tmp_path} 7")
        supervisor = handle.pid
    finally:
        starter.stop()  # SIGKILL: a cold child of it would die with it
    assert starter.proc is not None and starter.proc.poll() is not None
    adopted = ShimHandle(directory, None)  # as an agent started again finds it
    assert adopted.pid == supervisor and adopted.shim_alive() and adopted.poll() is None
    release.write_text("")
    assert adopted.wait(60) == 5
    rest = [(kind, text) for _pos, kind, text in adopted.lines()]
    assert rest[1:] == [
        ("stdout", f"after the worker died; parent {supervisor}"),
        ("stderr", "to stderr"),
    ]


def _collapse_supported() -> str | None:
    """Why this host cannot collapse memory into huge pages (None: it can)."""
    import platform

    if not sys.platform.startswith("linux"):
        return "not Linux"
    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    if release < (6, 1):
        return f"Linux {platform.release()} has no MADV_COLLAPSE (6.1+)"
    try:
        enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "no transparent huge pages"
    if "[never]" in enabled:
        return "transparent huge pages are off"
    return None


def test_the_worker_holds_its_preloaded_memory_in_huge_pages(tmp_path: Path) -> None:
    """Once ready, most of the fork server's anonymous memory (torch and the harness
    imported) is in 2 MiB pages, which make each fork and exit of a warm trial cheaper
    (``collapse_to_huge_pages``), and a fork from it still runs and has memory of its
    own (a child's write does not reach the server or another child)."""
    why = _collapse_supported()
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys, dauntless.exec._forkserver as fs\n"
        "before = getattr(fs, 'PROBE', None)\n"
        "fs.PROBE = sys.argv[1]\n"
        "print(before, fs.PROBE, flush=True)\n"
    )
    starter = WarmStarter(str(tmp_path / "fs.sock"), dict(os.environ), os.getpid())
    starter.start()
    try:
        assert starter.wait_ready(120), "the fork server did not become ready"
        assert starter.proc is not None
        rollup = Path(f"/proc/{starter.proc.pid}/smaps_rollup").read_text()
        fields = {line.split(":")[0]: line.split()[1] for line in rollup.splitlines()[1:]}
        huge_kb, anon_kb = int(fields["AnonHugePages"]), int(fields["Anonymous"])
        assert huge_kb >= anon_kb // 2, f"{huge_kb} kB of {anon_kb} kB in huge pages"
        for arg in ("a", "b"):
            proc = starter.fork(
                {
                    "kind": "script",
                    "target": str(script),
                    "args": [arg],
                    "env": dict(os.environ),
                    "cwd": str(tmp_path),
                }
            )
            assert proc.stdout is not None
            assert proc.stdout.readline().decode().split() == ["None", arg]
            assert proc.wait(60) == 0
    finally:
        starter.stop()
