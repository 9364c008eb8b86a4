"""The launchers' peer liveness check (dauntless.launch._liveness), with real UDP
sockets on 127.0.0.1: nodes that hear each other stay quiet, a silent node is reported
lost by the other side within the timeout, a node that finished is not."""

from __future__ import annotations

import socket
import time

import pytest

from dauntless.launch._liveness import (
    DEFAULT_TIMEOUT_SECONDS,
    TIMEOUT_ENV,
    PeerWatch,
    beat_interval,
    bind_port_pair,
    peer_timeout,
)

TIMEOUT = 2.0


def _pair(alloc: str = "alloc-1") -> tuple[PeerWatch, PeerWatch]:
    port, sock = bind_port_pair("127.0.0.1")
    chief = PeerWatch(alloc, 0, 2, ("127.0.0.1", port), TIMEOUT, sock=sock)
    node = PeerWatch(alloc, 1, 2, ("127.0.0.1", port), TIMEOUT)
    chief.start()
    node.start()
    return chief, node


def _silence(watch: PeerWatch) -> None:
    """Stop ``watch`` beating and answering without a ``done`` (a cut link)."""
    watch._stop.set()
    watch._thread.join(timeout=10)


def _wait_lost(watch: PeerWatch, limit: float = 30.0) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        reason = watch.lost()
        if reason is not None:
            return reason
        time.sleep(0.05)
    raise AssertionError("the silent peer was not reported lost")


def test_the_port_is_free_for_tcp_and_bound_for_udp():
    port, sock = bind_port_pair("127.0.0.1")
    with sock, socket.socket() as tcp:
        tcp.bind(("127.0.0.1", port))  # rank 0's store can take the TCP side
        assert sock.getsockname()[1] == port


def test_each_side_reports_the_other_silent_and_nothing_while_both_beat():
    chief, node = _pair()
    chief2, node2 = _pair("alloc-2")
    time.sleep(2 * TIMEOUT)  # longer than the timeout: beats and answers flow
    assert (chief.lost(), node.lost(), chief2.lost(), node2.lost()) == (None,) * 4
    _silence(node)  # the chief hears no more beats
    _silence(chief2)  # the node hears no more answers
    started = time.monotonic()
    reason = _wait_lost(chief)
    assert "node 1 (127.0.0.1)" in reason and TIMEOUT_ENV in reason, reason
    assert "chief node (127.0.0.1)" in _wait_lost(node2)
    assert time.monotonic() - started >= TIMEOUT * 0.5
    for w in (chief, node2):
        w.finish()


def test_a_finished_node_is_not_lost():
    chief, node = _pair()
    time.sleep(0.5)
    node.finish()  # its ranks completed: done, then silence
    time.sleep(2 * TIMEOUT)
    assert chief.lost() is None
    chief.finish()


def test_beats_of_another_allocation_do_not_count():
    port, sock = bind_port_pair("127.0.0.1")
    chief = PeerWatch("mine", 0, 2, ("127.0.0.1", port), TIMEOUT, sock=sock, first_beat_timeout=0)
    stranger = PeerWatch("theirs", 1, 2, ("127.0.0.1", port), TIMEOUT)
    chief.start()
    stranger.start()
    assert "node 1" in _wait_lost(chief)
    for w in (chief, stranger):
        w.finish()


def test_peer_timeout_from_the_environment():
    assert peer_timeout({}) == DEFAULT_TIMEOUT_SECONDS
    assert peer_timeout({TIMEOUT_ENV: "12.5"}) == 12.5
    assert peer_timeout({TIMEOUT_ENV: "0"}) == 0
    for bad in ("soon", "-1", "inf", "nan"):
        with pytest.raises(SystemExit, match=TIMEOUT_ENV):
            peer_timeout({TIMEOUT_ENV: bad})
    assert beat_interval(60) == 2.0 and beat_interval(0.5) == 0.1 and beat_interval(5) == 0.5
