"""Training reports leave in the background, in order, over a real socket; errors surface
on the next call."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import httpx
import pytest

from dauntless.core import (
    APIError,
    MasterBackend,
    MasterUnreachableError,
    MetricReport,
    PreemptContext,
    Session,
)
from dauntless.core._lite import LiteClient, _dropped
from dauntless.master.testing import DEADLINE, wait_for


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the master
    answers: list[int] = []
    seen: list[tuple[str, dict]] = []
    peers: list[tuple[str, int]] = []  # the client's address of each request, in order
    close_idle = False  # close the connection after answering, without saying so
    # The long polls are held until the test sets this; then each answers "no signal".
    polls_released = threading.Event()
    answered_polls = 0

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        type(self).peers.append(self.client_address)
        status = type(self).answers.pop(0) if type(self).answers else 200
        out = json.dumps({} if status < 400 else {"detail": f"status {status}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        if type(self).close_idle:
            self.close_connection = True  # as uvicorn closes an idle keep-alive connection

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        # A long poll that never raises the signal: it answers when the test lets it.
        type(self).seen.append((self.path, {}))
        type(self).polls_released.wait()
        type(self).answered_polls += 1
        out = b'{"preempt": false}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server():
    _Handler.answers, _Handler.seen, _Handler.close_idle = [], [], False
    _Handler.peers = []
    _Handler.polls_released, _Handler.answered_polls = threading.Event(), 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    _Handler.polls_released.set()  # a held long poll ends, so its handler thread does
    httpd.shutdown()
    httpd.server_close()


def test_lite_client_retries_5xx_and_reports_4xx(server):
    sleeps: list[float] = []
    poster = LiteClient(Session(server, sleep=sleeps.append, max_attempts=3))
    _Handler.answers = [503, 502]
    assert poster.post("/api/v1/x", {"a": 1}) == {}
    assert len(sleeps) == 2 and [b for _, b in _Handler.seen] == [{"a": 1}] * 3
    _Handler.answers = [409]
    with pytest.raises(APIError, match="409: status 409"):
        poster.post("/api/v1/x", {"a": 2})
    poster.close()


def test_lite_client_sends_every_json_value_the_reports_hold(server):
    poster = LiteClient(Session(server, sleep=lambda s: None))
    poster.post(
        "/api/v1/x",
        {
            "loss": 0.1,
            "n": 3,
            "none": None,
            "nan": float("nan"),
            "batches": [{"a": 1e-300}, {"a": -2.5}],
        },
    )
    poster.post("/api/v1/x", {"huge": 2**70})  # beyond orjson's 64 bits: the stdlib's turn
    (_, first), (_, second) = _Handler.seen
    assert first == {
        "loss": 0.1,
        "n": 3,
        "none": None,
        "nan": None,
        "batches": [{"a": 1e-300}, {"a": -2.5}],
    }
    assert second == {"huge": 2**70}
    poster.close()


def test_lite_client_gives_up_on_an_unreachable_master():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    poster = LiteClient(
        Session(f"http://127.0.0.1:{port}", sleep=lambda s: None, max_attempts=2, timeout=1)
    )
    with pytest.raises(MasterUnreachableError, match="after 2 attempts"):
        poster.post("/api/v1/x", {})


def test_lite_client_reopens_a_connection_the_master_closed_while_idle(server):
    # One attempt only: a request sent on the dead connection would fail for good.
    sleeps: list[float] = []
    poster = LiteClient(Session(server, sleep=sleeps.append, max_attempts=1))
    _Handler.close_idle = True
    assert poster.post("/api/v1/x", {"a": 1}) == {}
    old = poster._conn
    assert old is not None and old.sock is not None
    _wait_until(lambda: _dropped(old.sock))  # the server's close has arrived
    assert poster.post("/api/v1/x", {"a": 2}) == {}
    assert poster._conn is not old and sleeps == []
    assert [b for _, b in _Handler.seen] == [{"a": 1}, {"a": 2}]
    poster.close()


def test_lite_client_connects_ahead_and_a_failed_connect_is_left_to_the_request(server):
    poster = LiteClient(Session(server, sleep=lambda s: None))
    poster.connect()
    sock = poster._conn.sock if poster._conn is not None else None
    assert sock is not None and _Handler.seen == []
    assert poster.post("/api/v1/x", {"a": 1}) == {}
    assert poster._conn is not None and poster._conn.sock is sock  # the same connection
    poster.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    unreachable = LiteClient(Session(f"http://127.0.0.1:{port}", sleep=lambda s: None))
    unreachable.connect()  # does not raise
    assert unreachable._conn is None


def test_start_background_opens_the_report_connection_before_any_report(server):
    backend = MasterBackend(Session(server, sleep=lambda s: None))
    backend.start_background()
    lite = backend._lite
    assert lite is not None
    _wait_until(lambda: lite._conn is not None and lite._conn.sock is not None)
    sock = lite._conn.sock
    backend.report_metrics(_report(1))
    backend.flush()
    assert _training_steps(_Handler.seen) == [[1]] and lite._conn.sock is sock
    backend.close()


def test_every_request_of_a_trial_shares_one_connection_and_no_httpx_client(server):
    # Issue 37: the training loop's requests went through the session's httpx client
    # (about 3 ms to make, 1.1 ms per request) and a second connection beside the
    # background reports'; on a real master all now share one lite connection.
    session = Session(server, sleep=lambda s: None)
    backend = MasterBackend(session)
    backend.report_metrics(_report(1))  # from the background thread
    backend.report_metrics(_report(1, "validation"))  # from this one, after a flush
    assert backend.complete_operation(1, 1, 0.5) is None  # the server answers {}
    backend.report_progress(1, 1.0)
    backend.close()
    paths = [p for p, _ in _Handler.seen]
    assert paths[:3] == [
        "/api/v1/trials/1/metrics",
        "/api/v1/trials/1/metrics",
        "/api/v1/trials/1/searcher/completed_operation",
    ]
    assert len(set(_Handler.peers)) == 1, _Handler.peers
    assert session._httpx is None


def test_a_session_makes_its_httpx_client_at_its_first_request_and_none_once_closed(server):
    session = Session(server, sleep=lambda s: None)
    assert session._httpx is None
    assert session.post("/api/v1/x", json={"a": 1}) == {}
    assert session._httpx is not None
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.post("/api/v1/x", json={"a": 2})
    never_used = Session(server, sleep=lambda s: None)
    never_used.close()
    with pytest.raises(RuntimeError, match="closed"):
        never_used.post("/api/v1/x", json={"a": 3})
    assert never_used._httpx is None
    assert [b for _, b in _Handler.seen] == [{"a": 1}]


def test_threads_share_a_lite_client_one_request_at_a_time(server):
    # Three threads on one connection: without the lock, a request sent while the other
    # thread's answer is unread fails (http.client's CannotSendRequest / ResponseNotReady)
    # and, with one attempt, is raised.
    poster = LiteClient(Session(server, sleep=lambda s: None, max_attempts=1))
    errors: list[BaseException] = []

    def post_many(tag: int) -> None:
        try:
            for i in range(25):
                poster.post(f"/t{tag}", {"i": i})
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion)
            errors.append(exc)

    threads = [threading.Thread(target=post_many, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    poster.close()
    assert errors == []
    assert sorted(b["i"] for p, b in _Handler.seen if p == "/t1") == list(range(25))
    assert len(_Handler.seen) == 75


def _report(step: int, group: str = "training") -> MetricReport:
    return MetricReport(
        trial_id=1, group=group, steps_completed=step, trial_run_id=1, metrics={"loss": 1.0 / step}
    )


def _training_steps(seen: list[tuple[str, dict]]) -> list[list[int]]:
    """The steps of each training-metrics request the server saw, in order."""
    out = []
    for path, body in seen:
        if path == "/api/v1/trials/1/metrics/batch":
            out.append([r["steps_completed"] for r in body["reports"]])
        elif path == "/api/v1/trials/1/metrics" and body["group"] == "training":
            out.append([body["steps_completed"]])
    return out


def _wait_until(predicate) -> None:
    """Wait for ``predicate()`` (the server's view, or a socket's), failing after
    :data:`~dauntless.master.testing.DEADLINE` seconds (a deadline for failure only)."""
    wait_for("the server to see the expected requests", predicate)


def test_training_reports_do_not_wait_and_keep_their_order(server):
    backend = MasterBackend(Session(server, sleep=lambda s: None))
    for step in (1, 2, 3):
        backend.report_metrics(_report(step))
    backend.report_progress(1, 0.5)
    backend.report_metrics(_report(4, "validation"))  # waits for the ones before it
    requests = [(p, b.get("steps_completed", b.get("progress"))) for p, b in _Handler.seen]
    # The training reports, in order, in one or more requests, then the rest in order.
    assert sum(_training_steps(_Handler.seen), []) == [1, 2, 3]
    n = len(_training_steps(_Handler.seen))
    assert requests[n:] == [("/api/v1/trials/1/progress", 0.5), ("/api/v1/trials/1/metrics", 4)]
    backend.close()


def test_training_reports_made_within_the_interval_share_one_request(server):
    backend = MasterBackend(Session(server, sleep=lambda s: None), training_report_interval=0.5)
    # Read before the first report: the interval, counted from its sending (no earlier),
    # has passed since then when the second request arrives however slow the machine is
    # (a lower bound; the wait for the first request could have seen it late).
    before_first = time.monotonic()
    backend.report_metrics(_report(1))
    _wait_until(lambda: _training_steps(_Handler.seen) == [[1]])  # the first goes at once
    for step in (2, 3, 4):
        backend.report_metrics(_report(step))
    # No flush: the held reports leave by themselves once the interval has passed.
    _wait_until(lambda: len(_training_steps(_Handler.seen)) == 2)
    assert time.monotonic() - before_first >= 0.5
    assert _training_steps(_Handler.seen) == [[1], [2, 3, 4]]
    backend.close()


def test_a_flush_sends_held_reports_at_once(server):
    # Held for an hour: a flush that waited for the interval would not return within the
    # join's deadline (one for failure only), so its return shows it cut the hold short.
    backend = MasterBackend(Session(server, sleep=lambda s: None), training_report_interval=3600)
    backend.report_metrics(_report(1))
    _wait_until(lambda: _training_steps(_Handler.seen) == [[1]])
    backend.report_metrics(_report(2))
    backend.report_metrics(_report(3))
    flushing = threading.Thread(target=backend.flush, daemon=True)
    flushing.start()
    flushing.join(DEADLINE)
    assert not flushing.is_alive(), "the flush waited for the report interval"
    assert _training_steps(_Handler.seen) == [[1], [2, 3]]
    backend.report_metrics(_report(4))
    backend.close()  # delivers what is held, too
    assert _training_steps(_Handler.seen) == [[1], [2, 3], [4]]


@pytest.mark.parametrize("interval", [-1, float("inf"), float("nan"), True, "1"])
def test_a_bad_training_report_interval_is_refused(interval):
    with pytest.raises(ValueError, match="training_report_interval"):
        MasterBackend(Session("http://m"), training_report_interval=interval)


def test_a_failed_background_report_is_raised_by_the_next_call():
    release = threading.Event()
    calls = []
    answered = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/metrics"):
            release.wait(DEADLINE)  # held until the test releases it (or it failed)
            answered.append(request.url.path)
            return httpx.Response(400, json={"detail": "bad metrics"})
        return httpx.Response(200, json={})

    backend = MasterBackend(Session("http://m", transport=httpx.MockTransport(handler)))
    backend.report_metrics(_report(1))
    # Proven by ordering: the master holds the report until the test releases it, and
    # the report returned first; the master then has the request in hand, unanswered.
    wait_for("the report to reach the master", lambda: "/api/v1/trials/1/metrics" in calls)
    assert answered == [], "a training report must not wait for the master"
    release.set()
    with pytest.raises(APIError, match="bad metrics"):
        backend.report_early_exit(1, "INVALID_HP")
    backend.report_early_exit(1, "INVALID_HP")  # the error was raised once
    assert calls[-1] == "/api/v1/trials/1/early_exit"
    backend.close()


def test_asking_the_master_now_delivers_the_held_reports_first(server):
    # A searcher decides on the reports it has (ASHA on a validation): the ask must come
    # after them. The training reports are held for an hour, the watcher never started.
    backend = MasterBackend(Session(server, sleep=lambda s: None), training_report_interval=3600)
    backend.report_metrics(_report(1))
    _wait_until(lambda: _training_steps(_Handler.seen) == [[1]])
    backend.report_metrics(_report(2))
    backend.report_metrics(_report(3))
    _Handler.polls_released.set()  # the ask is answered at once: no signal
    preempt = PreemptContext(backend, "1.1", poll_seconds=30)
    assert preempt.ask_master_now() is False
    paths = [path for path, _ in _Handler.seen]
    assert _training_steps(_Handler.seen) == [[1], [2, 3]]
    assert paths[-1] == "/api/v1/allocations/1.1/signals/preemption?timeout_seconds=0", paths
    assert not any(t.name.startswith("preemption-") for t in threading.enumerate())
    backend.close()


def test_closing_ends_the_long_poll_at_once(server):
    backend = MasterBackend(Session(server))
    preempt = PreemptContext(backend, "1.1", poll_seconds=30)
    assert preempt.should_preempt() is False  # starts the watcher
    _wait_until(lambda: _Handler.seen)  # the watcher's first long poll
    assert _Handler.seen[0][0] == "/api/v1/allocations/1.1/signals/preemption?timeout_seconds=30"
    preempt.stop()
    backend.close()
    preempt.close()
    # Proven by ordering: the server holds the long poll until the fixture's end, so the
    # watcher thread ending with no poll answered shows closing ended the poll in flight.
    wait_for(
        "the watcher thread to end",
        lambda: not any(t.name.startswith("preemption-") for t in threading.enumerate()),
    )
    assert _Handler.answered_polls == 0
