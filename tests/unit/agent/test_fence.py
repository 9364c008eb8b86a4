"""The agent's fence (issue 36): when an agent cut off from its master ends its tasks,
decided on a fake clock; which failures count as a master that is down; and the probe
that tells a busy or stopped master from a partition (issue 37)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from dauntless.agent._fence import (
    FENCE_FRACTION,
    PROBE_FRACTION,
    PROBE_SECONDS,
    Fence,
    connection_refused,
    master_accepts,
)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_fence_is_due_once_after_most_of_the_timeout_without_an_answer() -> None:
    clock = Clock()
    fence = Fence(clock)
    clock.t += 1000
    assert not fence.due(), "no timeout known yet: never fenced"
    sent = clock()
    fence.answered(sent, 8.0)
    clock.t = sent + FENCE_FRACTION * 8.0 - 0.01
    assert not fence.due()
    clock.t = sent + FENCE_FRACTION * 8.0
    assert fence.due()
    assert not fence.due(), "due once per loss of contact"
    assert fence.silent_for() == pytest.approx(6.0)
    fence.answered(clock(), None)  # contact again: armed anew, the timeout kept
    clock.t += 6.0
    assert fence.due()


def test_the_clock_runs_from_when_the_answered_request_was_sent() -> None:
    clock = Clock()
    fence = Fence(clock)
    sent = clock()
    clock.t += 3.0  # the answer took 3 s to come: the master got it no later than sent+3
    fence.answered(sent, 4.0)
    clock.t = sent + 3.0
    assert fence.due(), "counted from the send, not from the answer"
    # An older request's late answer does not move the clock back.
    fence.answered(sent - 50, 4.0)
    assert fence.silent_for() == pytest.approx(3.0)


def test_a_refused_connection_restarts_the_clock() -> None:
    clock = Clock()
    fence = Fence(clock)
    fence.answered(clock(), 4.0)
    for _ in range(10):  # a master restarting for 20 s: refused all along
        clock.t += 2.0
        fence.refused()
        assert not fence.due()
    clock.t += 3.0
    assert fence.due()


def test_retries_close_in_on_the_fence_instead_of_stepping_over_it() -> None:
    clock = Clock()
    fence = Fence(clock)
    assert fence.retry_delay(10.0) == 10.0, "timeout unknown: the policy's backoff"
    fence.answered(clock(), 90.0)  # fence at 67.5 s
    clock.t += 30.0
    assert fence.retry_delay(10.0) == 10.0, "37.5 s left: backoff unchanged"
    clock.t += 30.0  # 7.5 s left: a 10 s wait would sleep past the fence
    assert fence.retry_delay(10.0) == pytest.approx(3.75)
    tries = []
    while fence.remaining():  # a link that stays cut: the tries come ever closer
        tries.append(clock())
        clock.t += fence.retry_delay(10.0)
    assert len(tries) >= 5 and clock() - tries[-1] <= 0.25
    assert fence.due()
    assert fence.remaining() is None and fence.retry_delay(10.0) == 10.0, "fenced"


def test_connection_refused_is_told_from_other_failures() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(httpx.ConnectError) as refused:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    assert connection_refused(refused.value)
    assert connection_refused(OSError(errno.ECONNREFUSED, "refused"))
    assert not connection_refused(httpx.ConnectTimeout("timed out"))
    assert not connection_refused(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert not connection_refused(httpx.ReadTimeout("read timed out"))


def test_probes_start_at_half_the_fence_time_and_a_connect_restarts_the_clock() -> None:
    clock = Clock()
    fence = Fence(clock)
    assert fence.probe_timeout() is None, "timeout unknown: no probe"
    fence.answered(clock(), 8.0)  # fence at 6 s of silence, probes from 3 s
    clock.t += PROBE_FRACTION * FENCE_FRACTION * 8.0 - 0.01
    assert fence.probe_timeout() is None
    clock.t += 0.01
    assert fence.probe_timeout() == pytest.approx(0.6), "a tenth of the fence's time"
    assert fence.probe_timeout() is None, "one probe per PROBE_SECONDS"
    for _ in range(30):  # a master stopped for 30 s whose host accepts every probe
        clock.t += PROBE_SECONDS
        if fence.probe_timeout() is not None:
            fence.reachable()
        assert not fence.due()
    # Probes that do not connect (a partition) leave the clock where it was.
    for _ in range(5):
        clock.t += PROBE_SECONDS
        assert fence.probe_timeout() is not None
    clock.t += 1.0
    assert fence.due()
    assert fence.probe_timeout() is None, "fenced: nothing more to decide"
    fence.answered(clock(), 200.0)
    clock.t += 100.0
    assert fence.probe_timeout() == 1.0, "at most 1 s"


def test_master_accepts_a_listening_port_also_of_a_stopped_process(tmp_path) -> None:
    # A child process listening on a port, then stopped (SIGSTOP): the kernel still
    # completes the handshake. A closed port is refused; a URL without a host is an error.
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        assert master_accepts(f"http://127.0.0.1:{port}", 2.0)
        assert time.monotonic() - started < 2.0
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not master_accepts(f"http://127.0.0.1:{port}", 2.0), "no listener: refused"
    with pytest.raises(ValueError, match="no host"):
        master_accepts("unix:///tmp/x", 1.0)
