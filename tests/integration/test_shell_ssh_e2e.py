"""SSH shells (issue 34 scope 6): the real OpenSSH client reaches a ``det shell``'s sshd
through the command ``det shell show_ssh_command`` prints (a ProxyCommand over the
master's HTTP), runs a command, copies files both ways with ``scp``, forwards a port
with ``-L``; another user can neither have the shell's key nor pass the proxy with it.

One cluster and one shell are shared by the module's tests (they only read from the
shell, each in files of its own)."""

from __future__ import annotations

import http.server
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from .conftest import REPO, Cluster, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (shutil.which("ssh") and shutil.which("scp") and os.access("/usr/sbin/sshd", os.X_OK)),
        reason="OpenSSH's client and server (openssh-client, openssh-server) are not installed",
    ),
]


def _det(c: Cluster, env: dict[str, str], *args: str, check: bool = True):
    proc = subprocess.run(
        [sys.executable, "-m", "dauntless.cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=c.deadline(180),
    )
    if check:
        assert proc.returncode == 0, f"det {args}: {proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def shell(module_cluster_factory, tmp_path_factory):
    """``(cluster, env, shell id, ssh argv)``: a running shell and the ssh command
    ``det shell show_ssh_command`` printed for its owner (``determined``)."""
    tmp = tmp_path_factory.mktemp("ssh")
    c = module_cluster_factory(f"sqlite:///{tmp}/master.db")
    c.start_master()
    c.start_agent(slots=1)
    env = c.env()
    env["XDG_CACHE_HOME"] = str(tmp / "cache")  # where the CLI keeps the key
    shell_id = _det(c, env, "shell", "start", "-d", "--config", "resources.slots=0").stdout
    shell_id = shell_id.strip().splitlines()[-1]
    shown = _det(c, env, "shell", "show_ssh_command", shell_id).stdout.strip().splitlines()[-1]
    argv = shlex.split(shown)
    yield c, env, shell_id, argv
    _det(c, env, "shell", "kill", shell_id)


def _ssh(c: Cluster, argv: list[str], *more: str, check: bool = True):
    proc = subprocess.run(
        [argv[0], "-o", "BatchMode=yes", *argv[1:], *more],
        capture_output=True,
        text=True,
        timeout=c.deadline(120),
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert proc.returncode == 0, f"{proc.args}: {proc.stdout}\n{proc.stderr}"
    return proc


def test_show_ssh_command_runs_a_command(shell) -> None:
    c, env, shell_id, argv = shell
    assert argv[0] == "ssh" and argv[-1].endswith(f"@{shell_id}")
    key = Path(argv[argv.index("-i") + 1])
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert "PRIVATE KEY" not in " ".join(argv)  # the key is a file, never an argument
    assert "StrictHostKeyChecking=yes" in argv  # the host key came through the master
    r = httpx.get(f"{c.url}/api/v1/tasks/{shell_id}", headers=c.headers(), timeout=30)
    assert r.status_code == 200 and "PRIVATE KEY" not in r.text  # never in the task's view
    out = _ssh(c, argv, 'echo "hello $(id -un) $DET_TASK_ID $DAUNTLESS_SERVICE_TOKEN."').stdout
    user = argv[-1].split("@")[0]
    assert out.strip() == f"hello {user} {shell_id} ."  # the task's env, not its service token
    proc = _ssh(c, argv, "exit 7", check=False)
    assert proc.returncode == 7
    # A shell id of digits only is an IPv4 address to ssh (41907000 is 2.127.115.56):
    # the host key is still found, under the id (HostKeyAlias). The proxy command names
    # the shell, so the destination here is only what ssh checks the key against.
    numeric = [*argv[:-1], f"{user}@41907000"]
    assert _ssh(c, numeric, "echo numeric").stdout.strip() == "numeric"
    # det shell open --ssh: the same through a key in a temporary directory
    proc = _det(
        c,
        env,
        "shell",
        "open",
        shell_id,
        "--ssh",
        "--",
        "-o",
        "BatchMode=yes",
        "exit 3",
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"det shell open {shell_id} --ssh" in proc.stderr


def test_scp_copies_a_file_both_ways(shell, tmp_path) -> None:
    c, _env, shell_id, argv = shell
    scp = ["scp", "-o", "BatchMode=yes", *argv[1:-1]]
    target = argv[-1]
    local = tmp_path / "up.bin"
    local.write_bytes(os.urandom(300_000))
    remote = f"/tmp/dauntless-ssh-test-{shell_id}-{os.getpid()}.bin"
    try:
        up = subprocess.run(
            [*scp, str(local), f"{target}:{remote}"], capture_output=True, timeout=c.deadline(120)
        )
        assert up.returncode == 0, up.stderr
        size = _ssh(c, argv, f"wc -c < {remote}").stdout.strip()
        assert size == "300000"
        _ssh(c, argv, f"printf 'from the shell\\n' >> {remote}")
        back = tmp_path / "down.bin"
        down = subprocess.run(
            [*scp, f"{target}:{remote}", str(back)], capture_output=True, timeout=c.deadline(120)
        )
        assert down.returncode == 0, down.stderr
        assert back.read_bytes() == local.read_bytes() + b"from the shell\n"
    finally:
        _ssh(c, argv, f"rm -f {remote}", check=False)


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"through the tunnel"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


def test_local_port_forwarding(shell) -> None:
    """``ssh -L``: a port on this side reaches a server on the shell's side (the agent
    is this machine, so the server is the test's, reached only through sshd)."""
    c, _env, _shell_id, argv = shell
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    local = free_port()
    forward = f"{local}:127.0.0.1:{server.server_address[1]}"
    tunnel = subprocess.Popen(
        [
            argv[0],
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-N",
            "-L",
            forward,
            *argv[1:],
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + c.deadline(60)
        answer = None
        while time.time() < deadline and tunnel.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{local}/", timeout=10, trust_env=False)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert answer is not None, f"the tunnel never answered: {tunnel.poll()}"
        assert answer.status_code == 200 and answer.text == "through the tunnel"
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=30)
        server.shutdown()


def test_a_second_user_cannot_use_the_shell_nor_its_key(shell, tmp_path) -> None:
    c, env, shell_id, argv = shell
    c.det("-u", "admin", "user", "create", "alice", "--password", "pw-alice")
    alice = dict(env)
    alice.update(
        DET_USER="alice",
        DET_PASS="pw-alice",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = _det(c, alice, "shell", "show_ssh_command", shell_id, check=False)
    assert proc.returncode != 0 and "only the owner" in proc.stderr, proc.stderr
    assert not (tmp_path / "cache").exists()
    # The key route is the owner's only: alice and the admin get 403.
    for user, password in (("alice", "pw-alice"), ("admin", "")):
        token = httpx.post(
            f"{c.url}/api/v1/auth/login",
            json={"username": user, "password": password},
            timeout=30,
        ).json()["token"]
        r = httpx.get(
            f"{c.url}/api/v1/shells/{shell_id}/ssh_key",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert r.status_code == 403, (user, r.text)
    # With the owner's key (leaked) and her own sign-in, the proxy refuses her.
    i = argv.index("-o") + 1
    assert argv[i].startswith("ProxyCommand=")
    stolen = list(argv)
    stolen[i] = re.sub(r" -u \S+ ", " -u alice ", argv[i])
    assert " -u alice " in stolen[i]
    proc = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", *stolen[1:], "echo", "in"],
        capture_output=True,
        text=True,
        env=alice,
        timeout=c.deadline(120),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 255 and "in" not in proc.stdout.split()
    assert "HTTP 403" in proc.stderr, proc.stderr
    # Nor may she relay to the shell's sshd herself.
    proc = _det(c, alice, "shell", "proxy", shell_id, check=False)
    assert proc.returncode == 255 and "403" in proc.stderr


def test_sshd_ends_with_the_shell(shell) -> None:
    """Killing a shell stops its sshd (last in the module: it kills the module's shell)."""
    c, env, shell_id, argv = shell
    assert _ssh(c, argv, "echo up").stdout.strip() == "up"
    logs = _det(c, env, "task", "logs", shell_id).stdout
    port = int(re.search(r"sshd listens on 127\.0\.0\.1:(\d+)", logs).group(1))  # type: ignore[union-attr]
    _det(c, env, "shell", "kill", shell_id)
    c.wait_task(shell_id, {"CANCELED", "COMPLETED", "ERROR"})
    deadline = time.time() + c.deadline(30)
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.3)
    else:
        pytest.fail(f"the shell's sshd still listens on {port} after the shell ended")
    proc = _ssh(c, argv, "echo up", check=False)
    assert proc.returncode == 255 and "410" in proc.stderr, proc.stderr  # ended: the proxy says so
