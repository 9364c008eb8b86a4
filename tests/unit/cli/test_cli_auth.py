"""Signing in: the token store, which credentials are used, re-login on 401, `det user`."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from dauntless.cli import main
from dauntless.client import AuthenticationError, Session, TokenStore, default_store_path

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


def bearer(fm: Any, path: str) -> list[str]:
    """The Authorization headers sent to ``path`` (``""`` for none), in order."""
    return [r.headers.get("authorization", "") for r in fm.requests if r.path == path]


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


def _session(fm: Any, **kw: Any) -> Session:
    return Session(fm.url, retries=0, **kw)


def test_new_cluster_signs_in_as_determined_and_saves_the_token(fake_master: Any) -> None:
    fake_master.require_auth = True
    with _session(fake_master) as s:
        assert s.list_agents() == []
        token = s.token
    # First try without credentials, then sign in with the empty password, then again.
    assert bearer(fake_master, "/api/v1/agents") == ["", f"Bearer {token}"]
    store = TokenStore()
    assert store.active_user(fake_master.url) == "determined"
    assert store.get_token(fake_master.url, "determined") == token
    # The next session uses the saved token directly: no sign-in.
    fake_master.requests.clear()
    with _session(fake_master) as s:
        s.list_agents()
    assert [r.path for r in fake_master.requests] == ["/api/v1/agents"]
    assert bearer(fake_master, "/api/v1/agents") == [f"Bearer {token}"]


def test_env_token_wins_and_is_not_saved(fake_master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_master.require_auth = True
    env_token = fake_master.issue_token("admin")
    TokenStore().set_token(fake_master.url, "determined", fake_master.issue_token("determined"))
    monkeypatch.setenv("DET_USER_TOKEN", env_token)
    with _session(fake_master) as s:
        assert s.whoami()["username"] == "admin"
    assert bearer(fake_master, "/api/v1/me") == [f"Bearer {env_token}"]
    assert TokenStore().get_token(fake_master.url, "admin") is None


def test_refused_env_token_is_an_error_not_a_silent_login(
    fake_master: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_master.require_auth = True
    monkeypatch.setenv("DET_USER_TOKEN", "bogus")
    with _session(fake_master) as s, pytest.raises(AuthenticationError, match="DET_USER_TOKEN"):
        s.list_agents()


def test_saved_token_of_the_named_user(fake_master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_master.require_auth = True
    store = TokenStore()
    t_det = fake_master.issue_token("determined")
    t_admin = fake_master.issue_token("admin")
    store.set_token(fake_master.url, "admin", t_admin, activate=False)
    store.set_token(fake_master.url, "determined", t_det)
    with _session(fake_master) as s:  # the active user
        assert s.whoami()["username"] == "determined"
    with _session(fake_master, user="admin") as s:  # -u
        assert s.whoami()["username"] == "admin"
    monkeypatch.setenv("DET_USER", "admin")
    with _session(fake_master) as s:  # DET_USER
        assert s.whoami()["username"] == "admin"


def test_det_user_and_det_pass_sign_in(fake_master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_master.require_auth = True
    fake_master.add_user("alice", password="s3cret")
    monkeypatch.setenv("DET_USER", "alice")
    monkeypatch.setenv("DET_PASS", "s3cret")
    with _session(fake_master) as s:
        assert s.whoami()["username"] == "alice"
    logins = [json.loads(r.body) for r in fake_master.requests if r.path == "/api/v1/auth/login"]
    assert logins == [{"username": "alice", "password": "s3cret"}]
    monkeypatch.setenv("DET_PASS", "wrong")
    TokenStore().drop_master(fake_master.url)
    with _session(fake_master) as s, pytest.raises(AuthenticationError, match="alice"):
        s.whoami()


def test_password_set_without_terminal_says_to_log_in(fake_master: Any) -> None:
    fake_master.require_auth = True
    fake_master.users[2]["password"] = "changed"  # determined
    with _session(fake_master) as s:
        with pytest.raises(AuthenticationError, match="det user login determined"):
            s.list_agents()


def test_password_set_asks_with_the_prompt(fake_master: Any) -> None:
    fake_master.require_auth = True
    fake_master.users[2]["password"] = "changed"
    asked: list[str] = []

    def prompt(msg: str) -> str:
        asked.append(msg)
        return "changed"

    with _session(fake_master, prompt=prompt) as s:
        assert s.list_agents() == []
    assert asked == ["Password for user 'determined': "]


def test_revoked_saved_token_is_dropped_and_signed_in_again_once(fake_master: Any) -> None:
    fake_master.require_auth = True
    store = TokenStore()
    store.set_token(fake_master.url, "determined", "revoked-token")
    with _session(fake_master) as s:
        assert s.list_agents() == []
        new = s.token
    assert new != "revoked-token"
    assert bearer(fake_master, "/api/v1/agents") == ["Bearer revoked-token", f"Bearer {new}"]
    assert store.get_token(fake_master.url, "determined") == new


def test_a_second_401_is_not_retried_forever(fake_master: Any) -> None:
    fake_master.require_auth = True
    fake_master.forced[("GET", "/api/v1/agents")] = (401, {"detail": "token expired"})
    with _session(fake_master) as s, pytest.raises(AuthenticationError):
        s.list_agents()
    assert len(bearer(fake_master, "/api/v1/agents")) == 2


def test_login_false_raises_instead_of_signing_in(fake_master: Any) -> None:
    fake_master.require_auth = True
    with _session(fake_master, login=False) as s, pytest.raises(AuthenticationError):
        s.list_agents()
    assert bearer(fake_master, "/api/v1/auth/login") == []


# -- det user ---------------------------------------------------------------------------


def test_cli_login_whoami_logout(fake_master: Any, capsys: Any, monkeypatch: Any) -> None:
    fake_master.require_auth = True
    fake_master.add_user("alice", password="pw")
    code, out, err = run(
        capsys,
        "-m",
        fake_master.url,
        "user",
        "login",
        "alice",
        stdin="pw\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert "Signed in as user 'alice'" in out
    assert TokenStore().active_user(fake_master.url) == "alice"
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "whoami")
    assert code == 0 and "'alice'" in out
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "whoami", "--json")
    assert json.loads(out)["user"]["username"] == "alice"
    token = TokenStore().get_token(fake_master.url, "alice")
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "logout")
    assert code == 0 and "alice" in out
    assert token not in fake_master.tokens
    assert TokenStore().users(fake_master.url) == {}


def test_cli_login_wrong_password(fake_master: Any, capsys: Any, monkeypatch: Any) -> None:
    fake_master.add_user("alice", password="pw")
    code, out, err = run(
        capsys,
        "-m",
        fake_master.url,
        "user",
        "login",
        "alice",
        stdin="nope\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1
    assert "invalid username or password" in err and "Traceback" not in err
    assert TokenStore().users(fake_master.url) == {}


def test_cli_logout_all(fake_master: Any, capsys: Any) -> None:
    store = TokenStore()
    t1, t2 = fake_master.issue_token("admin"), fake_master.issue_token("determined")
    store.set_token(fake_master.url, "admin", t1)
    store.set_token(fake_master.url, "determined", t2)
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "logout", "--all")
    assert code == 0 and "2 user(s)" in out
    assert fake_master.tokens == {}
    assert store.users(fake_master.url) == {}


def test_cli_global_user_flag(fake_master: Any, capsys: Any) -> None:
    fake_master.require_auth = True
    TokenStore().set_token(
        fake_master.url, "admin", fake_master.issue_token("admin"), activate=False
    )
    code, out, _ = run(capsys, "-m", fake_master.url, "-u", "admin", "user", "whoami")
    assert code == 0 and "'admin' (administrator)" in out
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "whoami", "-u", "admin")
    assert code == 0 and "'admin'" in out
    # Without -u: the default user signs in with the empty password.
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "whoami")
    assert code == 0 and "'determined'" in out


def test_cli_list(fake_master: Any, capsys: Any) -> None:
    fake_master.require_auth = True
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "ls")
    assert code == 0
    lines = out.splitlines()
    assert "Username" in lines[0]
    assert any("admin" in ln and "yes" in ln for ln in lines[1:])
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "list", "--json")
    assert sorted(u["username"] for u in json.loads(out)["users"]) == ["admin", "determined"]


def test_cli_create_needs_admin(fake_master: Any, capsys: Any) -> None:
    fake_master.require_auth = True
    code, out, err = run(capsys, "-m", fake_master.url, "user", "create", "bob")
    assert code == 1
    assert "Error: only administrators may create users" in err and "Traceback" not in err
    code, out, err = run(
        capsys,
        "-m",
        fake_master.url,
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
    bob = next(u for u in fake_master.users.values() if u["username"] == "bob")
    assert bob["admin"] and bob["password"] == "pw"


def test_cli_change_own_password_keeps_you_signed_in(
    fake_master: Any, capsys: Any, monkeypatch: Any
) -> None:
    fake_master.require_auth = True
    code, _, err = run(
        capsys,
        "-m",
        fake_master.url,
        "user",
        "change-password",
        stdin="n3w\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert fake_master.users[2]["password"] == "n3w"
    # The old token was revoked; the CLI signed in again with the new password.
    token = TokenStore().get_token(fake_master.url, "determined")
    assert fake_master.tokens.get(token) == 2
    code, out, _ = run(capsys, "-m", fake_master.url, "user", "whoami")
    assert code == 0 and "'determined'" in out


def test_cli_change_other_password_as_admin(
    fake_master: Any, capsys: Any, monkeypatch: Any
) -> None:
    fake_master.require_auth = True
    code, _, err = run(
        capsys,
        "-m",
        fake_master.url,
        "-u",
        "admin",
        "user",
        "change-password",
        "determined",
        stdin="x\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert fake_master.users[2]["password"] == "x"
    code, _, err = run(
        capsys,
        "-m",
        fake_master.url,
        "user",
        "change-password",
        "admin",
        stdin="x\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1  # determined needs its new password; stdin ended: no terminal
    assert "det user login determined" in err and "Traceback" not in err


def test_cli_activate_deactivate(fake_master: Any, capsys: Any, monkeypatch: Any) -> None:
    fake_master.require_auth = True
    fake_master.add_user("carol", password="pw")
    code, out, err = run(
        capsys, "-m", fake_master.url, "-u", "admin", "user", "deactivate", "carol"
    )
    assert code == 0, err
    assert "Deactivated user 'carol'" in out
    assert fake_master.users[3]["active"] is False
    code, _, err = run(
        capsys,
        "-m",
        fake_master.url,
        "user",
        "login",
        "carol",
        stdin="pw\n",
        monkeypatch=monkeypatch,
    )
    assert code == 1 and "deactivated" in err
    code, out, _ = run(capsys, "-m", fake_master.url, "-u", "admin", "user", "activate", "carol")
    assert code == 0 and fake_master.users[3]["active"] is True
    code, _, err = run(capsys, "-m", fake_master.url, "-u", "admin", "user", "activate", "nobody")
    assert code == 1 and "user 'nobody' not found" in err
    code, _, err = run(capsys, "-m", fake_master.url, "user", "deactivate", "admin")
    assert code == 1 and "only administrators" in err


def test_cli_unauthenticated_error_is_clear(fake_master: Any, capsys: Any) -> None:
    fake_master.require_auth = True
    fake_master.users[2]["password"] = "set"
    code, _, err = run(capsys, "-m", fake_master.url, "experiment", "list")
    assert code == 1
    assert "Error: user 'determined' needs a password" in err and "Traceback" not in err


def test_cli_missing_cert_file(fake_master: Any, capsys: Any, tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "-m", fake_master.url, "--cert-file", str(tmp_path / "no.pem"), "experiment", "list"
    )
    assert code == 1
    assert "CA bundle" in err and "does not exist" in err
