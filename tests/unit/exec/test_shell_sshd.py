"""A shell's sshd (issue 34): its config, the sessions' environment, and a real sshd
started by :func:`start_sshd` that lets in the shell's key only."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from dauntless.exec.shell_sshd import session_env, sshd_config, start_sshd
from dauntless.master.shell_ssh import NotOwner, new_key_pair, owner_key, public_key
from dauntless.master.task_states import NotFound


def test_session_env_keeps_the_task_env_without_secrets_of_the_service() -> None:
    env = {
        "DET_MASTER": "http://m:8080",
        "DAUNTLESS_SERVICE_TOKEN": "s3cret",
        "DAUNTLESS_SERVICE_TOKEN_FILE": "/x",
        "HOME": "/root",
        "TERM": "xterm",
        "LC_ALL": "C",
        "QUOTED": 'a"b',
        "MULTI": "a\nb",
        "bad-name": "x",
        "PATH": "/usr/bin:/bin",
    }
    assert session_env(env) == {"DET_MASTER": "http://m:8080", "PATH": "/usr/bin:/bin"}


def test_sshd_config_listens_on_loopback_with_keys_only(tmp_path: Path) -> None:
    text = sshd_config(str(tmp_path), 2222, {"A": "b c", "B": "d"})
    lines = text.splitlines()
    assert "ListenAddress 127.0.0.1" in lines and "Port 2222" in lines
    assert "PasswordAuthentication no" in lines and "KbdInteractiveAuthentication no" in lines
    assert f"AuthorizedKeysFile {tmp_path}/authorized_keys" in lines
    assert 'SetEnv "A=b c" "B=d"' in lines


def test_key_pair_is_openssh_and_given_to_the_owner_only() -> None:
    pair = new_key_pair()
    assert pair["private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert pair["public_key"].startswith("ssh-ed25519 ")
    assert new_key_pair()["public_key"] != pair["public_key"]
    row = SimpleNamespace(id="abc", type="SHELL", owner="bob", meta={"ssh": pair})
    assert public_key(row.meta) == pair["public_key"]
    bob = SimpleNamespace(kind="user", username="bob")
    assert owner_key(row, bob)["private_key"] == pair["private_key"]  # type: ignore[arg-type]
    for who in (
        SimpleNamespace(kind="user", username="alice"),
        SimpleNamespace(kind="user", username="admin", admin=True),
        SimpleNamespace(kind="trial", username=None),
    ):
        with pytest.raises(NotOwner, match="only the owner of shell abc"):
            owner_key(row, who)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        owner_key(SimpleNamespace(id="c", type="COMMAND", owner="bob", meta={}), bob)  # type: ignore[arg-type]
    assert public_key({}) is None
    assert new_key_pair("RSA", 1024)["public_key"].startswith("ssh-rsa ")
    assert new_key_pair("ECDSA")["public_key"].startswith("ecdsa-sha2-nistp256 ")
    with pytest.raises(ValueError, match="key_type"):
        new_key_pair("DSA")


def test_ssh_config_is_checked() -> None:
    from pydantic import ValidationError

    from dauntless.config import SecurityConfig

    assert SecurityConfig().ssh.key_type == "ED25519"
    cfg = SecurityConfig.model_validate({"ssh": {"key_type": "RSA", "rsa_key_size": 3072}})
    assert cfg.ssh.rsa_key_size == 3072
    for bad, text in (
        ({"key_type": "DSA"}, "key_type"),
        ({"key_type": "RSA", "rsa_key_size": 512}, "rsa_key_size"),
        ({"rsa_key_size": 2048}, "RSA only"),
    ):
        with pytest.raises(ValidationError, match=text):
            SecurityConfig.model_validate({"ssh": bad})


@pytest.mark.skipif(
    not (shutil.which("ssh") and os.access("/usr/sbin/sshd", os.X_OK)),
    reason="OpenSSH's client and server are not installed",
)
def test_start_sshd_lets_in_the_shells_key_only(tmp_path: Path) -> None:
    pair = new_key_pair()
    sshd = start_sshd(pair["public_key"], {"GREETING": "hi there", "NAME": "shell"})
    assert sshd.error is None, sshd.error
    try:
        assert sshd.directory is not None
        assert stat.S_IMODE(os.stat(sshd.directory).st_mode) == 0o700
        key = tmp_path / "key"
        key.write_text(pair["private_key"])
        key.chmod(0o600)
        other = tmp_path / "other"
        other.write_text(new_key_pair()["private_key"])
        other.chmod(0o600)
        known = tmp_path / "known_hosts"
        known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_key}\n")

        def ssh(identity: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
                + ["-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes"]
                + ["-i", str(identity), "-p", str(sshd.port), f"{sshd.user}@127.0.0.1"]
                + ['echo "$GREETING $NAME"'],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )

        ok = ssh(key)
        assert ok.returncode == 0 and ok.stdout.strip() == "hi there shell", ok.stderr
        refused = ssh(other)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
    finally:
        sshd.stop()
    assert sshd.proc is not None and sshd.proc.poll() is not None
    assert not os.path.exists(sshd.directory)


def test_no_key_means_no_sshd() -> None:
    sshd = start_sshd(None, {})
    assert sshd.proc is None and sshd.error is not None and "no SSH key" in sshd.error


def test_ssh_options_go_before_the_destination_and_a_command_after() -> None:
    from dauntless.cli.shell_ssh import split_ssh_args

    assert split_ssh_args([]) == ([], [])
    assert split_ssh_args(["-L", "8080:localhost:80", "-N"]) == (
        ["-L", "8080:localhost:80", "-N"],
        [],
    )
    assert split_ssh_args(["-o", "BatchMode=yes", "exit 3"]) == (
        ["-o", "BatchMode=yes"],
        ["exit 3"],
    )
    assert split_ssh_args(["-v", "ls", "-l"]) == (["-v"], ["ls", "-l"])
    assert split_ssh_args(["-A", "--", "-weird"]) == (["-A"], ["-weird"])
