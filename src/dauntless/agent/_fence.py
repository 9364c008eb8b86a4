"""Fencing: an agent cut off from its master ends its tasks before the master gives
them to another agent (issue 36; docs/partitions.md).

The master declares an agent lost once it has received no heartbeat for
``agent_timeout`` seconds and then restarts the agent's trials elsewhere. A partitioned
agent cannot hear that decision, so it decides the same on its own clock: once no
heartbeat it sent has been answered for :data:`FENCE_FRACTION` of ``agent_timeout``, it
kills its tasks (each allocation is one fencing epoch: its session token is void from
the moment the master ends it, so nothing it reports afterwards is stored). The clock
starts when the last answered heartbeat was *sent*, which is no later than the master
received it, so the agent always fences first, by at least ``(1 - FENCE_FRACTION) *
agent_timeout`` (7.5 s of the default 30 s): a trial never runs on two agents at once.

A master that is down is not a partition: a master answers nothing while it restarts,
and gives every agent a fresh ``agent_timeout`` when it starts again (it never declares
agents lost for its own absence). A connection *refused* means the master's host
answered and no master listened there, so the clock starts again at each refusal:
trials keep running through a master restart of any length, as before.

Nor is a master that is busy or stopped (issue 37: at load 20-40, 616 of 10,000 trials
were fenced when the master took over 22 s to answer heartbeats): its host still
completes a TCP handshake on the master's port, which a partition does not allow. Once
a heartbeat has gone unanswered for :data:`PROBE_FRACTION` of the fence's time, the
agent opens a fresh connection to that port every :data:`PROBE_SECONDS`
(:func:`master_accepts`); each one that connects starts the clock again, as a refusal
does. The master, for its part, counts no time against an agent while its own intake
of requests stood still, and counts a beat from when it arrived, not when it was
answered (:mod:`dauntless.master.heartbeats`). A master behind a proxy that accepts
connections for it is the known limit: the handshake is then the proxy's, and an agent
cut off between the proxy and the master does not fence (the master's fencing epochs,
below, still refuse whatever its tasks report once their allocations have ended).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

FENCE_FRACTION = 0.75
"""Of the master's ``agent_timeout``: how long an agent may go without an answered
heartbeat before it ends its tasks."""


PROBE_FRACTION = 0.5
"""Of the fence's time (``FENCE_FRACTION * agent_timeout``): the silence after which
the agent probes whether the master's host accepts connections."""

PROBE_SECONDS = 1.0
"""Seconds between two probes while the master is silent."""


def master_accepts(master_url: str, timeout: float) -> bool:
    """Whether a TCP connection to the master's host and port (of ``master_url``; port
    443 for https and 80 for http when the URL names none) is established within
    ``timeout`` seconds. It is closed at once; nothing is sent.

    Raises:
        ValueError: ``master_url`` names no host.
    """
    parts = urlsplit(master_url)
    if not parts.hostname:
        raise ValueError(f"no host in the master's URL {master_url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def connection_refused(exc: BaseException) -> bool:
    """Whether ``exc`` (an httpx error or an OSError, with their causes) is a refused
    TCP connection (ECONNREFUSED): the master's host answered, its master did not."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError) or (
            isinstance(cur, OSError) and cur.errno == errno.ECONNREFUSED
        ):
            return True
        if "Connection refused" in str(cur):  # httpx/httpcore keep only the text
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class Fence:
    """When the agent must end its tasks (see the module).

    Args:
        clock: monotonic seconds (``time.monotonic``; tests pass their own).

    Thread-safe: the agent's loop records contact, a watchdog thread asks :meth:`due`.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._contact = clock()
        self.agent_timeout: float | None = None
        self.fenced = False
        self._probed = float("-inf")  # when the last probe started

    def now(self) -> float:
        """The fence's clock, in seconds."""
        return self._clock()

    def answered(self, sent_at: float, agent_timeout: float | None) -> None:
        """A request sent at ``sent_at`` (:meth:`now`) was answered; ``agent_timeout``
        is the master's (seconds), None when the answer did not say."""
        with self._lock:
            self._contact = max(self._contact, sent_at)
            if agent_timeout is not None and agent_timeout > 0:
                self.agent_timeout = float(agent_timeout)
            self.fenced = False

    def refused(self) -> None:
        """The master's host refused a connection now: the master is down, not cut off
        (see the module); the clock starts again."""
        with self._lock:
            self._contact = max(self._contact, self._clock())

    def reachable(self) -> None:
        """A probe connected to the master's port now: the master is there, busy or
        stopped, not cut off (see the module); the clock starts again."""
        self.refused()

    def probe_timeout(self) -> float | None:
        """The connect timeout (seconds) of a probe that is due now, or None when none
        is: the master's timeout is unknown, the tasks are fenced, the silence is under
        :data:`PROBE_FRACTION` of the fence's time, or the last probe started under
        :data:`PROBE_SECONDS` ago. The timeout is a tenth of the fence's time, at most
        1 s: a probe that hangs (a partition drops the handshake) delays the fence by
        no more (the margin before the master's own timeout is a third of it)."""
        with self._lock:
            if self.fenced or self.agent_timeout is None:
                return None
            fence_time = FENCE_FRACTION * self.agent_timeout
            now = self._clock()
            if now - self._contact < PROBE_FRACTION * fence_time:
                return None
            if now - self._probed < PROBE_SECONDS:
                return None
            self._probed = now
            return min(1.0, 0.1 * fence_time)

    def silent_for(self) -> float:
        """Seconds since the last contact."""
        with self._lock:
            return self._clock() - self._contact

    def remaining(self) -> float | None:
        """Seconds left before the fence is due (0 when past it), or None while the
        master's ``agent_timeout`` is unknown or the tasks are already fenced."""
        with self._lock:
            if self.fenced or self.agent_timeout is None:
                return None
            left = FENCE_FRACTION * self.agent_timeout - (self._clock() - self._contact)
            return max(0.0, left)

    def retry_delay(self, backoff: float, floor: float = 0.25) -> float:
        """The wait before the next heartbeat retry: ``backoff`` (seconds, from the
        retry policy), shortened to half the time left before the fence (never under
        ``floor`` seconds). A link that comes back just before the fence is then found
        by a retry, not missed during a 10 s backoff: the retries close in on the
        deadline (halving the time left each time) instead of stepping over it."""
        left = self.remaining()
        if left is None:
            return backoff
        return min(backoff, max(floor, left / 2))

    def due(self) -> bool:
        """True once, when the tasks must be ended: the master's timeout is known and
        :data:`FENCE_FRACTION` of it has passed without contact. False again until
        contact is made and lost anew."""
        with self._lock:
            if self.fenced or self.agent_timeout is None:
                return False
            if self._clock() - self._contact < FENCE_FRACTION * self.agent_timeout:
                return False
            self.fenced = True
            return True
