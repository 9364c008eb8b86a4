"""``det tensorboard``: TensorBoard over experiments' or trials' event files."""

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
from ._util import exit_with_error, note, open_session, positive_int, write_line


def _start(args: argparse.Namespace) -> int:
    if not args.experiment_ids and not args.trial_ids:
        exit_with_error("name experiments (det tensorboard start 1 2) or trials (-t 5 6)", code=2)
    config, _ = build_config(args)
    with open_session(args) as session:
        answer = create_task(
            session,
            "tensorboards",
            config,
            None,
            args.workspace_name,
            experiment_ids=args.experiment_ids,
            trial_ids=args.trial_ids,
            template_name=args.template,
        )
        task = answer["task"]
        note(("Reusing" if answer.get("reused") else "Launched") + f" TensorBoard {task['id']}")
        if args.detach:
            write_line(task["id"])
            return 0
        task = wait_ready(session, task["id"])
        open_or_print(service_url(session, task), args.no_browser)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``tensorboard``: start, list, kill, logs, config, open."""
    group = subparsers.add_parser("tensorboard", help="TensorBoards", parents=[common])
    sub = group.add_subparsers(dest="tensorboard_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "start", help="start (or reuse) a TensorBoard over experiments or trials", parents=[common]
    )
    p.add_argument("experiment_ids", nargs="*", type=positive_int, metavar="EXP_ID")
    p.add_argument(
        "-t", "--trial-ids", nargs="+", type=positive_int, default=[], metavar="TRIAL_ID"
    )
    add_start_options(p, context=False)
    p.add_argument("--no-browser", action="store_true", help="print the URL instead")
    p.set_defaults(func=_start)
    register_common(sub, common, "TensorBoard", "TENSORBOARD", open_suffix="")
