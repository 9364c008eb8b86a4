"""Determined's CLI habits the core commands lack (the reference's appendix A tree):

- ``det experiment describe ID... [--metrics] [--csv] [--outdir DIR]``;
- ``det experiment label add|remove ID LABEL``;
- ``det experiment download-model-def ID [--output-dir .]``;
- ``det trial download ID (--best|--latest|--uuid UUID) [-o/--output-dir]
  [--sort-by METRIC] [--smaller-is-better]``;
- ``det checkpoint delete UUID[,UUID...] [--yes]``;
- the log filters ``--head N``, ``--tail N``, ``--rank-id N``, ``--level LEVEL`` and
  ``--json`` of ``det trial logs`` and ``det experiment logs``.

Each ``register_*`` function adds its commands to a group's subparsers.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._render import format_log_line
from ._util import (
    exit_with_error,
    fmt_number,
    open_session,
    positive_int,
    print_json,
    write_line,
)

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""Determined's log levels, lowest first (``--level X`` keeps X and above)."""

_LEVEL_RE = re.compile(r"^(?:\[rank=\d+\]\s*)?(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b:?")


# ---------------------------------------------------------------------- log filters


def add_log_filters(p: argparse.ArgumentParser) -> None:
    """Add ``--head``, ``--tail``, ``--rank-id`` and ``--level`` to a logs command."""
    p.add_argument("--head", type=positive_int, metavar="N", help="only the first N lines")
    p.add_argument("--tail", type=positive_int, metavar="N", help="only the last N lines")
    p.add_argument("--rank-id", type=int, metavar="N", help="only lines of rank N")
    p.add_argument(
        "--level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"only lines at LEVEL or above ({', '.join(LOG_LEVELS)})",
    )


_WARNING_RE = re.compile(r":\d+: \w*Warning: ")
_RANK_RE = re.compile(r"^\[rank=(\d+)\]")


def line_rank(line: Mapping[str, Any]) -> int | None:
    """The rank of a log line: its ``rank_id``, else the ``[rank=N]`` prefix the rank
    launcher (:mod:`dauntless.launch.wrap_rank`) wrote; None for lines of no rank."""
    if line.get("rank_id") is not None:
        return int(line["rank_id"])
    m = _RANK_RE.match(str(line.get("log", "")))
    return int(m.group(1)) if m else None


def line_level(line: Mapping[str, Any]) -> str:
    """The level of a log line: the ``LEVEL:`` it starts with (Python logging's format,
    after any ``[rank=N]`` prefix); else WARNING for a Python warning
    (``file:line: SomeWarning: ...``); else INFO for stdout and ERROR for stderr."""
    text = str(line.get("log", ""))
    m = _LEVEL_RE.match(text)
    if m:
        level = m.group(1)
        return "WARNING" if level == "WARN" else level
    if _WARNING_RE.search(text):
        return "WARNING"
    return "ERROR" if line.get("stdtype") == "stderr" else "INFO"


def filter_lines(
    lines: Iterable[Mapping[str, Any]], args: argparse.Namespace
) -> Iterator[Mapping[str, Any]]:
    """Apply the log filters of ``args`` (``--rank-id``, ``--level``, ``--head``,
    ``--tail``) to log lines, in order. ``--tail`` reads to the end first."""
    rank = getattr(args, "rank_id", None)
    level = getattr(args, "level", None)
    floor = LOG_LEVELS.index(level) if level else 0
    head = getattr(args, "head", None)
    tail = getattr(args, "tail", None)

    def keep(line: Mapping[str, Any]) -> bool:
        if rank is not None and line_rank(line) != rank:
            return False
        return not level or LOG_LEVELS.index(line_level(line)) >= floor

    chosen: Iterator[Mapping[str, Any]] = (line for line in lines if keep(line))
    if tail is not None:
        chosen = iter(collections.deque(chosen, maxlen=tail))
    for n, line in enumerate(chosen):
        if head is not None and n >= head:
            return
        yield line


def print_log_line(line: Mapping[str, Any], as_json: bool, prefix: str = "") -> None:
    """One log line: JSON Lines with ``--json``, else ``[rank=N] text``."""
    if as_json:
        write_line(json.dumps(line))
    else:
        write_line(prefix + format_log_line(line))


# ---------------------------------------------------------------------- describe


def _flat_metric_rows(
    exp_id: int, trial: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
) -> list[list[Any]]:
    rows = []
    for m in metrics:
        for name, value in sorted((m.get("values") or {}).items()):
            rows.append([exp_id, trial["id"], m.get("group"), m.get("total_batches"), name, value])
    return rows


def describe_many(args: argparse.Namespace) -> int:
    """``det experiment describe ID... [--metrics] [--csv] [--outdir DIR] [--json]``."""
    from .experiment import describe_one

    ids: list[int] = args.experiment_ids
    plain = len(ids) == 1 and not (args.metrics or args.csv or args.outdir)
    if plain:
        args.experiment_id = ids[0]
        return describe_one(args)
    with open_session(args) as session:
        details = [session.get_experiment(i) for i in ids]
        metrics = {
            int(t["id"]): session.get_trial_metrics(int(t["id"]))
            for d in details
            for t in (d.get("trials") or [])
            if args.metrics
        }
    if args.json:
        body: dict[str, Any] = {"experiments": details}
        if args.metrics:
            body["metrics"] = {str(k): v for k, v in metrics.items()}
        print_json(body)
        return 0
    exp_cols = ["Experiment ID", "Name", "State", "Searcher", "Best metric", "Trials"]
    exp_rows = [
        [
            d["experiment"]["id"],
            d["experiment"].get("name") or "",
            d["experiment"].get("state"),
            ((d["experiment"].get("config") or {}).get("searcher") or {}).get("name", ""),
            fmt_number(d["experiment"].get("best_searcher_metric")),
            len(d.get("trials") or []),
        ]
        for d in details
    ]
    trial_cols = ["Experiment ID", "Trial ID", "State", "Batches", "H-Params", "Best validation"]
    trial_rows = [
        [
            d["experiment"]["id"],
            t["id"],
            t.get("state"),
            t.get("total_batches"),
            json.dumps(t.get("hparams") or {}, sort_keys=True),
            fmt_number(t.get("best_validation")),
        ]
        for d in details
        for t in sorted(d.get("trials") or [], key=lambda t: int(t["id"]))
    ]
    metric_cols = ["Experiment ID", "Trial ID", "Group", "Batches", "Metric", "Value"]
    metric_rows = [
        row
        for d in details
        for t in (d.get("trials") or [])
        for row in _flat_metric_rows(d["experiment"]["id"], t, metrics.get(int(t["id"]), []))
    ]
    tables = [("experiments", exp_cols, exp_rows), ("trials", trial_cols, trial_rows)]
    if args.metrics:
        tables.append(("metrics", metric_cols, metric_rows))
    if args.outdir:
        out = Path(args.outdir)
        out.mkdir(parents=True, exist_ok=True)
        for name, cols, rows in tables:
            with (out / f"{name}.csv").open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(cols)
                writer.writerows(rows)
        write_line(f"Wrote {', '.join(f'{n}.csv' for n, _, _ in tables)} to {out}")
        return 0
    from ._util import print_table

    for name, cols, rows in tables:
        if args.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(cols)
            writer.writerows(rows)
            sys.stdout.write(buf.getvalue())
        else:
            print_table(cols, rows, title=name.capitalize())
    return 0


# ---------------------------------------------------------------------- labels, model def


def _label(args: argparse.Namespace) -> int:
    method = "PUT" if args.label_action == "add" else "DELETE"
    with open_session(args) as session:
        from urllib.parse import quote

        path = f"/experiments/{args.experiment_id}/labels/{quote(args.label, safe='')}"
        labels = session.request(method, path).json()["labels"]
    verb = "added to" if method == "PUT" else "removed from"
    write_line(
        f"Label {args.label!r} {verb} experiment {args.experiment_id}; labels: "
        + (", ".join(labels) or "(none)")
    )
    return 0


def _download_model_def(args: argparse.Namespace) -> int:
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open_session(args) as session:
        data = session.request("GET", f"/experiments/{args.experiment_id}/model_def").content
    dest = out / f"experiment_{args.experiment_id}_model_def.tgz"
    dest.write_bytes(data)
    write_line(f"Model definition of experiment {args.experiment_id} saved to {dest}")
    return 0


# ---------------------------------------------------------------------- downloads


def _unpack(data: bytes, dest: str) -> None:
    from .lifecycle import _unpack as unpack

    unpack(data, dest)


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


def _checkpoint_delete(args: argparse.Namespace) -> int:
    uuids = [u.strip() for u in args.checkpoints_uuids.split(",") if u.strip()]
    if not uuids:
        exit_with_error("give one or more checkpoint UUIDs, separated by commas")
    if not args.yes:
        if not sys.stdin.isatty():
            exit_with_error(f"deleting {len(uuids)} checkpoint(s) removes their files; pass --yes")
        answer = input(f"Delete {len(uuids)} checkpoint(s) from storage? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            write_line("Not deleted.")
            return 1
    with open_session(args) as session:
        for uuid in uuids:
            answer = session.request("DELETE", f"/checkpoints/{uuid}").json()
            if isinstance(answer, dict) and answer.get("state") == "DELETING":
                write_line(
                    f"Deleting checkpoint {uuid}: its storage failed; the master retries "
                    "until its files are gone (state DELETING, then DELETED)"
                )
            else:
                write_line(f"Deleted checkpoint {uuid}")
    return 0


def set_log_retention(args: argparse.Namespace) -> int:
    """``det e set log-retention ID (--days N | --forever)``."""
    days = -1 if args.forever else args.days
    with open_session(args) as session:
        session.request(
            "PUT", f"/experiments/{args.experiment_id}/retain_logs", json={"num_days": days}
        )
    kept = "forever" if days == -1 else f"for {days} day(s) after each trial ends"
    write_line(f"Experiment {args.experiment_id}: trial logs kept {kept}")
    return 0


# ---------------------------------------------------------------------- registration


def register_experiment_extras(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``describe`` (several IDs), ``label`` and ``download-model-def``."""
    p = sub.add_parser(
        "describe", help="show experiments, their trials and metrics", parents=[common]
    )
    p.add_argument("experiment_ids", metavar="ID", type=positive_int, nargs="+")
    p.add_argument("--metrics", action="store_true", help="also every metric report")
    p.add_argument("--csv", action="store_true", help="print CSV tables")
    p.add_argument("--outdir", metavar="DIR", help="write experiments/trials/metrics CSV files")
    p.add_argument("--json", action="store_true", help="print the master's JSON answers")
    p.set_defaults(func=describe_many)

    p = sub.add_parser("label", help="add or remove an experiment label", parents=[common])
    lsub = p.add_subparsers(dest="label_action", metavar="ACTION", required=True)
    for action in ("add", "remove"):
        q = lsub.add_parser(action, help=f"{action} a label", parents=[common])
        q.add_argument("experiment_id", metavar="ID", type=positive_int)
        q.add_argument("label", metavar="LABEL")
        q.set_defaults(func=_label)

    p = sub.add_parser(
        "download-model-def", help="save the experiment's model code (.tgz)", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--output-dir", default=".", help="directory (default .)")
    p.set_defaults(func=_download_model_def)


def register_trial_extras(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``det trial download``."""
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


def register_checkpoint_extras(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``det checkpoint delete``."""
    p = sub.add_parser(
        "delete", help="delete checkpoints of finished experiments", parents=[common]
    )
    p.add_argument("checkpoints_uuids", metavar="UUIDS", help="comma-separated UUIDs")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_checkpoint_delete)


__all__ = [
    "LOG_LEVELS",
    "add_log_filters",
    "describe_many",
    "filter_lines",
    "line_level",
    "line_rank",
    "register_checkpoint_extras",
    "register_experiment_extras",
    "register_trial_extras",
    "set_log_retention",
]
