"""``det command|cmd``: run a command on the cluster and follow its logs."""

from __future__ import annotations

import argparse
from typing import Any

from ._tasks import (
    add_start_options,
    build_config,
    create_task,
    iter_logs,
    register_common,
)
from ._util import note, open_session, write_line


def _run(args: argparse.Namespace) -> int:
    config, context = build_config(args)
    entrypoint: Any = args.entrypoint if len(args.entrypoint) > 1 else args.entrypoint[0]
    with open_session(args) as session:
        task = create_task(
            session,
            "commands",
            config,
            context,
            args.workspace_name,
            entrypoint=entrypoint,
            template_name=args.template,
        )["task"]
        note(f"Launched command {task['id']}: {task['description']}")
        if args.detach:
            write_line(task["id"])
            return 0
        for line in iter_logs(session, task["id"], follow=True):
            write_line(str(line["log"]))
        task = session.get_json(f"/tasks/{task['id']}")["task"]
    note(
        f"Command {task['id']} is {task['state']}"
        + (f" ({task['exit_message']})" if task.get("exit_message") else "")
    )
    if task["state"] == "COMPLETED":
        return 0
    code = task.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``command`` (alias ``cmd``): run, list, kill, logs, config."""
    group = subparsers.add_parser(
        "command", aliases=["cmd"], help="run commands on the cluster", parents=[common]
    )
    sub = group.add_subparsers(dest="cmd_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "run",
        help="run a command on an agent and print its output; exits with its exit code",
        parents=[common],
    )
    add_start_options(p)
    p.add_argument(
        "entrypoint",
        nargs=argparse.REMAINDER,
        metavar="CMD...",
        help="the command: one argument runs through sh -c, several run as they are",
    )
    p.set_defaults(func=_run_checked)
    register_common(sub, common, "command", "COMMAND")


def _run_checked(args: argparse.Namespace) -> int:
    if args.entrypoint and args.entrypoint[0] == "--":
        args.entrypoint = args.entrypoint[1:]
    if not args.entrypoint:
        from ._util import exit_with_error

        exit_with_error("give the command to run: det cmd run CMD...", code=2)
    return _run(args)
