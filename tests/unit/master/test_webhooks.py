"""Webhooks (issue 31 scope 6): Determined's checks and permissions, which experiments a
webhook takes events of, and delivery to a real HTTP receiver started here (signed, once
each, retried while the receiver is down without holding up the master)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.db import WebhookEventRow
from dauntless.master.testing import (
    Cluster,
    agent_headers,
    bearer,
    login,
    model_def_tarball,
    serve,
    wait_for,
)
from dauntless.master.webhook_shipper import backoff
from dauntless.master.webhooks import signature

KEY = "test-signing-key"

CONFIG = {
    "name": "hooked",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _ok(r: Any, code: int = 200) -> Any:
    assert r.status_code == code, (r.request.method, r.request.url, r.status_code, r.text)
    return r.json()


def _hook(name: str, *triggers: tuple[str, dict], **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "url": kw.pop("url", "http://127.0.0.1:9/hook"),
        "webhook_type": "WEBHOOK_TYPE_DEFAULT",
        "triggers": [{"trigger_type": t, "condition": c} for t, c in triggers],
        **kw,
    }


STATE = "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE"
LOG = "TRIGGER_TYPE_TASK_LOG"
CUSTOM = "TRIGGER_TYPE_CUSTOM"


@pytest.fixture()
def basic_master(tmp_path: Path, db_url: str) -> Iterator[tuple[TestClient, Any]]:
    app = create_app(
        MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url), run_loop=False
    )
    with TestClient(app) as client:
        yield client, app


def test_webhook_checks_and_basic_permissions(basic_master: tuple[TestClient, Any]) -> None:
    client, app = basic_master
    admin = bearer(login(client))
    _ok(
        client.post("/api/v1/users", json={"username": "ann", "password": "pw"}, headers=admin), 201
    )
    ann = bearer(login(client, "ann", "pw"))
    client.cookies.clear()
    for body, words in (
        (_hook("a"), "at least one trigger required"),
        (_hook("a", (STATE, {"state": "COMPLETED"}), url="ftp://x"), "valid url required"),
        (_hook("a", (STATE, {"state": "DONE"})), "experiment state"),
        (_hook("a", (LOG, {"regex": "a", "x": 1})), "exactly one key 'regex'"),
        (_hook("a", (LOG, {"regex": "("})), "regex"),
        (_hook("a", (CUSTOM, {})), "SPECIFIC"),
        (_hook("a", ("TRIGGER_TYPE_NOPE", {})), "trigger_type"),
        ({**_hook("a", (STATE, {"state": "ERROR"})), "mode": "X"}, "mode"),
    ):
        r = client.post("/api/v1/webhooks", json=body, headers=admin)
        assert r.status_code == 400 and words in r.text, (body, r.text)
    # basic authz: anyone edits a workspace's webhooks, only admins global ones
    r = client.post("/api/v1/webhooks", json=_hook("g", (STATE, {"state": "ERROR"})), headers=ann)
    assert r.status_code == 403 and "global webhooks" in r.json()["detail"]
    ws_hook = _hook("w", (STATE, {"state": "STATE_COMPLETED"}), workspace_id=1)
    mine = _ok(client.post("/api/v1/webhooks", json={"webhook": ws_hook}, headers=ann))["webhook"]
    assert mine["triggers"][0]["condition"] == {"state": "COMPLETED"}
    assert mine["workspace_id"] == 1 and mine["mode"] == "WEBHOOK_MODE_WORKSPACE"
    glob = _ok(
        client.post("/api/v1/webhooks", json=_hook("g", (LOG, {"regex": "x"})), headers=admin)
    )["webhook"]
    assert glob["workspace_id"] == 0
    assert client.delete(f"/api/v1/webhooks/{glob['id']}", headers=ann).status_code == 403
    listed = _ok(client.get("/api/v1/webhooks", headers=ann))["webhooks"]
    assert {h["name"] for h in listed} == {"w", "g"}
    patched = _ok(
        client.patch(
            f"/api/v1/webhooks/{mine['id']}",
            json={"webhook": {"url": "https://example.invalid/x"}},
            headers=ann,
        )
    )
    assert patched["webhook"]["url"] == "https://example.invalid/x"
    r = client.patch(f"/api/v1/webhooks/{mine['id']}", json={"url": "nope"}, headers=ann)
    assert r.status_code == 400
    # the test event to a closed port: 502 naming the failure, the master unharmed
    r = client.post(f"/api/v1/webhooks/{glob['id']}/test", headers=admin)
    assert r.status_code == 502 and "test request failed" in r.json()["detail"]
    _ok(client.delete(f"/api/v1/webhooks/{mine['id']}", headers=ann))
    assert client.get(f"/api/v1/webhooks/{mine['id']}/events", headers=ann).status_code == 404
    # the signing key is kept out of reach: a private file, not in any answer
    key_file = Path(app.state.ctx.config.data_dir) / "webhook_signing_key"
    assert key_file.stat().st_mode & 0o077 == 0
    assert key_file.read_text().strip() not in json.dumps(listed)
    assert backoff(1, 60) == 1 and backoff(3, 60) == 4 and backoff(30, 60) == 60


def _experiment(client: TestClient, headers: dict, **config: Any) -> int:
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump({**CONFIG, **config})},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        headers=headers,
    )
    return int(_ok(r, 201)["experiment"]["id"])


def test_specific_webhooks_fire_only_for_experiments_naming_them(
    basic_master: tuple[TestClient, Any],
) -> None:
    client, app = basic_master
    admin = bearer(login(client))
    paused = (STATE, {"state": "PAUSED"})
    ws = _ok(client.post("/api/v1/workspaces", json={"name": "W"}, headers=admin), 201)["workspace"]
    _ok(
        client.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "P"}, headers=admin),
        201,
    )
    specific = _ok(
        client.post(
            "/api/v1/webhooks",
            json=_hook("chosen", paused, mode="WEBHOOK_MODE_SPECIFIC"),
            headers=admin,
        )
    )["webhook"]
    every = _ok(client.post("/api/v1/webhooks", json=_hook("all", paused), headers=admin))[
        "webhook"
    ]
    in_w = _ok(
        client.post(
            "/api/v1/webhooks", json=_hook("in-w", paused, workspace_id=ws["id"]), headers=admin
        )
    )["webhook"]
    slack = _ok(
        client.post(
            "/api/v1/webhooks",
            json={**_hook("slack", paused), "webhook_type": "WEBHOOK_TYPE_SLACK"},
            headers=admin,
        )
    )["webhook"]
    named = _experiment(client, admin, integrations={"webhooks": {"webhook_name": ["chosen"]}})
    plain = _experiment(client, admin)
    by_id = _experiment(
        client, admin, workspace="W", project="P",
        integrations={"webhooks": {"webhook_id": [specific["id"]]}},
    )  # fmt: skip
    excluded = _experiment(client, admin, integrations={"webhooks": {"exclude": True}})
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump({**CONFIG, "integrations": {"webhooks": {"x": 1}}})},
        headers=admin,
    )
    assert r.status_code == 400 and "webhooks.x" in r.text
    for exp in (named, plain, by_id, excluded):
        _ok(client.post(f"/api/v1/experiments/{exp}/pause", headers=admin))

    def sent(hook: dict) -> list[int]:
        with app.state.ctx.db.read() as s:
            rows = s.query(WebhookEventRow).filter_by(webhook_id=hook["id"]).all()
            return sorted(json.loads(r.body)["event_data"]["experiment"]["id"] for r in rows)

    assert sent(specific) == [named, by_id]
    assert sent(every) == sorted([named, plain, by_id])
    assert sent(in_w) == [by_id]
    with app.state.ctx.db.read() as s:
        bodies = [
            json.loads(r.body) for r in s.query(WebhookEventRow).filter_by(webhook_id=slack["id"])
        ]
    assert len(bodies) == 3
    assert all(b["blocks"][0]["type"] == "section" and "PAUSED" in b["blocks"][0]["text"]["text"]
               for b in bodies)  # fmt: skip
    events = _ok(client.get(f"/api/v1/webhooks/{every['id']}/events", headers=admin))["events"]
    assert len(events) == 3 and all(e["event_type"] == "EXPERIMENT_STATE_CHANGE" for e in events)


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST (headers, body) and answers
    200; :meth:`stop` takes it down and :meth:`start` brings it back on the same port."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.got.append((dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()

    def payloads(self) -> list[dict[str, Any]]:
        with self.lock:
            got = list(self.got)
        out = []
        for headers, body in got:
            ts = int(headers["X-Determined-AI-Signature-Timestamp"])
            assert headers["X-Determined-AI-Signature"] == signature(KEY.encode(), ts, body)
            assert headers["Content-Type"] == "application/json; charset=UTF-8"
            out.append(json.loads(body))
        return out


def test_events_reach_a_real_receiver_once_each_signed_and_survive_its_absence(
    tmp_path: Path,
) -> None:
    receiver = Receiver()
    receiver.start()
    url = f"http://127.0.0.1:{receiver.port}/hook"
    webhooks = {"signing_key": KEY, "max_backoff": 0.3}
    with (
        serve(str(tmp_path), webhooks=webhooks, scheduler_interval=0.05) as live,
        Cluster(live.url, live.app) as c,
    ):
        hooks = [
            _hook("watch", (STATE, {"state": "COMPLETED"}), (LOG, {"regex": r"loss=nan"}), url=url),
            _hook("alerts", (CUSTOM, {}), url=url, mode="WEBHOOK_MODE_SPECIFIC"),
        ]
        ids = [c._ok(c.admin.post("/api/v1/webhooks", json=h))["webhook"]["id"] for h in hooks]
        config = {**CONFIG, "integrations": {"webhooks": {"webhook_name": ["alerts"]}}}
        exp = c.create_experiment(yaml.safe_dump(config))
        c.register_agent()
        ((trial, alloc),) = c.start_trials(1)
        c.log(alloc, "step 1 loss=0.5", "step 2 loss=nan", "step 3 loss=nan")
        c.log(alloc, "step 4 loss=nan")
        alert = {"data": {"title": "hi", "description": "d", "level": "warn"}}
        c._ok(c.admin.post("/api/v1/webhooks/custom", json={**alert, "experiment_id": exp,
                                                               "trial_id": trial}))  # fmt: skip
        c.report(trial, "validation", 10, {"loss": 0.1})
        c.complete(trial, 10, 0.1)
        c.exited(alloc, 0)
        c.wait_state(exp, "COMPLETED")
        wait_for("three deliveries", lambda: len(receiver.payloads()) >= 3)
        time.sleep(0.5)  # nothing more arrives
        got = receiver.payloads()
        kinds = sorted(p["event_type"] for p in got)
        assert kinds == ["CUSTOM", "EXPERIMENT_STATE_CHANGE", "TASK_LOG"], got
        by_kind = {p["event_type"]: p for p in got}
        state = by_kind["EXPERIMENT_STATE_CHANGE"]
        assert state["condition"] == {"state": "COMPLETED"}
        assert state["event_data"]["experiment"]["id"] == exp
        assert state["event_data"]["experiment"]["state"] == "COMPLETED"
        assert state["event_data"]["experiment"]["workspace"] == "Uncategorized"
        log = by_kind["TASK_LOG"]
        assert log["condition"] == {"regex": "loss=nan"}
        assert log["event_data"]["task_log"]["triggering_log"] == "step 2 loss=nan"
        assert log["event_data"]["experiment"]["trial_id"] == trial
        custom = by_kind["CUSTOM"]["event_data"]["custom_data"]
        assert custom == {"title": "hi", "description": "d", "level": "warn"}

        # The receiver goes away: the master keeps answering, the event waits.
        receiver.stop()
        c._ok(c.admin.post("/api/v1/webhooks/custom", json={**alert, "experiment_id": exp,
                                                               "trial_id": trial}))  # fmt: skip

        def retried() -> bool:
            events = c._ok(c.admin.get(f"/api/v1/webhooks/{ids[1]}/events"))["events"]
            return events[0]["state"] == "QUEUED" and events[0]["attempts"] >= 2

        wait_for("a failed try", retried)
        started = time.monotonic()
        for _ in range(5):
            c._ok(c.admin.get("/api/v1/master"))
        assert time.monotonic() - started < 2.5
        events = c._ok(c.admin.get(f"/api/v1/webhooks/{ids[1]}/events"))["events"]
        assert events[0]["last_error"] and events[0]["delivered_at"] is None
        receiver.start()  # back, on the same port
        wait_for("the delivery after the return", lambda: len(receiver.payloads()) == 4)
        assert receiver.payloads()[-1]["event_type"] == "CUSTOM"

        def latest_event() -> dict:
            return c._ok(c.admin.get(f"/api/v1/webhooks/{ids[1]}/events"))["events"][0]

        # The receiver keeps the payload before it answers 200; the shipper records the
        # delivery once it has read that answer, a moment later.
        wait_for("the delivery recorded", lambda: latest_event()["state"] != "QUEUED")
        delivered = latest_event()
        assert delivered["state"] == "DELIVERED" and delivered["last_status"] == 200
        # a test event, sent at once
        c._ok(c.admin.post(f"/api/v1/webhooks/{ids[0]}/test"))
        assert receiver.payloads()[-1]["event_type"] == "TEST"
    receiver.stop()


def test_det_webhook_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dauntless.cli import main

    monkeypatch.setenv("DET_USER_TOKEN_DIR", str(tmp_path / "tokens"))
    receiver = Receiver()
    receiver.start()
    try:
        with serve(str(tmp_path / "m"), run_loop=False, webhooks={"signing_key": KEY}) as live:

            def det(*argv: str) -> tuple[int, str, str]:
                code = main(["-m", live.url, "-u", "admin", *argv])
                out, err = capsys.readouterr()
                return code, out, err

            url = f"http://127.0.0.1:{receiver.port}/x"
            code, out, err = det(
                "webhook", "create", "done", url, "--trigger", "completed", "--log-regex", "OOM"
            )
            assert code == 0 and "Created webhook 1 (done)" in out, err
            code, out, err = det("webhook", "create", "bad", url, "--custom")
            assert code != 0 and "SPECIFIC" in err
            code, out, err = det("webhook", "create", "none", url)
            assert code != 0 and "at least one trigger" in err
            code, out, _ = det("webhook", "list")
            assert "done" in out and "state:COMPLETED" in out and "log:OOM" in out
            code, out, err = det("webhook", "test", "1")
            assert code == 0 and "answered" in out, err
            assert receiver.payloads()[-1]["event_type"] == "TEST"
            code, out, _ = det("webhook", "events", "1", "--json")
            assert json.loads(out) == {"events": []}  # a test event is not queued
            code, out, err = det("webhook", "delete", "1", "--yes")
            assert code == 0, err
            code, out, _ = det("webhook", "list", "--json")
            assert json.loads(out) == {"webhooks": []}
    finally:
        receiver.stop()


def test_a_backtracking_log_regex_is_switched_off_not_waited_on(
    basic_master: tuple[TestClient, Any], caplog: pytest.LogCaptureFixture
) -> None:
    client, app = basic_master
    admin = bearer(login(client))
    slow = _ok(
        client.post(
            "/api/v1/webhooks", json=_hook("slow", (LOG, {"regex": r"(a|aa)+$"})), headers=admin
        )
    )["webhook"]
    fine = _ok(
        client.post(
            "/api/v1/webhooks", json=_hook("fine", (LOG, {"regex": r"a{5}"})), headers=admin
        )
    )["webhook"]
    _experiment(client, admin)
    ctx = app.state.ctx
    from dauntless.master import loop

    r = client.post(
        "/api/v1/agents",
        headers=agent_headers(app),
        json={"id": "a1", "slots": [{"id": "c0", "type": "cpu"}]},
    )
    assert r.status_code == 200, r.text
    loop.schedule_pass(ctx)
    allocs = _ok(client.get("/api/v1/allocations", headers=admin))["allocations"]
    alloc = allocs[0]["id"]
    line = "a" * 40 + "!"
    started = time.process_time()
    for _ in range(3):
        r = client.post(
            "/api/v1/task/logs",
            json={"logs": [{"allocation_id": alloc, "log": line}]},
            headers=admin,
        )
        assert r.status_code == 200, r.text
    assert time.process_time() - started < 5  # one timed-out match, not three
    assert "took over" in caplog.text

    def count(hook: dict) -> int:
        with ctx.db.read() as s:
            return s.query(WebhookEventRow).filter_by(webhook_id=hook["id"]).count()

    assert count(slow) == 0 and count(fine) == 1


def test_master_flags_take_the_signing_key_from_a_file(tmp_path: Path) -> None:
    from dauntless.master.__main__ import parse_args

    key = tmp_path / "key"
    key.write_text("s3cret\n")
    config = parse_args(
        [
            "--data-dir",
            str(tmp_path),
            "--webhooks-signing-key-file",
            str(key),
            "--webhooks-base-url",
            "https://det.example.com",
        ]
    )
    assert config.webhooks.signing_key is not None
    assert config.webhooks.signing_key.get_secret_value() == "s3cret"
    assert config.webhooks.base_url == "https://det.example.com"
    assert "s3cret" not in repr(config)
    with pytest.raises(SystemExit):
        parse_args(
            ["--data-dir", str(tmp_path), "--webhooks-signing-key-file", str(tmp_path / "no")]
        )
