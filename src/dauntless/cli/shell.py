"""``det shell``: a shell on an agent, through the master (a PTY over WebSocket).

``det shell start`` starts a shell task and opens an interactive session in it;
``det shell start -- CMD...`` runs one command in it and exits with the command's exit
code; ``det shell open ID`` opens another session in a running shell. The local
terminal is put in raw mode, so keys (Ctrl-C included) go to the remote terminal, and
its size follows the local window (SIGWINCH). Without a local terminal the command
runs with pipes, so its output arrives byte for byte.

With ``--ssh`` the session is OpenSSH's ``ssh`` instead, through the master to the
shell's ``sshd`` (``-- SSH_ARGS...`` go to ``ssh``); ``--show-ssh-command`` and
``det shell show_ssh_command ID`` print that command for IDEs (VS Code Remote-SSH,
PyCharm) and scripts; ``det shell proxy ID`` is its ``ProxyCommand``
(:mod:`dauntless.cli.shell_ssh`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import termios
import threading
import tty
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus

from dauntless.client import Session
from dauntless.config import LimitError, load_json

from . import shell_ssh
from ._socket import connect_task_socket
from ._tasks import add_start_options, build_config, create_task, register_common, wait_ready
from ._util import exit_with_error, note, open_session, write_line


def run_session(session: Session, task_id: str, command: list[str] | None) -> int:
    """One session in shell task ``task_id``: interactive (``command`` None) or one
    command. Returns the remote exit code.

    Raises:
        SystemExit: (1) the master refused the connection.
    """
    interactive = sys.stdin.isatty()
    use_pty = interactive or command is None
    cols, rows = shutil.get_terminal_size()
    query = {"rows": str(rows), "cols": str(cols), "pty": "1" if use_pty else "0"}
    query["term"] = os.environ.get("TERM", "xterm")
    if command:
        query["cmd"] = json.dumps(command)
    try:
        ws = connect_task_socket(session, task_id, "pty", query)
    except InvalidStatus as exc:
        try:
            detail = load_json(exc.response.body or b"{}", "answer").get("detail") or ""
        except (LimitError, AttributeError):
            detail = ""
        exit_with_error(
            f"the master refused the shell session: HTTP {exc.response.status_code}"
            + (f": {detail}" if detail else "")
        )
    except OSError as exc:
        exit_with_error(f"cannot reach the shell through the master: {exc}")
    code = 1
    saved = None
    fd = sys.stdin.fileno()
    if interactive:
        saved = termios.tcgetattr(fd)
        tty.setraw(fd)

        def on_resize(_sig: int, _frame: Any) -> None:
            c, r = shutil.get_terminal_size()
            try:
                ws.send(json.dumps({"resize": [r, c]}))
            except ConnectionClosed:
                pass

        signal.signal(signal.SIGWINCH, on_resize)

    def pump_stdin() -> None:
        try:
            while True:
                data = os.read(fd, 4096)
                if not data:
                    return
                ws.send(data)
        except (OSError, ConnectionClosed):
            return

    if use_pty:
        threading.Thread(target=pump_stdin, daemon=True).start()
    out = sys.stdout.buffer
    try:
        for message in ws:
            if isinstance(message, bytes):
                out.write(message)
                out.flush()
            else:
                try:  # the task's service sends it: parsed within limits
                    ctl = load_json(message, "message")
                except LimitError:
                    continue
                if isinstance(ctl, dict) and isinstance(ctl.get("exit"), int):
                    code = ctl["exit"]
    except ConnectionClosed:
        pass
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        ws.close()
    if ws.close_code is not None and ws.close_code >= 4000:
        exit_with_error(f"the master refused the shell session: {ws.close_reason or ws.close_code}")
    return code


def _start(args: argparse.Namespace) -> int:
    config, context = build_config(args)
    command = _command(args)
    with open_session(args) as session:
        task = create_task(
            session, "shells", config, context, args.workspace_name, template_name=args.template
        )["task"]
        note(f"Launched shell {task['id']}")
        if args.detach:
            write_line(task["id"])
            return 0
        wait_ready(session, task["id"])
        if args.ssh or args.show_ssh_command:
            return shell_ssh.run_ssh(session, task["id"], command, args.show_ssh_command)
        return run_session(session, task["id"], command or None)


def _open(args: argparse.Namespace) -> int:
    command = _command(args)
    with open_session(args) as session:
        task = session.get_json(f"/tasks/{args.task_id}")["task"]
        if task["type"] != "SHELL":
            exit_with_error(f"task {args.task_id} is a {task['type']}, not a shell")
        wait_ready(session, args.task_id)
        if args.ssh or args.show_ssh_command:
            return shell_ssh.run_ssh(session, args.task_id, command, args.show_ssh_command)
        return run_session(session, args.task_id, command or None)


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``shell``: start, open, list, kill, logs, config."""
    group = subparsers.add_parser("shell", help="shells on agents", parents=[common])
    sub = group.add_subparsers(dest="shell_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "start",
        help="start a shell and open it (with -- CMD: run CMD, exit with its code)",
        parents=[common],
    )
    add_start_options(p)
    _ssh_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD...")
    p.set_defaults(func=_start)
    p = sub.add_parser("open", help="open a session in a running shell", parents=[common])
    p.add_argument("task_id", metavar="ID", help="shell id")
    _ssh_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD...")
    p.set_defaults(func=_open)
    shell_ssh.register(sub, common)
    register_common(sub, common, "shell", "SHELL")


def _command(args: argparse.Namespace) -> list[str]:
    """The command after ``--``; ``--ssh``/``--show-ssh-command`` written after the
    shell's id (which argparse's REMAINDER takes as the command's) are set as flags."""
    command = list(args.command)
    while command and command[0] in ("--ssh", "--show-ssh-command"):
        setattr(args, command.pop(0)[2:].replace("-", "_"), True)
    if command and command[0] == "--":
        command = command[1:]
    return command


def _ssh_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ssh",
        action="store_true",
        help="open the session with the OpenSSH client through the master "
        "(-- SSH_ARGS...: more ssh options and a command)",
    )
    p.add_argument(
        "--show-ssh-command",
        action="store_true",
        help="print the ssh command that reaches the shell instead (for IDEs; the key is "
        "kept in the user's cache directory, mode 0600)",
    )
