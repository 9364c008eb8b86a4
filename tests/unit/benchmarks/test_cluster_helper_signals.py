"""benchmarks/_cluster.py stops the master it started when the benchmark is stopped by
SIGTERM (``timeout``) or SIGINT (Ctrl-C), not only on a normal exit: the master runs in a
session of its own, out of reach of a signal to the benchmark's process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"

SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import _cluster
with _cluster.master(Path(sys.argv[2]), start_new_session=True) as m:
    print(m.pid, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose: its parent (the benchmark) has not reaped it.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_the_master_stops_with_the_benchmark_on_sigterm(tmp_path):
    # (SIGINT raises KeyboardInterrupt by Python's default handler, which unwinds the
    # same way; SIGTERM by default ends the process with no unwinding at all.)
    sig = signal.SIGTERM
    bench = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(BENCHMARKS), str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = bench.stdout.readline()
        assert line.strip().isdigit(), bench.stderr.read()
        master = int(line)
        assert _alive(master)
        bench.send_signal(sig)
        code = bench.wait(timeout=60)
        assert code == 143, bench.stderr.read()
        stopped = time.monotonic()
        deadline = time.monotonic() + 30
        while _alive(master) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(master), "the master outlived the benchmark"
        print(f"master gone {time.monotonic() - stopped:.1f} s after the benchmark exited")
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
