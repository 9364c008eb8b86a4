"""`det token` and `det audit` against the real master (issue 30 scopes 3 and 5).

The audit scenario of the issue: 20 actions as 3 users through the CLI, one audit row
deleted directly in the database, and `det audit verify` names the break.
"""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from dauntless.cli import main
from dauntless.master.testing import Cluster, bearer

pytestmark = pytest.mark.usefixtures("no_backoff")

CONFIG = """
name: audited
entrypoint: model_def:T
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: {batches: 50}}
"""


def run(capsys, monkeypatch, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin or ""))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, monkeypatch, *argv: str, stdin: str | None = None) -> str:
    code, out, err = run(capsys, monkeypatch, *argv, stdin=stdin)
    assert code == 0, (argv, out, err)
    return out


def test_det_token_commands(cluster: Cluster, capsys, monkeypatch) -> None:
    m = ("-m", cluster.url)
    ok(capsys, monkeypatch, *m, "-u", "admin", "user", "create", "alice", "--password", "pw")
    ok(capsys, monkeypatch, *m, "user", "login", "alice", stdin="pw\n")
    out = ok(capsys, monkeypatch, *m, "token", "create", "-e", "2", "-d", "nightly CI", "--json")
    made = json.loads(out)
    token, token_id = made["token"], made["token_id"]
    assert cluster.admin.get("/api/v1/me", headers=bearer(token)).json()["user"]["username"] == (
        "alice"
    )
    out = ok(capsys, monkeypatch, *m, "tkn", "ls")
    assert "nightly CI" in out and "ACCESS_TOKEN" in out and "alice" in out
    out = ok(capsys, monkeypatch, *m, "token", "list", "--sessions")
    assert "USER_SESSION" in out and "nightly CI" not in out
    ok(capsys, monkeypatch, *m, "token", "edit", str(token_id), "-d", "weekly CI")
    described = json.loads(
        ok(capsys, monkeypatch, *m, "token", "describe", str(token_id), "--json")
    )
    (info,) = described["token_info"]
    assert info["description"] == "weekly CI" and info["revoked"] is False
    code, _, err = run(capsys, monkeypatch, *m, "token", "describe", str(token_id), "999")
    assert code == 1 and "no token with id 999" in err
    # An admin makes one for alice; alice may not make one for the admin.
    out = ok(capsys, monkeypatch, *m, "-u", "admin", "token", "create", "alice", "-e", "-1")
    assert "It is shown only now" in out
    code, _, err = run(capsys, monkeypatch, *m, "token", "create", "admin")
    assert code == 1 and "only an admin may create access tokens for another user" in err

    # DET_USER_TOKEN, then `det token login` from stdin (never the command line).
    monkeypatch.setenv("DET_USER_TOKEN", token)
    assert "alice" in ok(capsys, monkeypatch, *m, "user", "whoami")
    monkeypatch.delenv("DET_USER_TOKEN")
    out = ok(capsys, monkeypatch, *m, "token", "login", stdin=token + "\n")
    assert "as user 'alice'" in out
    out = ok(capsys, monkeypatch, *m, "token", "revoke", str(token_id))
    assert f"Revoked token {token_id} of user 'alice'" in out
    assert cluster.admin.get("/api/v1/me", headers=bearer(token)).status_code == 401
    out = ok(capsys, monkeypatch, *m, "-u", "admin", "token", "list", "alice", "--show-inactive")
    assert "weekly CI" in out and "yes" in out
    code, _, err = run(capsys, monkeypatch, *m, "token", "create", "-e", "0")
    assert code == 1 and "--expiration-days" in err


def test_twenty_actions_by_three_users_then_a_deleted_row_is_named(
    cluster: Cluster, capsys, monkeypatch, tmp_path: Path
) -> None:
    m = ("-m", cluster.url)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "model_def.py").write_text("class T: pass\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    actions = [
        ("admin", ("user", "create", "alice", "--password", "a")),
        ("admin", ("user", "create", "bob", "--password", "b")),
        ("admin", ("token", "create", "-d", "admin CI")),
        ("alice", ("e", "create", str(cfg), str(ctx))),
        ("alice", ("e", "pause", "1")),
        ("alice", ("e", "activate", "1")),
        ("alice", ("e", "label", "add", "1", "nightly")),
        ("alice", ("token", "create", "-d", "alice CI")),
        ("bob", ("e", "pause", "1")),  # refused: alice's experiment (audited as denied)
        ("bob", ("e", "create", str(cfg), str(ctx))),
        ("bob", ("e", "kill", "2")),
        ("bob", ("token", "create", "-d", "bob CI")),
        ("alice", ("e", "kill", "1")),
        ("admin", ("user", "deactivate", "bob")),
        ("admin", ("user", "activate", "bob")),
        ("admin", ("e", "archive", "2")),
        ("alice", ("e", "label", "remove", "1", "nightly")),
        ("admin", ("agent", "disable", "nope")),  # 404: audited as refused
        ("alice", ("e", "archive", "1")),
        ("admin", ("e", "unarchive", "2")),
    ]
    assert len(actions) == 20
    passwords = {"admin": "", "alice": "a", "bob": "b"}
    for who, argv in actions:
        monkeypatch.setenv("DET_PASS", passwords[who])
        run(capsys, monkeypatch, *m, "-u", who, *argv)
    monkeypatch.delenv("DET_PASS")

    listed = json.loads(
        ok(capsys, monkeypatch, *m, "-u", "admin", "audit", "list", "--limit", "500", "--json")
    )
    entries = listed["entries"]
    assert {e["username"] for e in entries} >= {"admin", "alice", "bob"}
    changes = [e for e in entries if e["route"] != "/api/v1/auth/login"]
    assert len(changes) >= 20
    assert any(e["username"] == "bob" and e["result"] == "denied" for e in changes)
    out = ok(capsys, monkeypatch, *m, "-u", "admin", "audit", "list", "--username", "bob")
    assert "bob" in out and "alice" not in out.replace("alice CI", "")
    out = ok(capsys, monkeypatch, *m, "-u", "admin", "audit", "verify")
    assert "The audit trail is intact" in out

    victim = sorted(e["id"] for e in changes)[len(changes) // 2]
    db = sqlite3.connect(cluster.app.state.ctx.db.engine.url.database)
    with db:
        assert db.execute("DELETE FROM audit_log WHERE id = ?", (victim,)).rowcount == 1
    db.close()
    code, out, err = run(capsys, monkeypatch, *m, "-u", "admin", "audit", "verify")
    assert code == 1
    assert f"BREAK at row {victim}: row {victim} is missing (deleted)" in out
    assert "the audit trail is broken: 1 break(s)" in err
    monkeypatch.setenv("DET_PASS", "a")
    code, _, err = run(capsys, monkeypatch, *m, "-u", "alice", "audit", "verify")
    assert code == 1 and "only an admin may verify the audit trail" in err
