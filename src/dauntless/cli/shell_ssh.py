"""SSH into a shell through the master (issue 34 scope 6; Determined's
``det shell show_ssh_command`` and its IDE guides).

A shell runs OpenSSH's ``sshd`` on 127.0.0.1 of its agent
(:mod:`dauntless.exec.shell_sshd`); nothing listens on the agent's network. The
``ssh`` client reaches it through a ``ProxyCommand``, ``det shell proxy ID``
(:func:`relay`), which carries the SSH connection's bytes over a WebSocket to the
master's proxy (``/proxy/<id>/ssh``, over the master's HTTP(S), signed in as the user
who asked: the proxy's owner check applies), which forwards them to the shell's
``sshd``.

What the client needs is kept in the user's cache directory,
``<user cache dir>/dauntless/shell/<id>/`` (``$XDG_CACHE_HOME`` or ``~/.cache``;
directory mode 0700, files 0600): ``key``, the shell's private key, which only the
shell's owner can get from the master (``GET /api/v1/shells/{id}/ssh_key``), and
``known_hosts``, the shell's host key as its ``sshd`` reports it through the master's
proxy, so that ``ssh`` checks the host key strictly instead of trusting the first one
it sees. No secret is ever on a command line: the printed command names the key's file.

The SSH command::

    ssh -o 'ProxyCommand=<python> -m dauntless.cli -m <master> -u <user> shell proxy <id>'
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile=<dir>/known_hosts
        -o HostKeyAlias=<id> -o IdentitiesOnly=yes -i <dir>/key <login>@<id>

``<login>`` is the task's Unix user (the ``sshd`` runs as it). ``scp`` and ``sftp``
take the same ``-o`` and ``-i`` options; ``ssh -L`` forwards ports.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import platformdirs

from dauntless._tls import make_verify
from dauntless.client import Session

from ._tasks import wait_ready
from ._util import exit_with_error, note, open_session, write_line


def key_dir(task_id: str) -> Path:
    """Where a shell's key and known host are kept (see the module)."""
    return Path(platformdirs.user_cache_dir("dauntless")) / "shell" / task_id


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the start (replacing a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _ssh_info(session: Session, task_id: str) -> dict[str, Any]:
    """``GET /proxy/<id>/ssh_info`` of the shell's service: ``{"user", "host_key"}``.

    Raises:
        SystemExit: the shell has no SSH server (the reason the shell gave) or the
            master refused.
    """
    url = f"{session.master_url.rstrip('/')}/proxy/{task_id}/ssh_info"
    try:
        r = httpx.get(
            url,
            headers={"Authorization": f"Bearer {session.token}"},
            verify=make_verify(session.cert_file),
            timeout=30,
            trust_env=False,
        )
    except httpx.HTTPError as exc:
        exit_with_error(f"cannot reach shell {task_id} through the master: {exc}")
    try:
        body = r.json()
    except ValueError:
        body = {}
    if r.status_code != 200 or not isinstance(body, dict) or "user" not in body:
        detail = body.get("detail") if isinstance(body, dict) else None
        exit_with_error(
            f"shell {task_id} cannot be reached by SSH (HTTP {r.status_code})"
            + (f": {detail}" if detail else "")
        )
    return body


def prepare(session: Session, task_id: str, directory: Path) -> list[str]:
    """Fetch the shell's key and host key into ``directory`` and return the ``ssh``
    argv (without a command) that reaches the shell.

    Args:
        session: signed in as the shell's owner.
        task_id: the shell's id.
        directory: where ``key`` and ``known_hosts`` go (made with mode 0700).

    Raises:
        SystemExit: the caller is not the owner (403), the task is no shell with a key,
            or the shell has no SSH server.
    """
    pair = session.get_json(f"/shells/{task_id}/ssh_key")
    info = _ssh_info(session, task_id)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    key = directory / "key"
    _write_private(key, pair["private_key"])
    known = directory / "known_hosts"
    _write_private(known, f"{task_id} {info['host_key']}\n")
    me = session.whoami()["username"]
    proxy = [sys.executable, "-m", "dauntless.cli", "-m", session.master_url, "-u", me]
    if session.cert_file:
        proxy += ["--cert-file", session.cert_file]
    proxy += ["shell", "proxy", task_id]
    return [
        "ssh",
        "-o",
        f"ProxyCommand={shlex.join(proxy)}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known}",
        # The host key is looked up under the id whatever ssh makes of the destination:
        # an id of digits only (about 2% of them) is otherwise read as an IPv4 address
        # (41907000 -> 2.127.115.56) and its known_hosts line is not found.
        "-o",
        f"HostKeyAlias={task_id}",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        str(key),
        f"{info['user']}@{task_id}",
    ]


_SSH_VALUE_FLAGS = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
"""ssh's one-letter options that take a value (OpenSSH's ssh(1) synopsis)."""


def split_ssh_args(extra: list[str]) -> tuple[list[str], list[str]]:
    """``extra`` as ``(options, command)``: ssh options must come before the
    destination, a command after it. Options are the leading ``-x`` words (with the
    next word as the value of an option that takes one, e.g. ``-L 8080:localhost:80``);
    the rest, from the first other word or after ``--``, is the command. Hand-written:
    ssh's own parser cannot be asked, and only its synopsis's value-taking letters
    matter here."""
    options: list[str] = []
    i = 0
    while i < len(extra):
        word = extra[i]
        if word == "--":
            return options, extra[i + 1 :]
        if not word.startswith("-") or word == "-":
            break
        options.append(word)
        if len(word) == 2 and word[1] in _SSH_VALUE_FLAGS and i + 1 < len(extra):
            options.append(extra[i + 1])
            i += 1
        i += 1
    return options, extra[i:]


def run_ssh(session: Session, task_id: str, extra: list[str], show: bool) -> int:
    """Open ``ssh`` to the shell (``extra``: ssh options, then a command;
    :func:`split_ssh_args`) and
    return its exit code; with ``show``, print the command instead and keep the key
    in :func:`key_dir` (else the key is in a temporary directory removed after)."""
    options, command = split_ssh_args(extra)
    if show:
        argv = prepare(session, task_id, key_dir(task_id))
        write_line(shlex.join(argv[:-1] + options + argv[-1:] + command))
        return 0
    if shutil.which("ssh") is None:
        exit_with_error("the OpenSSH client (ssh) is not installed here")
    directory = Path(tempfile.mkdtemp(prefix="dauntless-ssh-"))
    try:
        argv = prepare(session, task_id, directory)
        code = subprocess.call(argv[:-1] + options + argv[-1:] + command)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    note(f"To reconnect: det shell open {task_id} --ssh")
    return code


def relay(session: Session, task_id: str) -> int:
    """``det shell proxy ID``: carry stdin to the shell's ``sshd`` and its answers to
    stdout, over a WebSocket to the master (an SSH ``ProxyCommand``). Returns 0 when
    either side closed, 255 (ssh's own code for a failed connection) when the master
    refused, with the reason on stderr."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    from ._socket import connect_task_socket

    try:
        ws = connect_task_socket(session, task_id, "ssh", compression=None)
    except InvalidStatus as exc:
        body = (exc.response.body or b"").decode("utf-8", "replace")[:300]
        print(
            f"det shell proxy: the master refused: HTTP {exc.response.status_code} {body}",
            file=sys.stderr,
        )
        return 255
    except OSError as exc:
        print(f"det shell proxy: cannot reach the master: {exc}", file=sys.stderr)
        return 255
    stdin = sys.stdin.buffer.fileno()
    stdout = sys.stdout.buffer

    def pump_in() -> None:
        try:
            while data := os.read(stdin, 65536):
                ws.send(data)
        except (OSError, ConnectionClosed):
            pass
        ws.close()

    threading.Thread(target=pump_in, daemon=True).start()
    try:
        for message in ws:
            if isinstance(message, bytes):
                stdout.write(message)
                stdout.flush()
    except (ConnectionClosed, BrokenPipeError):
        pass
    finally:
        ws.close()
    if ws.close_code is not None and ws.close_code >= 4000:
        print(f"det shell proxy: {ws.close_reason or ws.close_code}", file=sys.stderr)
        return 255
    return 0


def _show(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        check_ssh_target(session, args.task_id)
        wait_ready(session, args.task_id)
        return run_ssh(session, args.task_id, list(args.ssh_opts), show=True)


def _proxy(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        return relay(session, args.task_id)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``show_ssh_command`` (alias ``show-ssh-command``) and ``proxy``."""
    p = sub.add_parser(
        "show_ssh_command",
        aliases=["show-ssh-command"],
        help="print the ssh command that reaches a shell (the key is kept, mode 0600)",
        parents=[common],
    )
    p.add_argument("task_id", metavar="ID", help="shell id")
    p.add_argument("ssh_opts", nargs=argparse.REMAINDER, metavar="SSH_OPTS")
    p.set_defaults(func=_show)
    p = sub.add_parser(
        "proxy",
        help="relay stdin/stdout to a shell's sshd through the master (an SSH ProxyCommand)",
        parents=[common],
    )
    p.add_argument("task_id", metavar="ID", help="shell id")
    p.set_defaults(func=_proxy)


def check_ssh_target(session: Session, task_id: str) -> None:
    """Exit with an error when ``task_id`` is not a shell."""
    task = session.get_json(f"/tasks/{task_id}")["task"]
    if task["type"] != "SHELL":
        exit_with_error(f"task {task_id} is a {task['type']}, not a shell")


__all__ = [
    "check_ssh_target",
    "key_dir",
    "prepare",
    "register",
    "relay",
    "run_ssh",
    "split_ssh_args",
]
