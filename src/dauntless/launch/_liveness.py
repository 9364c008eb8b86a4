"""Liveness between the nodes of a multi-node trial: an asymmetric partition (the
trial's nodes lose each other while every agent still reaches the master) fails the
trial within a stated timeout instead of the process group's 12 hours (issue 36;
docs/partitions.md).

Each node's launcher (:mod:`dauntless.launch.torch_distributed`) runs a
:class:`PeerWatch`. The chief's launcher listens for UDP datagrams on the rendezvous
port's number (``MASTER_PORT``, whose TCP side belongs to rank 0's store: the UDP and
TCP port spaces are apart, and the chief picks a number free in both). Every other
node's launcher sends the chief a beat every :func:`beat_interval` seconds, and the
chief answers each beat. A node that hears nothing from the other side for the timeout
declares it lost: its launcher stops its ranks and exits non-zero, the agent reports
the exit, and the master restarts the trial from its latest checkpoint (counted against
``max_restarts``). So the chief notices a silent node, and a node notices a silent
chief, whichever way the link fails (a beat must go there and its answer come back).

The beats go launcher to launcher, never through the master, so a master that is down
or cut off does not fail the trial; and the launchers are not the ranks, so a rank that
waits long in a collective (a worker waiting while the chief waits for the searcher's
next operation) is not mistaken for a lost one. A node whose ranks finished sends
``done`` (three times: UDP may drop one) and is no longer watched. A node the chief has
never heard from is given ``first_beat_timeout`` seconds (the launcher's rendezvous
wait) before it counts as lost, since a part may start late.

The timeout (seconds) is ``DAUNTLESS_PEER_TIMEOUT`` in the task's environment, set per
experiment in ``environment.environment_variables``; default
:data:`DEFAULT_TIMEOUT_SECONDS`, 0 turns the check off. Written here (not taken from a
library) because it is a few datagrams between two processes that already share a
port number: torch's own stores live in the ranks, which are the processes that hang.
"""

from __future__ import annotations

import os
import socket
import threading
import time

TIMEOUT_ENV = "DAUNTLESS_PEER_TIMEOUT"
"""The task environment variable that sets the peer timeout (seconds; 0: off)."""

DEFAULT_TIMEOUT_SECONDS = 60.0
"""Seconds a node may go unheard before the trial is failed (:data:`TIMEOUT_ENV`)."""

_MAGIC = b"dnt-peer1"


def peer_timeout(environ: dict[str, str] | os._Environ[str]) -> float:
    """The peer timeout in seconds from ``environ`` (:data:`TIMEOUT_ENV`).

    Args:
        environ: the task's environment.

    Returns:
        The timeout in seconds; 0 means the check is off.

    Raises:
        SystemExit: the variable is set but not a number >= 0 (the message names it).
    """
    raw = environ.get(TIMEOUT_ENV)
    if raw in (None, ""):
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise SystemExit(
            f"launcher: {TIMEOUT_ENV} must be a number of seconds >= 0 (0 turns the peer "
            f"liveness check off), got {raw!r}"
        )
    return value


def beat_interval(timeout: float) -> float:
    """Seconds between two beats for a peer timeout of ``timeout`` seconds: a tenth of
    it, between 0.1 s and 2 s (so at least about ten beats fit in the timeout)."""
    return min(2.0, max(0.1, timeout / 10.0))


def bind_port_pair(addr: str) -> tuple[int, socket.socket]:
    """A port number free for both TCP and UDP on ``addr``, with the UDP socket bound to
    it (kept open for :class:`PeerWatch`; the TCP side is left for rank 0's store).

    Raises:
        OSError: no such port found in 50 tries.
    """
    for _ in range(50):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind((addr, 0))
            port = int(udp.getsockname()[1])
            with socket.socket() as tcp:
                tcp.bind((addr, port))
            return port, udp
        except OSError:
            udp.close()
    raise OSError(f"no port free for both TCP and UDP on {addr}")


class PeerWatch:
    """One node's side of the liveness check (see the module).

    Args:
        allocation_id: the allocation (beats of another allocation are ignored).
        part: this node's index (0: the chief).
        parts: the allocation's node count.
        chief: the chief's ``(addr, port)``; the chief itself passes its own.
        timeout: seconds a peer may go unheard (> 0).
        sock: the chief's UDP socket from :func:`bind_port_pair`; None on other nodes.
        first_beat_timeout: seconds the chief waits for a node's first beat.
    """

    def __init__(
        self,
        allocation_id: str,
        part: int,
        parts: int,
        chief: tuple[str, int],
        timeout: float,
        sock: socket.socket | None = None,
        first_beat_timeout: float = 600.0,
    ) -> None:
        self.part, self.parts, self.chief, self.timeout = part, parts, chief, timeout
        self._tag = _MAGIC + b" " + allocation_id.encode()
        self._interval = beat_interval(timeout)
        self._first = max(first_beat_timeout, timeout)
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock = sock
        self._sock.settimeout(self._interval)
        self._started = time.monotonic()
        self._heard: dict[int, float] = {}  # part -> when last heard (monotonic)
        self._addrs: dict[int, tuple[str, int]] = {}
        self._done: set[int] = set()
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-watch", daemon=True)

    def start(self) -> None:
        """Start beating and watching in a daemon thread."""
        self._thread.start()

    def lost(self) -> str | None:
        """Why a peer counts as lost (a sentence naming it and the timeout), or None."""
        return self._lost

    def finish(self) -> None:
        """This node's ranks are done: tell the peers (``done``) and stop watching."""
        self._stop.set()
        self._thread.join(timeout=5)
        targets = list(self._addrs.values()) if self.part == 0 else [self.chief]
        for _ in range(3):
            for target in targets:
                self._send(b"done", target)
        self._sock.close()

    def _send(self, kind: bytes, target: tuple[str, int]) -> None:
        try:
            self._sock.sendto(self._tag + b" %d " % self.part + kind, target)
        except OSError:  # unreachable, a blackhole route: the silence is the signal
            pass

    def _receive(self) -> None:
        try:
            data, sender = self._sock.recvfrom(512)
        except (TimeoutError, OSError):
            return
        head, _, rest = data.rpartition(b" ")
        tag, _, part_raw = head.rpartition(b" ")
        if tag != self._tag or not part_raw.isdigit():
            return
        part = int(part_raw)
        if rest == b"done":
            self._done.add(part)
            return
        self._heard[part] = time.monotonic()
        if self.part == 0 and rest == b"beat":
            self._addrs[part] = sender
            self._send(b"ack", sender)

    def _check(self) -> None:
        now = time.monotonic()
        if self.part != 0:
            if 0 not in self._done and now - self._heard.get(0, self._started) > self.timeout:
                self._lost = (
                    f"the chief node ({self.chief[0]}) has not answered for "
                    f"{self.timeout:g} s ({TIMEOUT_ENV})"
                )
            return
        for part in range(1, self.parts):
            if part in self._done:
                continue
            heard = self._heard.get(part)
            silent = now - (heard if heard is not None else self._started)
            if silent > (self.timeout if heard is not None else self._first):
                where = self._addrs.get(part, ("?",))[0]
                self._lost = (
                    f"node {part} ({where}) has not been heard from for {silent:.0f} s "
                    f"(timeout {self.timeout:g} s, {TIMEOUT_ENV})"
                )
                return

    def _run(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set() and self._lost is None:
            if self.part != 0 and time.monotonic() >= next_beat:
                self._send(b"beat", self.chief)
                next_beat = time.monotonic() + self._interval
            self._receive()
            self._check()
