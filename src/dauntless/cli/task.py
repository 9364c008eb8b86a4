"""``det task``: every generic task (commands, notebooks, shells, TensorBoards)."""

from __future__ import annotations

import argparse
from typing import Any

from ._tasks import register_common


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``task``: list, logs, kill, config."""
    group = subparsers.add_parser(
        "task", help="list every command, notebook, shell and TensorBoard", parents=[common]
    )
    sub = group.add_subparsers(dest="task_command", metavar="COMMAND", required=True)
    register_common(sub, common, "task", None)
