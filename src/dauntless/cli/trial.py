"""``det trial|t``: describe trials, print or follow their logs, list their checkpoints,
download one (best, latest or by UUID) and kill a trial."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dauntless.client import follow_trial_logs

from . import _util
from ._failure import failure_fields
from ._files import unpack as _unpack
from ._logs import add_log_filters, filter_lines, print_log_line
from ._render import (
    latest_validation,
    print_metrics,
    show_checkpoints,
)
from ._util import (
    add_json_flag,
    exit_with_error,
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
    write_line,
)


def _profiling(session: Any, trial_id: int, every_row: bool) -> dict[str, Any]:
    """The trial's system metrics: ``{series, latest: {group: {agent: values}}}``, and
    ``metrics`` (every row, oldest first) when ``every_row``."""
    series = session.get_json(f"/trials/{trial_id}/profiler/available_series")["series"]
    latest: dict[str, dict[str, Any]] = {}
    for one in series:
        latest.setdefault(one["group"], {})[one["agent_id"]] = one["latest"]
    out: dict[str, Any] = {"series": series, "latest": latest}
    if every_row:
        rows: list[dict[str, Any]] = []
        after = 0
        while True:
            page = session.get_json(
                f"/trials/{trial_id}/profiler/metrics", params={"after_id": after, "limit": 5000}
            )
            if not page["metrics"]:
                break
            rows.extend(page["metrics"])
            after = page["next_after_id"]
        out["metrics"] = rows
    return out


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        trial = session.get_trial(args.trial_id)
        metrics = session.get_trial_metrics(args.trial_id) if args.metrics else None
        profiling = _profiling(session, args.trial_id, bool(args.metrics))
    if args.json:
        out: dict[str, Any] = {"trial": trial, "profiling": profiling}
        if metrics is not None:
            out["metrics"] = metrics
        print_json(out)
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
    if profiling["latest"]:
        print_table(
            ["Group", "Agent", "Values"],
            [
                [group, agent, json.dumps(values, sort_keys=True)]
                for group, by_agent in sorted(profiling["latest"].items())
                for agent, values in sorted(by_agent.items())
            ],
            title="System metrics (latest report)",
        )
    if metrics is not None:
        print_metrics(metrics, "training")
        print_metrics(metrics, "validation")
    return 0


def _logs(args: argparse.Namespace) -> int:
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


def _kill(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        trial = session.kill_trial(args.trial_id)
    write_line(f"Trial {trial['id']}: kill -> {trial['state']}")
    return 0


def _trial_download(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        if args.uuid:
            uuid = args.uuid
            ckpt = session.get_json(f"/checkpoints/{uuid}")["checkpoint"]
            if int(ckpt.get("trial_id", -1)) != args.trial_id:
                exit_with_error(f"checkpoint {uuid} does not belong to trial {args.trial_id}")
        else:
            ckpts = [
                c for c in session.get_trial_checkpoints(args.trial_id) if c["state"] == "COMPLETED"
            ]
            if not ckpts:
                exit_with_error(f"trial {args.trial_id} has no completed checkpoint")
            if args.latest:
                uuid = max(ckpts, key=lambda c: c["total_batches"])["uuid"]
            else:
                uuid = _best(session, args, ckpts)
        dest = args.output or os.path.join("checkpoints", uuid)
        _unpack(session.download_checkpoint(uuid), dest)
    if not args.quiet:
        write_line(f"Checkpoint {uuid} of trial {args.trial_id} downloaded to {dest}")
    else:
        write_line(dest)
    return 0


def _best(session: Any, args: argparse.Namespace, ckpts: Sequence[Mapping[str, Any]]) -> str:
    """The uuid of the best checkpoint: by the searcher metric, or by ``--sort-by`` (the
    validation at the checkpoint's batch count), ``--smaller-is-better`` for that."""
    if args.sort_by is None:
        trial = session.get_trial(args.trial_id)
        smaller = session.get_experiment(int(trial["experiment_id"]))["experiment"].get(
            "smaller_is_better", True
        )
        values = {c["uuid"]: c.get("searcher_metric") for c in ckpts}
    else:
        smaller = args.smaller_is_better
        validations = {
            m["total_batches"]: (m.get("values") or {}).get(args.sort_by)
            for m in session.get_trial_metrics(args.trial_id, "validation")
        }
        values = {c["uuid"]: validations.get(c["total_batches"]) for c in ckpts}

    def key(c: Mapping[str, Any]) -> tuple[int, float, int]:
        v = values.get(c["uuid"])
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return (1, 0.0, -c["total_batches"])
        return (0, v if smaller else -v, -c["total_batches"])

    best = min(ckpts, key=key)
    if key(best)[0] == 1:
        metric = args.sort_by or "the searcher metric"
        exit_with_error(f"no checkpoint of trial {args.trial_id} has a validation of {metric}")
    return str(best["uuid"])


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
    add_log_filters(p)
    p.set_defaults(func=_logs)

    p = sub.add_parser(
        "list-checkpoints", aliases=["lc"], help="list a trial's checkpoints", parents=[common]
    )
    p.add_argument("trial_id", metavar="ID", type=positive_int, help="trial ID")
    add_json_flag(p)
    p.set_defaults(func=_list_checkpoints)

    p = sub.add_parser("kill", help="kill a trial (it ends CANCELED)", parents=[common])
    p.add_argument("trial_id", metavar="ID", type=positive_int)
    p.set_defaults(func=_kill)

    p = sub.add_parser("download", help="download a checkpoint of a trial", parents=[common])
    p.add_argument("trial_id", metavar="ID", type=positive_int)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the best by the searcher metric")
    which.add_argument("--latest", action="store_true", help="the one with the most batches")
    which.add_argument("--uuid", metavar="UUID", help="this checkpoint")
    p.add_argument("-o", "--output-dir", dest="output", default=None, help="directory")
    p.add_argument("--sort-by", metavar="METRIC", help="with --best: rank by this metric")
    p.add_argument(
        "--smaller-is-better",
        type=lambda v: str(v).lower() in ("1", "true", "yes"),
        default=True,
        metavar="BOOL",
        help="with --sort-by: whether smaller values are better (default true)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the path")
    p.set_defaults(func=_trial_download)


__all__ = ["register"]
