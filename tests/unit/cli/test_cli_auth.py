"""Signing in: the token store, which credentials are used, re-login on 401, `det user`."""

from __future__ import annotations

import io
import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from dauntless.cli import main
from dauntless.client import AuthenticationError, Session, TokenStore, default_store_path
from dauntless.master.testing import Cluster, bearer, login

pytestmark = pytest.mark.usefixtures("no_backoff")


def run(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def token_of(cluster: Cluster, username: str, password: str = "") -> str:
    """A fresh token of ``username``, from the master's own sign-in route."""
    with httpx.Client(base_url=cluster.url) as client:
        return login(client, username, password)


def valid(cluster: Cluster, token: str) -> bool:
    """Whether the master still accepts ``token``."""
    return cluster.admin.get("/api/v1/me", headers=bearer(token)).status_code == 200


def user_id(cluster: Cluster, username: str) -> int:
    users = cluster.admin.get("/api/v1/users").json()["users"]
    return int(next(u["id"] for u in users if u["username"] == username))


def add_user(cluster: Cluster, username: str, password: str) -> None:
    r = cluster.admin.post("/api/v1/users", json={"username": username, "password": password})
    assert r.status_code in (200, 201), r.text


def set_password(cluster: Cluster, username: str, password: str) -> None:
    uid = user_id(cluster, username)
    r = cluster.admin.post(f"/api/v1/users/{uid}/password", json={"password": password})
    assert r.status_code == 200, r.text


# -- the token store --------------------------------------------------------------------


def test_store_default_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_store_path() == str(tmp_path / "dauntless" / "auth.json")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(tmp_path / "home" / ".config" / "dauntless" / "auth.json")


def test_store_file_is_private_and_replaced_atomically(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "dauntless" / "auth.json"
    store = TokenStore(path)
    store.set_token("http://m:8080", "alice", "t1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    inode = path.stat().st_ino
    store.set_token("http://m:8080", "bob", "t2")
    # A new file renamed over the old one (never rewritten in place), still 0600, and no
    # temporary file is left behind.
    assert path.stat().st_ino != inode
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(path.parent)) == [".auth.lock", "auth.json"]
    data = json.loads(path.read_text())
    assert data["masters"]["http://m:8080"] == {
        "active_user": "bob",
        "tokens": {"alice": "t1", "bob": "t2"},
    }


def test_store_is_per_master_and_user(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "auth.json")
    store.set_token("http://a:8080", "alice", "ta")
    store.set_token("http://b:8080", "alice", "tb")
    store.set_token("http://b:8080", "bob", "tb2", activate=False)
    assert store.get_token("http://a:8080", "alice") == "ta"
    assert store.get_token("http://b:8080", "alice") == "tb"
    assert store.get_token("http://a:8080", "bob") is None
    assert store.active_user("http://b:8080") == "alice"
    store.drop_token("http://b:8080", "alice")
    assert store.active_user("http://b:8080") is None
    assert store.users("http://b:8080") == {"bob": "tb2"}
    assert store.users("http://a:8080") == {"alice": "ta"}
    store.drop_master("http://b:8080")
    assert store.users("http://b:8080") == {}


def test_store_reads_a_corrupt_file_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text("{not json")
    store = TokenStore(path)
    assert store.get_token("http://a:8080", "x") is None
    store.set_token("http://a:8080", "x", "t")
    assert store.get_token("http://a:8080", "x") == "t"


# -- which credentials ------------------------------------------------------------------


def _session(cluster: Cluster, **kw: Any) -> Session:
    return Session(cluster.url, retries=0, **kw)


def test_new_cluster_signs_in_as_determined_and_saves_the_token(cluster: Cluster) -> None:
    with _session(cluster) as s:
        assert s.list_agents() == []
        assert s.whoami()["username"] == "determined"
        token = s.token
    assert token is not None and valid(cluster, token)
    store = TokenStore()
    assert store.active_user(cluster.url) == "determined"
    assert store.get_token(cluster.url, "determined") == token
    # The next session uses the saved token directly: signing in again would have made
    # a new one.
    with _session(cluster) as s:
        s.list_agents()
        assert s.token == token


def test_env_token_wins_and_is_not_saved(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    env_token = token_of(cluster, "admin")
    TokenStore().set_token(cluster.url, "determined", token_of(cluster, "determined"))
    monkeypatch.setenv("DET_USER_TOKEN", env_token)
    with _session(cluster) as s:
        assert s.whoami()["username"] == "admin"
        assert s.token == env_token
    assert TokenStore().get_token(cluster.url, "admin") is None


def test_refused_env_token_is_an_error_not_a_silent_login(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER_TOKEN", "bogus")
    with _session(cluster) as s, pytest.raises(AuthenticationError, match="DET_USER_TOKEN"):
        s.list_agents()
    assert TokenStore().users(cluster.url) == {}


def test_saved_token_of_the_named_user(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TokenStore()
    store.set_token(cluster.url, "admin", token_of(cluster, "admin"), activate=False)
    store.set_token(cluster.url, "determined", token_of(cluster, "determined"))
    with _session(cluster) as s:  # the active user
        assert s.whoami()["username"] == "determined"
    with _session(cluster, user="admin") as s:  # -u
        assert s.whoami()["username"] == "admin"
    monkeypatch.setenv("DET_USER", "admin")
    with _session(cluster) as s:  # DET_USER
        assert s.whoami()["username"] == "admin"


def test_det_user_and_det_pass_sign_in(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    add_user(cluster, "alice", "s3cret")
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", "s3cret")
    with _session(cluster) as s:
        assert s.whoami()["username"] == "alice"
        token = s.token
    assert TokenStore().get_token(cluster.url, "alice") == token
    monkeypatch.setenv("DET_PASS", "wrong")
    TokenStore().drop_master(cluster.url)
    with _session(cluster) as s, pytest.raises(AuthenticationError, match="alice"):
        s.whoami()


def test_password_set_without_terminal_says_to_log_in(cluster: Cluster) -> None:
    set_password(cluster, "determined", "changed")
    with _session(cluster) as s:
        with pytest.raises(AuthenticationError, match="det user login determined"):
            s.list_agents()


def test_password_set_asks_with_the_prompt(cluster: Cluster) -> None:
    set_password(cluster, "determined", "changed")
    asked: list[str] = []

    def prompt(msg: str) -> str:
        asked.append(msg)
        return "changed"

    with _session(cluster, prompt=prompt) as s:
        assert s.list_agents() == []
    assert asked == ["Password for user 'determined': "]


def test_revoked_saved_token_is_dropped_and_signed_in_again_once(cluster: Cluster) -> None:
    revoked = token_of(cluster, "determined")
    r = cluster.admin.post("/api/v1/auth/logout", headers=bearer(revoked))
    assert r.status_code == 200 and not valid(cluster, revoked)
    store = TokenStore()
    store.set_token(cluster.url, "determined", revoked)
    with _session(cluster) as s:
        assert s.list_agents() == []
        new = s.token
    assert new is not None and new != revoked and valid(cluster, new)
    assert store.get_token(cluster.url, "determined") == new


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, list[str]]]:
    """A server that signs anyone in but then answers every other request 401 (as a
    master whose tokens expire at once would; the real master cannot be made to), and
    the paths it was asked, in order."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.path)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/api/v1/auth/login":
                status, body = 200, {"token": "t", "user": {"username": "determined"}}
            else:
                status, body = 401, {"detail": "token expired"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_second_401_is_not_retried_forever(refusing_server: tuple[str, list[str]]) -> None:
    url, seen = refusing_server
    with Session(url, retries=0) as s, pytest.raises(AuthenticationError):
        s.list_agents()
    assert seen.count("/api/v1/agents") == 2


def test_login_false_raises_instead_of_signing_in(cluster: Cluster) -> None:
    with _session(cluster, login=False) as s, pytest.raises(AuthenticationError):
        s.list_agents()
    assert TokenStore().users(cluster.url) == {}


# -- det user ---------------------------------------------------------------------------


def test_cli_login_whoami_logout(cluster: Cluster, capsys: Any, monkeypatch: Any) -> None:
    add_user(cluster, "alice", "pw")
    code, out, err = run(
        capsys,
        "-m",
        cluster.url,
        "user",
        "login",
        "alice",
        stdin="pw\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert "Signed in as user 'alice'" in out
    assert TokenStore().active_user(cluster.url) == "alice"
    code, out, _ = run(capsys, "-m", cluster.url, "user", "whoami")
    assert code == 0 and "'alice'" in out
    code, out, _ = run(capsys, "-m", cluster.url, "user", "whoami", "--json")
    assert json.loads(out)["user"]["username"] == "alice"
    token = TokenStore().get_token(cluster.url, "alice")
    assert token is not None and valid(cluster, token)
    code, out, _ = run(capsys, "-m", cluster.url, "user", "logout")
    assert code == 0 and "alice" in out
    assert not valid(cluster, token)
    assert TokenStore().users(cluster.url) == {}


def test_cli_login_wrong_password(cluster: Cluster, capsys: Any, monkeypatch: Any) -> None:
    add_user(cluster, "alice", "pw")
    code, out, err = run(
        capsys,
        "-m",
        cluster.url,
        "user",
        "login",
        "alice",
        stdin="nope\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1
    assert "invalid username or password" in err and "Traceback" not in err
    assert TokenStore().users(cluster.url) == {}


def test_cli_logout_all(cluster: Cluster, capsys: Any) -> None:
    store = TokenStore()
    t1, t2 = token_of(cluster, "admin"), token_of(cluster, "determined")
    store.set_token(cluster.url, "admin", t1)
    store.set_token(cluster.url, "determined", t2)
    code, out, _ = run(capsys, "-m", cluster.url, "user", "logout", "--all")
    assert code == 0 and "2 user(s)" in out
    assert not valid(cluster, t1) and not valid(cluster, t2)
    assert store.users(cluster.url) == {}


def test_cli_global_user_flag(cluster: Cluster, capsys: Any) -> None:
    TokenStore().set_token(cluster.url, "admin", token_of(cluster, "admin"), activate=False)
    code, out, _ = run(capsys, "-m", cluster.url, "-u", "admin", "user", "whoami")
    assert code == 0 and "'admin' (administrator)" in out
    code, out, _ = run(capsys, "-m", cluster.url, "user", "whoami", "-u", "admin")
    assert code == 0 and "'admin'" in out
    # Without -u: the default user signs in with the empty password.
    code, out, _ = run(capsys, "-m", cluster.url, "user", "whoami")
    assert code == 0 and "'determined'" in out


def test_cli_list(cluster: Cluster, capsys: Any) -> None:
    code, out, _ = run(capsys, "-m", cluster.url, "user", "ls")
    assert code == 0
    lines = out.splitlines()
    assert "Username" in lines[0]
    assert any("admin" in ln and "yes" in ln for ln in lines[1:])
    code, out, _ = run(capsys, "-m", cluster.url, "user", "list", "--json")
    assert json.loads(out)["users"] == cluster.admin.get("/api/v1/users").json()["users"]
    assert sorted(u["username"] for u in json.loads(out)["users"]) == ["admin", "determined"]


def test_cli_create_needs_admin(cluster: Cluster, capsys: Any) -> None:
    code, out, err = run(capsys, "-m", cluster.url, "user", "create", "bob")
    assert code == 1
    assert err.startswith("Error: only an admin may ") and "Traceback" not in err
    code, out, err = run(
        capsys,
        "-m",
        cluster.url,
        "-u",
        "admin",
        "user",
        "create",
        "bob",
        "--admin",
        "--password",
        "pw",
    )
    assert code == 0, err
    assert "Created administrator 'bob'" in out
    users = cluster.admin.get("/api/v1/users").json()["users"]
    assert next(u for u in users if u["username"] == "bob")["admin"] is True
    assert valid(cluster, token_of(cluster, "bob", "pw"))


def test_cli_change_own_password_keeps_you_signed_in(
    cluster: Cluster, capsys: Any, monkeypatch: Any
) -> None:
    old = token_of(cluster, "determined")
    TokenStore().set_token(cluster.url, "determined", old)
    code, _, err = run(
        capsys,
        "-m",
        cluster.url,
        "user",
        "change-password",
        stdin="n3w\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert valid(cluster, token_of(cluster, "determined", "n3w"))
    # The old token was revoked; the CLI signed in again with the new password.
    assert not valid(cluster, old)
    token = TokenStore().get_token(cluster.url, "determined")
    assert token is not None and token != old and valid(cluster, token)
    code, out, _ = run(capsys, "-m", cluster.url, "user", "whoami")
    assert code == 0 and "'determined'" in out


def test_cli_change_other_password_as_admin(
    cluster: Cluster, capsys: Any, monkeypatch: Any
) -> None:
    code, _, err = run(
        capsys,
        "-m",
        cluster.url,
        "-u",
        "admin",
        "user",
        "change-password",
        "determined",
        stdin="x\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert valid(cluster, token_of(cluster, "determined", "x"))
    code, _, err = run(
        capsys,
        "-m",
        cluster.url,
        "user",
        "change-password",
        "admin",
        stdin="x\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1  # determined needs its new password; stdin ended: no terminal
    assert "det user login determined" in err and "Traceback" not in err


def test_cli_activate_deactivate(cluster: Cluster, capsys: Any, monkeypatch: Any) -> None:
    add_user(cluster, "carol", "pw")

    def active() -> bool:
        users = cluster.admin.get("/api/v1/users").json()["users"]
        return bool(next(u for u in users if u["username"] == "carol")["active"])

    code, out, err = run(capsys, "-m", cluster.url, "-u", "admin", "user", "deactivate", "carol")
    assert code == 0, err
    assert "Deactivated user 'carol'" in out
    assert active() is False
    code, _, err = run(
        capsys,
        "-m",
        cluster.url,
        "user",
        "login",
        "carol",
        stdin="pw\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1 and "deactivated" in err
    code, out, _ = run(capsys, "-m", cluster.url, "-u", "admin", "user", "activate", "carol")
    assert code == 0 and active() is True
    code, _, err = run(capsys, "-m", cluster.url, "-u", "admin", "user", "activate", "nobody")
    assert code == 1 and "user 'nobody' not found" in err
    code, _, err = run(capsys, "-m", cluster.url, "user", "deactivate", "admin")
    assert code == 1 and "Error: only an admin may edit another user" in err


def test_cli_unauthenticated_error_is_clear(cluster: Cluster, capsys: Any) -> None:
    set_password(cluster, "determined", "set")
    code, _, err = run(capsys, "-m", cluster.url, "experiment", "list")
    assert code == 1
    assert "Error: user 'determined' needs a password" in err and "Traceback" not in err


def test_cli_missing_cert_file(cluster: Cluster, capsys: Any, tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "-m", cluster.url, "--cert-file", str(tmp_path / "no.pem"), "experiment", "list"
    )
    assert code == 1
    assert "CA bundle" in err and "does not exist" in err
