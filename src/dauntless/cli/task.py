"""``det task``: every generic task (commands, notebooks, shells, TensorBoards)."""

from __future__ import annotations

import argparse
from typing import Any

from ._tasks import register_common
from ._util import open_session


def _cleanup_logs(args: argparse.Namespace) -> int:
    """Delete the task logs past their retention now (``retention_policy``; admins)."""
    with open_session(args) as session:
        removed = session.request("POST", "/cleanup_logs").json()["removedCount"]
    print(f"Removed {removed} log line(s).")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``task``: list, logs, kill, config, cleanup-logs."""
    group = subparsers.add_parser(
        "task", help="list every command, notebook, shell and TensorBoard", parents=[common]
    )
    sub = group.add_subparsers(dest="task_command", metavar="COMMAND", required=True)
    register_common(sub, common, "task", None)
    p = sub.add_parser(
        "cleanup-logs", help="delete logs past their retention now (admins)", parents=[common]
    )
    p.set_defaults(func=_cleanup_logs)
