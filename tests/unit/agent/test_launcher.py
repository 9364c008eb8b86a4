"""The rank launcher and the agent's slot discovery, with real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from dauntless.agent import discover_slots, task_command


def _launch(cmd: list[str], drop: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DET_")
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", *drop)
    }
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "dauntless.launch.torch_distributed", "--", *cmd],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRINT_RANK = [
    sys.executable,
    "-c",
    "import os; print('rank', os.environ['RANK'], "
    "os.environ['LOCAL_RANK'], os.environ['WORLD_SIZE'], os.environ['MASTER_PORT'])",
]


def test_one_rank_runs_the_command_directly():
    r = _launch(PRINT_RANK[:2] + ["import os; print(os.environ['RANK'], os.getppid())"])
    assert r.returncode == 0
    rank, ppid = r.stdout.split()
    assert rank == "0"


def test_local_ranks_get_torch_distributed_env():
    r = _launch(PRINT_RANK, DET_WORLD_SIZE="3", DET_SLOT_IDS="a,b,c", DET_RANK_OFFSET="0")
    assert r.returncode == 0, r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if line.strip())
    ports = {line.split()[-1] for line in lines}
    assert len(ports) == 1
    assert [line.split()[:4] for line in lines] == [
        ["[rank=0]", "rank", "0", "0"],
        ["[rank=1]", "rank", "1", "1"],
        ["[rank=2]", "rank", "2", "2"],
    ]


def test_a_failing_rank_stops_the_others_and_sets_the_exit_code():
    cmd = [
        sys.executable,
        "-c",
        "import os, time, sys\nif os.environ['RANK'] == '1': sys.exit(7)\ntime.sleep(60)",
    ]
    r = _launch(cmd, DET_WORLD_SIZE="2", DET_SLOT_IDS="a,b")
    assert r.returncode == 7


def test_task_command_forms():
    assert task_command("model_def:Trial")[1:] == ["-m", "dauntless.exec.harness"]
    assert task_command("python3 train.py") == ["sh", "-c", "python3 train.py"]
    assert task_command(["python3", "x.py"]) == ["python3", "x.py"]


def test_artificial_and_cpu_slots():
    assert [s.id for s in discover_slots("auto", artificial_slots=3)] == ["cpu0", "cpu1", "cpu2"]
    assert discover_slots("none") == []
    cpu = discover_slots("cpu")
    assert len(cpu) == 1 and cpu[0].type == "cpu"


PRINT_THREADS = [
    sys.executable,
    "-c",
    "import os; print('omp', os.environ.get('OMP_NUM_THREADS', '-'))",
]


def test_several_local_ranks_get_one_thread_each_unless_the_task_sets_it():
    """torchrun's rule (issue 37): OMP_NUM_THREADS=1 per rank when a node runs several
    and the task's environment sets none; a task's own value wins; one rank is left
    alone."""
    drop = ("OMP_NUM_THREADS",)
    two = _launch(PRINT_THREADS, drop, DET_WORLD_SIZE="2", DET_SLOT_IDS="a,b")
    own = _launch(PRINT_THREADS, drop, DET_WORLD_SIZE="2", DET_SLOT_IDS="a,b", OMP_NUM_THREADS="3")
    one = _launch(PRINT_THREADS, drop)
    assert two.returncode == 0, two.stderr
    assert sorted(two.stdout.split()) == sorted("[rank=0] omp 1 [rank=1] omp 1".split())
    assert sorted(own.stdout.split()) == sorted("[rank=0] omp 3 [rank=1] omp 3".split())
    assert one.stdout.split() == ["omp", "-"]


def test_interface_of_names_the_interface_that_holds_an_address() -> None:
    """What the launcher names in GLOO_SOCKET_IFNAME for a multi-node allocation."""
    from dauntless.launch.torch_distributed import interface_of

    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("203.0.113.250") is None  # TEST-NET-3: held by no interface here
    assert interface_of("not an address") is None
