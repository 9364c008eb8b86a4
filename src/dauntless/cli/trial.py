"""``det trial|t``: describe trials, print or follow their logs, list their checkpoints."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dauntless.client import follow_trial_logs

from . import _util
from ._failure import failure_fields
from ._render import (
    latest_validation,
    print_metrics,
    show_checkpoints,
)
from ._util import (
    add_json_flag,
    fmt_duration,
    fmt_hparams,
    fmt_number,
    fmt_time,
    note,
    open_session,
    positive_int,
    print_fields,
    print_json,
    print_table,
)


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        trial = session.get_trial(args.trial_id)
        metrics = session.get_trial_metrics(args.trial_id) if args.metrics else None
    if args.json:
        print_json({"trial": trial} if metrics is None else {"trial": trial, "metrics": metrics})
        return 0
    print_fields(
        [
            ("Trial ID", trial.get("id")),
            ("Experiment ID", trial.get("experiment_id")),
            ("State", trial.get("state")),
            ("Status", trial.get("runner_state") or ""),
            ("H-Params", fmt_hparams(trial.get("hparams"))),
            ("Seed", trial.get("seed")),
            ("Batches", trial.get("total_batches")),
            ("Best validation", fmt_number(trial.get("best_validation"))),
            ("Restarts", trial.get("restarts")),
            ("Run ID", trial.get("run_id")),
            ("Latest checkpoint", trial.get("latest_checkpoint") or ""),
            ("Start time", fmt_time(trial.get("start_time"))),
            ("End time", fmt_time(trial.get("end_time"))),
            ("Duration", fmt_duration(trial.get("start_time"), trial.get("end_time"))),
            *failure_fields(trial),
            ("Metadata", json.dumps(trial.get("metadata") or {}, sort_keys=True)),
        ]
    )
    batches, values = latest_validation(trial)
    title = "Latest validation metrics" + (f" (batches {batches})" if batches is not None else "")
    print_table(
        ["Metric", "Value"],
        [[k, fmt_number(v)] for k, v in sorted(values.items()) if k != "batches"],
        title=title if values else "Latest validation metrics (none yet)",
    )
    if metrics is not None:
        print_metrics(metrics, "training")
        print_metrics(metrics, "validation")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from .compat_cmds import filter_lines, print_log_line

    follow = args.follow and args.head is None and args.tail is None
    with open_session(args) as session:
        lines = follow_trial_logs(
            session,
            args.trial_id,
            follow=follow,
            poll_interval=_util.POLL_INTERVAL,
            on_connection_lost=lambda exc: note(
                f"Lost the connection to the master ({exc}); retrying..."
            ),
        )
        for line in filter_lines(lines, args):
            print_log_line(line, args.json)
    return 0


def _list_checkpoints(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ckpts = session.get_trial_checkpoints(args.trial_id)
    return show_checkpoints(ckpts, args.json)


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``trial`` (alias ``t``) command group (see :func:`experiment.register`)."""
    group = subparsers.add_parser("trial", aliases=["t"], help="inspect trials", parents=[common])
    sub = group.add_subparsers(dest="trial_command", metavar="COMMAND", required=True)

    p = sub.add_parser("describe", help="show a trial and its latest metrics", parents=[common])
    p.add_argument("trial_id", metavar="ID", type=positive_int, help="trial ID")
    p.add_argument(
        "--metrics", action="store_true", help="also show every training and validation report"
    )
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("logs", help="print a trial's logs", parents=[common])
    p.add_argument("trial_id", metavar="ID", type=positive_int, help="trial ID")
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines until the trial ends"
    )
    p.add_argument(
        "--json", action="store_true", help="print each line as one JSON object (JSON Lines)"
    )
    from .compat_cmds import add_log_filters, register_trial_extras

    add_log_filters(p)
    p.set_defaults(func=_logs)

    p = sub.add_parser(
        "list-checkpoints", aliases=["lc"], help="list a trial's checkpoints", parents=[common]
    )
    p.add_argument("trial_id", metavar="ID", type=positive_int, help="trial ID")
    add_json_flag(p)
    p.set_defaults(func=_list_checkpoints)

    from .lifecycle import register_trial_commands

    register_trial_commands(sub, common)
    register_trial_extras(sub, common)


__all__ = ["register"]
