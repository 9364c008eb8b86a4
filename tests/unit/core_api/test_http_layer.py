"""The clients' one HTTP layer (dauntless._http): the retry policy and the error classes
that the SDK, the Core API, the agent and the launcher share."""

from __future__ import annotations

import random
import ssl

import httpx
import pytest

from dauntless import _http
from dauntless._http import APIError, ClientError, MasterUnreachableError, RetryPolicy
from dauntless.client import APIError as ClientAPIError
from dauntless.client import MasterUnreachableError as ClientUnreachable
from dauntless.core import APIError as CoreAPIError
from dauntless.core import MasterUnreachableError as CoreUnreachable


def test_one_error_hierarchy_for_every_client() -> None:
    assert ClientAPIError is CoreAPIError is APIError
    assert ClientUnreachable is CoreUnreachable is MasterUnreachableError
    assert issubclass(APIError, ClientError) and issubclass(MasterUnreachableError, ClientError)
    # Code that caught the Core API's old ConnectionError subclass still catches it.
    assert issubclass(MasterUnreachableError, ConnectionError)
    err = APIError(409, "trial is not active", method="GET", path="/x")
    assert str(err) == "GET /x answered 409: trial is not active"
    assert err.status == err.status_code == 409
    assert str(APIError(404, "no such trial")) == "HTTP 404: no such trial"


def test_delays_grow_by_equal_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0, rng=random.Random(1))
    for retry, cap in zip(range(1, 8), [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0], strict=True):
        for _ in range(50):
            assert cap / 2 <= policy.delay(retry) <= cap
    assert RetryPolicy(backoff=1.0, max_backoff=10.0).delay(10_000) <= 10.0


def test_call_retries_what_the_caller_says_then_gives_the_last_outcome() -> None:
    slept: list[float] = []
    policy = RetryPolicy(attempts=3, backoff=1.0, max_backoff=1.0, sleep=slept.append)
    answers = iter([503, 503, 503, 200])
    got = policy.call(
        lambda: next(answers), retry_error=lambda e: False, retry_result=lambda a: a == 503
    )
    assert got == 503 and len(slept) == 2  # three attempts in all: the last answer stands

    calls = []

    def refuse() -> int:
        calls.append(1)
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        policy.call(refuse, retry_error=lambda e: isinstance(e, OSError))
    assert len(calls) == 3
    with pytest.raises(ValueError):
        policy.call(lambda: int("x"), retry_error=lambda e: isinstance(e, OSError))


def test_no_limit_ends_when_stopped() -> None:
    calls = []

    def fail() -> None:
        calls.append(1)
        raise TimeoutError

    policy = RetryPolicy(attempts=None, backoff=0.0, max_backoff=0.0, sleep=lambda s: None)
    with pytest.raises(TimeoutError):
        policy.call(fail, retry_error=lambda e: True, stopped=lambda: len(calls) >= 7)
    assert len(calls) == 7


def test_what_is_worth_a_retry() -> None:
    plain, repeatable = RetryPolicy(), RetryPolicy(repeatable=True)
    assert plain.retryable_status("GET", 503) and plain.retryable_status("GET", 500)
    assert not plain.retryable_status("POST", 503) and repeatable.retryable_status("POST", 503)
    assert not plain.retryable_status("GET", 404)
    refused = httpx.ConnectError("refused")
    assert plain.retryable_error("POST", refused, sent=False)  # nothing reached the master
    assert not plain.retryable_error("POST", httpx.ReadTimeout("slow"), sent=True)
    assert plain.retryable_error("GET", httpx.ReadTimeout("slow"), sent=True)
    bad_cert = ssl.SSLCertVerificationError("certificate verify failed")
    assert not repeatable.retryable_error("GET", bad_cert, sent=False)


@pytest.mark.parametrize(
    "kwargs", [{"attempts": 0}, {"attempts": True}, {"backoff": 2.0, "max_backoff": 1.0}]
)
def test_bad_policy_numbers_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_the_module_stays_light() -> None:
    # Imported on every trial's start (dauntless.core): the standard library and _tls only
    # when the module is imported; httpx only in the function that builds a client (and
    # for type checkers).
    import ast
    from pathlib import Path

    tree = ast.parse(Path(_http.__file__).read_text())

    def names(nodes: list[ast.stmt]) -> set[str]:
        return {
            (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
            for n in nodes
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }

    at_import = names(tree.body)
    assert at_import <= {
        "__future__",
        "contextvars",
        "logging",
        "random",
        "time",
        "collections.abc",
        "dataclasses",
        "typing",
        "dauntless._tls",
    }
    everywhere = names([n for n in ast.walk(tree) if isinstance(n, ast.stmt)])
    assert everywhere - at_import == {"httpx"}


# A trial's code that configures logging as Determined's tutorials do, then talks to a
# real HTTP server on 127.0.0.1 through the Core API's session and through httpx itself.
_TRIAL_LOGGING = """
import http.server, json, logging, sys, threading
import httpx
from dauntless.core._session import Session

class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

logging.basicConfig(level=getattr(logging, sys.argv[1]), stream=sys.stdout,
                    format="%(levelname)s %(name)s: %(message)s")
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}"
session = Session(url, max_attempts=1)
assert session.get("/ours") == {"ok": True}
httpx.get(url + "/theirs").raise_for_status()
logging.getLogger("trial").info("done")
server.shutdown()
"""


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_our_requests_log_at_debug_only(level: str) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _TRIAL_LOGGING, level],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    ours = [line for line in out.splitlines() if "/ours" in line]
    theirs = [line for line in out.splitlines() if "/theirs" in line]
    assert "INFO trial: done" in out, out
    # The user's own httpx request keeps httpx's INFO line either way.
    assert len(theirs) == 1 and theirs[0].startswith("INFO httpx: HTTP Request: GET"), out
    if level == "INFO":
        assert ours == [], out
    else:
        assert len(ours) == 1 and ours[0].startswith("DEBUG httpx: HTTP Request: GET"), out
