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
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable

FENCE_FRACTION = 0.75
"""Of the master's ``agent_timeout``: how long an agent may go without an answered
heartbeat before it ends its tasks."""


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
