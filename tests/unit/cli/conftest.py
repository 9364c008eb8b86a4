"""Fixtures for the CLI and client tests: a clean environment and a small fake master.

The fake master is a real HTTP server on 127.0.0.1 (a thread) that answers the routes
of docs/protocol.md from in-memory dicts and records every request, so the client and
the commands are exercised over real sockets.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from dauntless import _http
from dauntless.cli import _util


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in (
        "DET_MASTER",
        "DET_MASTER_ADDR",
        "DAUNTLESS_DATA_DIR",
        "DET_USER",
        "DET_PASS",
        "DET_USER_TOKEN",
        "DET_MASTER_CERT_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    # Saved tokens go to a per-test config dir, never the real ~/.config.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setattr(_util, "POLL_INTERVAL", 0.01)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions made by the CLI keep their retries but do not wait between them."""
    monkeypatch.setattr(_http.RetryPolicy, "delay", lambda self, retry: 0.0)


def _parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """Decode a multipart/form-data body into ``{name: (filename, bytes)}``."""
    raw = b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    msg = BytesParser(policy=policy.HTTP).parsebytes(raw)
    parts = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        parts[str(name)] = (part.get_filename(), part.get_payload(decode=True))
    return parts


@pytest.fixture(name="parse_multipart")
def parse_multipart_fixture() -> Callable[[str, bytes], dict[str, tuple[str | None, bytes]]]:
    """The multipart decoder, for tests that check request bodies."""
    return _parse_multipart


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeMaster:
    """In-memory master state; tests fill the dicts and read ``requests``."""

    url: str = ""
    experiments: dict[int, dict[str, Any]] = field(default_factory=dict)
    trials: dict[int, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    created: list[dict[str, tuple[str | None, bytes]]] = field(default_factory=list)
    #: Called with (fake, method, path) before each request is answered.
    hooks: list[Callable[[FakeMaster, str, str], None]] = field(default_factory=list)
    #: Answers to force: {(method, path): (status, body)}.
    forced: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: When True, every route but GET /master and POST /auth/login needs a bearer token.
    require_auth: bool = False
    #: {id: {"id", "username", "admin", "active", "display_name", "modified_at", "password"}}
    users: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: {token: user id} of the tokens issued and not revoked.
    tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.add_user("admin", admin=True)
        self.add_user("determined")

    def add_user(
        self, username: str, password: str = "", admin: bool = False, active: bool = True
    ) -> dict[str, Any]:
        uid = max(self.users, default=0) + 1
        self.users[uid] = {
            "id": uid,
            "username": username,
            "admin": admin,
            "active": active,
            "display_name": None,
            "modified_at": 1_700_000_000.0,
            "password": password,
        }
        return self.users[uid]

    def issue_token(self, username: str) -> str:
        user = next(u for u in self.users.values() if u["username"] == username)
        token = f"tok-{username}-{len(self.tokens) + 1}"
        self.tokens[token] = user["id"]
        return token

    @staticmethod
    def public(user: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in user.items() if k != "password"}

    def _caller(self, rec: Recorded) -> dict[str, Any] | None:
        auth = rec.headers.get("authorization", "")
        if not auth.startswith("Bearer "):
            return None
        uid = self.tokens.get(auth.removeprefix("Bearer "))
        return self.users.get(uid) if uid is not None else None

    def _auth_routes(self, rec: Recorded, p: str) -> tuple[int, Any] | None:
        """The auth and user routes; None for any other route."""
        body = json.loads(rec.body or b"{}") if rec.body[:1] in (b"{", b"") else {}
        if rec.method == "POST" and p == "/auth/login":
            match = [u for u in self.users.values() if u["username"] == body.get("username")]
            if not match or match[0]["password"] != body.get("password"):
                return 401, {"detail": "invalid username or password"}
            if not match[0]["active"]:
                return 403, {"detail": "user is deactivated"}
            return 200, {
                "token": self.issue_token(match[0]["username"]),
                "user": self.public(match[0]),
            }
        me = self._caller(rec)
        is_auth_route = p in ("/auth/logout", "/me", "/auth/user", "/users") or p.startswith(
            "/users/"
        )
        if not is_auth_route and not self.require_auth:
            return None
        if me is None and (self.require_auth or is_auth_route) and p != "/master":
            return 401, {"detail": "not signed in"}
        if not is_auth_route:
            return None
        if rec.method == "POST" and p == "/auth/logout":
            self.tokens.pop(rec.headers["authorization"].removeprefix("Bearer "), None)
            return 200, {}
        if rec.method == "GET" and p in ("/me", "/auth/user"):
            return 200, {"user": self.public(me)}
        if rec.method == "GET" and p == "/users":
            return 200, {"users": [self.public(u) for u in self.users.values()]}
        if rec.method == "POST" and p == "/users":
            if not me["admin"]:
                return 403, {"detail": "only administrators may create users"}
            if any(u["username"] == body["username"] for u in self.users.values()):
                return 409, {"detail": f"user {body['username']!r} already exists"}
            user = self.add_user(
                body["username"], body.get("password", ""), bool(body.get("admin"))
            )
            return 201, {"user": self.public(user)}
        m = re.fullmatch(r"/users/(\d+)(/password)?", p)
        if m and int(m.group(1)) in self.users:
            target = self.users[int(m.group(1))]
            if not me["admin"] and target["id"] != me["id"]:
                return 403, {"detail": "only administrators may change other users"}
            if rec.method == "PATCH" and not m.group(2):
                if not me["admin"] and ("active" in body or "admin" in body):
                    return 403, {"detail": "only administrators may (de)activate users"}
                target.update(body)
                return 200, {"user": self.public(target)}
            if rec.method == "POST" and m.group(2):
                target["password"] = body["password"]
                for tok in [t for t, uid in self.tokens.items() if uid == target["id"]]:
                    del self.tokens[tok]
                return 200, {}
        return 404, {"detail": "Not Found"}

    def add_experiment(self, exp_id: int, **fields: Any) -> dict[str, Any]:
        exp = {
            "id": exp_id,
            "name": f"exp-{exp_id}",
            "description": None,
            "state": "ACTIVE",
            "archived": False,
            "config": {"name": f"exp-{exp_id}", "searcher": {"name": "single", "metric": "loss"}},
            "seed": 7,
            "owner": "det",
            "progress": 0.5,
            "start_time": 1_700_000_000.0,
            "end_time": None,
            "num_trials": 0,
            "best_searcher_metric": None,
            "searcher_metric": "loss",
            "smaller_is_better": True,
        }
        exp.update(fields)
        self.experiments[exp_id] = exp
        return exp

    def add_trial(self, trial_id: int, exp_id: int, **fields: Any) -> dict[str, Any]:
        trial = {
            "id": trial_id,
            "experiment_id": exp_id,
            "request_id": f"r{trial_id}",
            "state": "ACTIVE",
            "hparams": {"lr": 0.1, "global_batch_size": 32},
            "seed": 11,
            "restarts": 0,
            "run_id": 1,
            "total_batches": 0,
            "best_validation": None,
            "latest_validation": None,
            "latest_checkpoint": None,
            "start_time": 1_700_000_000.0,
            "end_time": None,
        }
        trial.update(fields)
        self.trials[trial_id] = trial
        self.experiments[exp_id]["num_trials"] = sum(
            1 for t in self.trials.values() if t["experiment_id"] == exp_id
        )
        return trial

    def add_log(self, trial_id: int, text: str, rank_id: int | None = 0) -> None:
        self.logs.append(
            {
                "id": len(self.logs) + 1,
                "trial_id": trial_id,
                "allocation_id": f"a{trial_id}",
                "timestamp": 1_700_000_000.0,
                "stdtype": "stdout",
                "rank_id": rank_id,
                "log": text,
            }
        )

    # -- routing ------------------------------------------------------------------------

    def answer(self, rec: Recorded) -> tuple[int, Any]:
        for hook in list(self.hooks):
            hook(self, rec.method, rec.path)
        if (rec.method, rec.path) in self.forced:
            return self.forced[(rec.method, rec.path)]
        p = rec.path.removeprefix("/api/v1")
        q = {k: v[-1] for k, v in rec.query.items()}
        auth_answer = self._auth_routes(rec, p)
        if auth_answer is not None:
            return auth_answer

        def not_found(what: str) -> tuple[int, Any]:
            return 404, {"detail": f"{what} not found"}

        if rec.method == "GET" and p == "/master":
            return 200, {"version": "0.1.0", "cluster_name": "fake", "cluster_id": "c-1"}
        if rec.method == "GET" and p == "/agents":
            return 200, {"agents": self.agents}
        if rec.method == "POST" and p == "/experiments":
            return self._create(rec)
        if rec.method == "GET" and p == "/experiments":
            want = q.get("archived", "false")  # the master's default; "all": both
            exps = [
                e
                for e in sorted(self.experiments.values(), key=lambda e: e["id"])
                if want == "all" or str(e["archived"]).lower() == want
            ]
            offset, limit = int(q.get("offset", 0)), int(q.get("limit", 100))
            return 200, {"experiments": exps[offset : offset + limit], "total": len(exps)}
        m = re.fullmatch(r"/experiments/(\d+)(/trials|/checkpoints)?", p)
        if rec.method == "GET" and m:
            exp = self.experiments.get(int(m.group(1)))
            if exp is None:
                return not_found(f"experiment {m.group(1)}")
            trials = [t for t in self.trials.values() if t["experiment_id"] == exp["id"]]
            if m.group(2) == "/trials":
                return 200, {"trials": trials}
            if m.group(2) == "/checkpoints":
                ckpts = [c for c in self.checkpoints.values() if c["experiment_id"] == exp["id"]]
                return 200, {"checkpoints": ckpts}
            return 200, {"experiment": exp, "trials": trials}
        m = re.fullmatch(r"/trials/(\d+)(/metrics|/logs|/checkpoints)?", p)
        if rec.method == "GET" and m:
            trial = self.trials.get(int(m.group(1)))
            if trial is None:
                return not_found(f"trial {m.group(1)}")
            if m.group(2) == "/metrics":
                ms = self.metrics.get(trial["id"], [])
                if "group" in q:
                    ms = [x for x in ms if x["group"] == q["group"]]
                return 200, {"metrics": ms}
            if m.group(2) == "/logs":
                after, limit = int(q.get("after_id", 0)), int(q.get("limit", 1000))
                lines = [x for x in self.logs if x["trial_id"] == trial["id"] and x["id"] > after]
                return 200, {"logs": lines[:limit], "trial_state": trial["state"]}
            if m.group(2) == "/checkpoints":
                ckpts = [c for c in self.checkpoints.values() if c["trial_id"] == trial["id"]]
                return 200, {"checkpoints": ckpts}
            return 200, {"trial": trial}
        m = re.fullmatch(r"/checkpoints/([^/]+)", p)
        if rec.method == "GET" and m:
            ckpt = self.checkpoints.get(m.group(1))
            return (200, {"checkpoint": ckpt}) if ckpt else not_found(f"checkpoint {m.group(1)}")
        return 404, {"detail": "Not Found"}

    def _create(self, rec: Recorded) -> tuple[int, Any]:
        parts = _parse_multipart(rec.headers["content-type"], rec.body)
        self.created.append(parts)
        exp_id = max(self.experiments, default=0) + 1
        active = parts.get("activate", (None, b"true"))[1] == b"true"
        exp = self.add_experiment(exp_id, state="ACTIVE" if active else "PAUSED")
        return 201, {"experiment": exp}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeMaster

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _serve(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        rec = Recorded(
            self.command,
            split.path,
            parse_qs(split.query),
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )
        with self.fake.lock:
            self.fake.requests.append(rec)
            status, payload = self.fake.answer(rec)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        ctype = "application/gzip" if isinstance(payload, bytes) else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _serve
    do_POST = _serve
    do_PATCH = _serve


@pytest.fixture
def fake_master() -> Iterator[FakeMaster]:
    fake = FakeMaster()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def closed_port() -> int:
    """A local port where nothing listens (connection refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
