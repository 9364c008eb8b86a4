"""The agent's samples of a task's process tree (issue 34 scope 3): a real process that
starts a child holding memory and burning CPU; the sample sums the tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil

from dauntless.agent._taskmetrics import TaskSampler

CHILD = "b = bytearray(64 << 20)\nimport time\nt = time.time()\nwhile time.time() - t < 30: pass\n"
PARENT = textwrap.dedent(
    f"""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", {CHILD!r}])
    print("started", flush=True)
    child.wait()
    """
)


def test_sample_sums_the_tree_cpu_and_memory():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        sampler = TaskSampler()
        (first,) = sampler.sample({"a.1": proc.pid})
        assert first["cpu_percent"] is None  # no interval yet
        time.sleep(1.0)
        (second,) = sampler.sample({"a.1": proc.pid})
        assert second["allocation_id"] == "a.1" and second["processes"] == 2
        assert second["rss_bytes"] >= 64 << 20  # the child's bytearray, counted in the tree
        assert second["cpu_percent"] > 10.0  # the child spins (a loaded machine gives less)
        assert sampler.sample({}) == []  # an ended task is forgotten
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_a_gone_process_gives_no_sample_and_due_follows_the_period():
    clock = [0.0]
    sampler = TaskSampler(period=10.0, clock=lambda: clock[0])
    assert sampler.due() and not sampler.due()
    clock[0] = 9.9
    assert not sampler.due()
    clock[0] = 10.0
    assert sampler.due()
    assert sampler.sample({"a.1": 2**22 + 12345}) == []  # above Linux's largest pid
