"""The throttle of repeated failed logins (:class:`LoginThrottle`), used by ``POST
/api/v1/auth/login`` through :class:`dauntless.master.auth.AuthService`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class LoginThrottle:
    """Slows repeated failed logins, per username (in memory: one master process).

    The first :attr:`free` consecutive failures of a username cost nothing; after that a
    login for it is refused without checking the password (429, with ``Retry-After``)
    until ``min(cap, base * 2**(failures - free))`` seconds have passed since the last
    failure, so guessing slows exponentially: 1 s, 2 s, 4 s, ... up to 5 minutes. A
    success resets the count. Unknown usernames count like known ones (nothing tells
    them apart). Refusing instead of sleeping keeps a flood of attempts from holding the
    master's threads. The table keeps the :attr:`max_entries` most recent usernames; it
    is lost when the master restarts, which only grants a fresh :attr:`free` tries.
    """

    def __init__(
        self,
        *,
        free: int = 3,
        base: float = 1.0,
        cap: float = 300.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free, self.base, self.cap, self.max_entries = free, base, cap, max_entries
        self.clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait_seconds(self, username: str) -> float:
        """Seconds until ``username`` may try again (0: now)."""
        with self._lock:
            entry = self._failures.get(username)
        if entry is None or entry[0] < self.free:
            return 0.0
        count, last = entry
        delay = min(self.cap, self.base * 2 ** (count - self.free))
        return max(0.0, last + delay - self.clock())

    def failed(self, username: str) -> None:
        """Count a failed login."""
        with self._lock:
            count = self._failures.pop(username, (0, 0.0))[0]
            self._failures[username] = (count + 1, self.clock())
            while len(self._failures) > self.max_entries:
                self._failures.popitem(last=False)

    def succeeded(self, username: str) -> None:
        """Forget the failures of ``username``."""
        with self._lock:
            self._failures.pop(username, None)
