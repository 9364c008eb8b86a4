"""``det notebook``: JupyterLab on the cluster, through the master's proxy."""

from __future__ import annotations

import argparse
from typing import Any

from ._tasks import (
    add_start_options,
    build_config,
    create_task,
    open_or_print,
    register_common,
    service_url,
    wait_ready,
)
from ._util import note, open_session, write_line


def _start(args: argparse.Namespace) -> int:
    config, context = build_config(args)
    with open_session(args) as session:
        task = create_task(
            session, "notebooks", config, context, args.workspace_name, template_name=args.template
        )["task"]
        note(f"Launched notebook {task['id']}")
        if args.detach:
            write_line(task["id"])
            return 0
        task = wait_ready(session, task["id"])
        open_or_print(service_url(session, task, "lab"), args.no_browser)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``notebook``: start, list, kill, logs, config, open."""
    group = subparsers.add_parser("notebook", help="JupyterLab notebooks", parents=[common])
    sub = group.add_subparsers(dest="notebook_command", metavar="COMMAND", required=True)
    p = sub.add_parser("start", help="start JupyterLab and open it", parents=[common])
    add_start_options(p)
    p.add_argument("--no-browser", action="store_true", help="print the URL instead")
    p.set_defaults(func=_start)
    register_common(sub, common, "notebook", "NOTEBOOK", open_suffix="lab")
