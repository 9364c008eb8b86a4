"""The task service's reports to the master (issue 38 scope 6): retried with backoff
through ``dauntless._http.RetryPolicy`` while the master answers 5xx or cannot be
reached, refused reports not retried, and a service whose address could not be reported
stopped with an error logged and exit code ``REPORT_FAILED_EXIT``.

Real HTTP servers on 127.0.0.1 play the master.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dauntless._http import APIError, MasterUnreachableError
from dauntless.exec import task_service


class _FakeMaster:
    """An HTTP server answering each POST with the next status of ``statuses`` (the
    last one repeats), recording (path, authorization, body)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.requests: list[tuple[str, str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, self.headers["Authorization"], body))
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                data = json.dumps({} if status < 400 else {"detail": f"status {status}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture()
def task_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.setenv("DET_TASK_ID", "t1")
    monkeypatch.setenv("DET_SESSION_TOKEN", "task-token")
    monkeypatch.delenv("DET_MASTER_CERT_FILE", raising=False)
    yield monkeypatch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_report_retries_5xx_then_succeeds(task_env: pytest.MonkeyPatch) -> None:
    fake = _FakeMaster([503, 502, 200])
    try:
        task_env.setenv("DET_MASTER", fake.url)
        waits: list[float] = []
        master = task_service._Master(report_deadline=60.0, sleep=waits.append)
        master.report(addr="127.0.0.1", port=4242)
    finally:
        fake.close()
    assert [r[0] for r in fake.requests] == ["/api/v1/tasks/t1/service"] * 3
    assert {r[1] for r in fake.requests} == {"Bearer task-token"}
    assert fake.requests[-1][2] == {"addr": "127.0.0.1", "port": 4242}
    # Two backoffs, within the policy's caps (equal jitter: [d/2, d] of 0.5 s, then 1 s).
    assert len(waits) == 2 and 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0


def test_a_refused_report_is_not_retried(task_env: pytest.MonkeyPatch) -> None:
    fake = _FakeMaster([409])
    try:
        task_env.setenv("DET_MASTER", fake.url)
        master = task_service._Master(report_deadline=60.0, sleep=lambda _s: None)
        with pytest.raises(APIError) as err:
            master.report(addr="127.0.0.1", port=4242)
    finally:
        fake.close()
    assert len(fake.requests) == 1
    assert err.value.status == 409 and "status 409" in str(err.value)


def test_an_absent_master_fails_the_report_after_the_deadline(
    task_env: pytest.MonkeyPatch,
) -> None:
    task_env.setenv("DET_MASTER", f"http://127.0.0.1:{_closed_port()}")
    master = task_service._Master(report_deadline=0.6)
    start = time.monotonic()
    with pytest.raises(MasterUnreachableError) as err:
        master.report(addr="127.0.0.1", port=4242)
    took = time.monotonic() - start
    assert 0.6 <= took < 5.0
    assert "for 0.6 s" in str(err.value)


def test_a_shell_whose_address_cannot_be_reported_stops(
    task_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The shell's WebSocket server starts, its report fails for the deadline, and the
    process stops it and returns REPORT_FAILED_EXIT with an error logged."""
    task_env.setenv("DET_MASTER", f"http://127.0.0.1:{_closed_port()}")
    task_env.setenv("DET_ADVERTISE_ADDR", "127.0.0.1")
    task_env.setenv("DAUNTLESS_SERVICE_TOKEN", "service-token")
    task_env.setenv("DAUNTLESS_PROXY_PREFIX", "/proxy/t1/")
    task_env.delenv("DAUNTLESS_IDLE_TIMEOUT", raising=False)
    caplog.set_level(logging.ERROR, logger="dauntless.task_service")
    code = task_service.run_shell(task_service._Master(report_deadline=0.6))
    assert code == task_service.REPORT_FAILED_EXIT
    assert any(
        "not reported to the master" in r.getMessage() and r.levelno == logging.ERROR
        for r in caplog.records
    ), caplog.text
