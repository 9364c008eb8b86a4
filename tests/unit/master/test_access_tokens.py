"""Access tokens (issue 30 scope 3): Determined's REST shapes, lifespans, who may do
what, and a revoked or expired token refused at once, open event streams included.

One master (in-process, SQLite) per test; users alice and bob made through the API.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from argon2 import PasswordHasher
from databases import migrated_sqlite
from fastapi.testclient import TestClient
from pydantic import ValidationError

from dauntless.config import MasterConfig, parse_go_duration
from dauntless.master import auth_secrets, routes_stream
from dauntless.master.app import create_app
from dauntless.master.testing import DEADLINE, bearer, login


@pytest.fixture()
def world(tmp_path, monkeypatch):
    # Passwords hashed at argon2's smallest costs (hashing is tested in test_auth.py).
    monkeypatch.setattr(
        auth_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18082), run_loop=False)
    with TestClient(app) as client:
        admin = login(client)
        ids = {}
        for name in ("alice", "bob"):
            r = client.post(
                "/api/v1/users",
                headers=bearer(admin),
                json={"username": name, "password": f"{name}-pw"},
            )
            assert r.status_code == 201, r.text
            ids[name] = r.json()["user"]["id"]
        yield client, app, admin, ids


def _create(client, token, **body):
    r = client.post("/api/v1/tokens", headers=bearer(token), json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _infos(client, token, **params):
    r = client.get("/api/v1/tokens", headers=bearer(token), params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_access_token_lives_until_revoked_and_is_listed_apart_from_sessions(world):
    client, app, admin, ids = world
    alice = login(client, "alice", "alice-pw")
    made = _create(client, alice, lifespan="48h", description="CI of alice")
    token, token_id = made["token"], made["token_id"]
    r = client.get("/api/v1/me", headers=bearer(token))
    assert r.status_code == 200 and r.json()["user"]["username"] == "alice"

    body = _infos(client, alice)
    (info,) = body["token_info"]
    assert info["id"] == token_id and info["user_id"] == ids["alice"]
    assert info["token_type"] == "TOKEN_TYPE_ACCESS_TOKEN" and info["revoked"] is False
    assert info["description"] == "CI of alice"
    assert body["pagination"] == {
        "offset": 0,
        "limit": 0,
        "start_index": 0,
        "end_index": 1,
        "total": 1,
    }
    expiry = time.mktime(time.strptime(info["expiry"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(expiry - (time.time() + 48 * 3600)) < 120
    sessions = _infos(client, alice, token_type="TOKEN_TYPE_USER_SESSION")["token_info"]
    assert [s["token_type"] for s in sessions] == ["TOKEN_TYPE_USER_SESSION"]
    assert token_id not in {s["id"] for s in sessions}

    # Signing out with the token does not revoke it; a password change keeps it too
    # but ends alice's login sessions.
    assert client.post("/api/v1/auth/logout", headers=bearer(token)).status_code == 200
    r = client.post(
        f"/api/v1/users/{ids['alice']}/password", headers=bearer(alice), json={"password": "x"}
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/me", headers=bearer(alice)).status_code == 401
    assert client.get("/api/v1/me", headers=bearer(token)).status_code == 200

    r = client.patch(
        f"/api/v1/tokens/{token_id}", headers=bearer(token), json={"description": "renamed"}
    )
    assert r.status_code == 200 and r.json()["token_info"]["description"] == "renamed"
    r = client.patch(
        f"/api/v1/tokens/{token_id}", headers=bearer(admin), json={"set_revoked": True}
    )
    assert r.status_code == 200 and r.json()["token_info"]["revoked"] is True
    r = client.get("/api/v1/me", headers=bearer(token))
    assert r.status_code == 401
    assert r.json()["detail"] == f"the access token (id {token_id}) has been revoked"
    assert _infos(client, admin, username="alice")["token_info"] == []
    (gone,) = _infos(client, admin, username="alice", show_inactive="true")["token_info"]
    assert gone["revoked"] is True and gone["username"] == "alice"
    r = client.patch(f"/api/v1/tokens/{token_id}", headers=bearer(admin), json={})
    assert r.json()["token_info"]["revoked"] is True  # revocation is permanent
    r = client.patch("/api/v1/tokens/99999", headers=bearer(admin), json={"set_revoked": True})
    assert r.status_code == 404 and r.json()["detail"] == "token with id 99999 not found"


def test_lifespans_follow_security_token(world):
    client, app, admin, ids = world
    bad = {
        "soon": "failed to parse lifespan",
        "-5h": "lifespan must be positive",
        "0": "lifespan must be positive",
        "721h": "longer than the maximum of 30 days (security.token.max_lifespan_days)",
    }
    for lifespan, detail in bad.items():
        r = client.post("/api/v1/tokens", headers=bearer(admin), json={"lifespan": lifespan})
        assert r.status_code == 400, lifespan
        assert detail in r.json()["detail"], (lifespan, r.json())
        assert r.json()["errors"][0]["field"] == "lifespan"
    now = time.time()
    for lifespan, days in ((None, 30), ("-1", 30), ("1h30m", 1.5 / 24)):
        body = {} if lifespan is None else {"lifespan": lifespan}
        made = _create(client, admin, **body)
        (info,) = _infos(client, admin, token_ids=made["token_id"])["token_info"]
        expiry = time.mktime(time.strptime(info["expiry"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert abs(expiry - (now + days * 86400)) < 120, (lifespan, info)

    assert parse_go_duration("1.5h") == parse_go_duration("90m") == 5400.0
    assert parse_go_duration("300ms") == pytest.approx(0.3)
    for text in ("", "h", "5", "5d", "1h 2m"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_go_duration(text)
    MasterConfig(data_dir="x", security={"token": {"max_lifespan_days": -1}})
    for token, what in (
        ({"default_lifespan_days": 40}, "must not exceed max_lifespan_days"),
        ({"max_lifespan_days": 0}, "max_lifespan_days must be -1"),
        ({"default_lifespan_days": -2}, "default_lifespan_days must be -1"),
    ):
        with pytest.raises(ValidationError, match=what):
            MasterConfig(data_dir="x", security={"token": token})


def test_who_may_make_list_and_edit_tokens(world):
    client, app, admin, ids = world
    alice = login(client, "alice", "alice-pw")
    bob = login(client, "bob", "bob-pw")
    r = client.post("/api/v1/tokens", headers=bearer(bob), json={"user_id": ids["alice"]})
    assert r.status_code == 403
    assert r.json()["detail"] == "only an admin may create access tokens for another user"
    made = _create(client, admin, user_id=ids["alice"], description="made by an admin")
    assert (
        client.get("/api/v1/me", headers=bearer(made["token"])).json()["user"]["id"]
        == (ids["alice"])
    )
    # An access token cannot mint another, so a leaked one cannot outlive its revocation.
    r = client.post("/api/v1/tokens", headers=bearer(made["token"]), json={})
    assert r.status_code == 403 and "may not create access tokens" in r.json()["detail"]

    bobs = _create(client, bob)["token_id"]
    assert [t["id"] for t in _infos(client, bob)["token_info"]] == [bobs]
    r = client.get("/api/v1/tokens", headers=bearer(bob), params={"username": "alice"})
    assert r.status_code == 403
    all_ids = {t["id"] for t in _infos(client, admin)["token_info"]}
    assert {bobs, made["token_id"]} <= all_ids
    r = client.patch(
        f"/api/v1/tokens/{made['token_id']}", headers=bearer(bob), json={"set_revoked": True}
    )
    assert r.status_code == 403
    r = client.patch(
        f"/api/v1/tokens/{made['token_id']}", headers=bearer(alice), json={"set_revoked": True}
    )
    assert r.status_code == 200
    ordered = _infos(client, admin, sort_by="SORT_BY_ID", order_by="ORDER_BY_DESC")["token_info"]
    assert [t["id"] for t in ordered] == sorted((t["id"] for t in ordered), reverse=True)
    r = client.get("/api/v1/tokens", headers=bearer(admin), params={"sort_by": "colour"})
    assert r.status_code == 400 and "unknown sort_by" in r.json()["detail"]
    assert _infos(client, admin, username="nobody")["token_info"] == []
    r = client.get("/api/v1/tokens", headers=bearer(admin), params={"token_ids": 2**40})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "token_ids"


def test_an_expired_token_is_refused(world):
    client, app, admin, ids = world
    made = _create(client, admin, lifespan="1h")
    auth = app.state.auth
    real = auth.clock
    auth.clock = lambda: real() + 3601
    try:
        r = client.get("/api/v1/me", headers=bearer(made["token"]))
        assert r.status_code == 401 and r.json()["detail"] == (
            "the access token has expired; sign in again"
        )
    finally:
        auth.clock = real


def _stream_until_end(client, token, out):
    out["text"] = client.get("/api/v1/stream/cluster", headers=bearer(token)).text
    out["ended"] = time.monotonic()


def _events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_open_streams_end_at_once_when_their_token_is_revoked_or_expires(world, monkeypatch):
    client, app, admin, ids = world
    # Only a revocation or the expiry can end these streams: the periodic check is off.
    monkeypatch.setattr(routes_stream, "REAUTH_SECONDS", 3600.0)
    revoked = _create(client, admin)
    expiring = _create(client, admin, lifespan="1h")
    outs: list[dict] = [{}, {}]
    watchers = [
        threading.Thread(target=_stream_until_end, args=(client, t["token"], out), daemon=True)
        for t, out in zip((revoked, expiring), outs, strict=True)
    ]
    for w in watchers:
        w.start()
    time.sleep(1.0)  # both streams are open (they have no end of their own)
    assert all(w.is_alive() for w in watchers)
    r = client.patch(
        f"/api/v1/tokens/{revoked['token_id']}", headers=bearer(admin), json={"set_revoked": True}
    )
    assert r.status_code == 200
    watchers[0].join(timeout=DEADLINE)
    assert not watchers[0].is_alive(), "the stream outlived its revoked token"
    assert _events(outs[0]["text"])[-1] == (
        "unauthorized",
        {"detail": f"the access token (id {revoked['token_id']}) has been revoked"},
    )
    assert watchers[1].is_alive()  # the other token still holds
    auth = app.state.auth
    real = auth.clock
    monkeypatch.setattr(auth, "clock", lambda: real() + 3601)
    watchers[1].join(timeout=DEADLINE)
    assert not watchers[1].is_alive(), "the stream outlived its token's expiry"
    assert _events(outs[1]["text"])[-1][0] == "unauthorized"
    r = client.get("/api/v1/stream/cluster", headers=bearer(expiring["token"]))
    assert r.status_code == 401
