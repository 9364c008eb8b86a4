"""Experiment and trial lifecycle commands: pause, activate, cancel, kill, archive,
unarchive, delete, wait, set, logs, download; ``det trial kill``; checkpoint downloads.

Registered into the ``experiment``, ``trial`` and ``checkpoint`` groups by their modules.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from dauntless.client import extract_archive, follow_trial_logs

from ._util import (
    add_json_flag,
    exit_with_error,
    note,
    open_session,
    positive_int,
    print_json,
    write_line,
)
from .compat_cmds import add_log_filters, filter_lines, print_log_line

TERMINAL = {"COMPLETED", "CANCELED", "ERROR", "DELETED"}


def _action(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        exp = session.experiment_action(args.experiment_id, args.action)
    if getattr(args, "json", False):
        print_json({"experiment": exp})
    else:
        write_line(
            f"Experiment {exp['id']}: {args.action} -> {exp['state']}"
            + (" (archived)" if exp.get("archived") else "")
        )
    return 0


def _delete(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            exit_with_error(
                f"deleting experiment {args.experiment_id} removes its checkpoints and records; "
                "pass --yes to confirm"
            )
        answer = input(f"Delete experiment {args.experiment_id} and all its checkpoints? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            write_line("Not deleted.")
            return 1
    with open_session(args) as session:
        session.delete_experiment(args.experiment_id)
    write_line(f"Deleted experiment {args.experiment_id}.")
    return 0


def _wait(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        while True:
            exp = session.get_experiment(args.experiment_id)["experiment"]
            if exp["state"] in TERMINAL:
                write_line(f"Experiment {exp['id']} is {exp['state']}.")
                return 0 if exp["state"] == "COMPLETED" else 1
            time.sleep(args.polling_interval)


def _set(args: argparse.Namespace) -> int:
    if args.field == "gc-policy":
        counts = {
            "save_experiment_best": args.save_experiment_best,
            "save_trial_best": args.save_trial_best,
            "save_trial_latest": args.save_trial_latest,
        }
        body: dict[str, Any] = {
            "checkpoint_storage": {k: v for k, v in counts.items() if v is not None}
        }
        if not body["checkpoint_storage"]:
            exit_with_error(
                "set gc-policy needs at least one of --save-experiment-best, "
                "--save-trial-best, --save-trial-latest"
            )
    elif args.field in ("priority", "weight", "max-slots"):
        key = args.field.replace("-", "_")
        try:
            value = float(args.value) if key == "weight" else int(args.value)
        except ValueError:
            exit_with_error(f"{args.field} must be a number, got {args.value!r}")
        body = {"resources": {key: value}}
    else:
        body = {args.field: args.value}
    with open_session(args) as session:
        exp = session.patch_experiment(args.experiment_id, body)
    if args.field == "gc-policy":
        storage = exp["config"]["checkpoint_storage"]
        write_line(
            f"Experiment {exp['id']} GC policy: save_experiment_best="
            f"{storage['save_experiment_best']}, save_trial_best={storage['save_trial_best']}, "
            f"save_trial_latest={storage['save_trial_latest']} (collected now)"
        )
    elif "resources" in body:
        key = args.field.replace("-", "_")
        write_line(f"Experiment {exp['id']} {args.field}: {exp['config']['resources'][key]}")
    else:
        write_line(f"Experiment {exp['id']} {args.field}: {exp[args.field]}")
    return 0


def _experiment_logs(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        seen: set[int] = set()
        while True:
            exp = session.get_experiment(args.experiment_id)
            for trial in exp["trials"]:
                if trial["id"] in seen:
                    continue
                follow = args.follow and trial["state"] not in TERMINAL
                if follow and any(
                    t["state"] not in TERMINAL and t["id"] not in seen and t["id"] < trial["id"]
                    for t in exp["trials"]
                ):
                    continue
                lines = follow_trial_logs(session, trial["id"], follow=follow)
                for line in filter_lines(lines, args):
                    print_log_line(line, args.json, prefix=f"[trial {trial['id']}] ")
                seen.add(trial["id"])
            if not args.follow or (
                exp["experiment"]["state"] in TERMINAL
                and all(t["id"] in seen for t in exp["trials"])
            ):
                return 0
            time.sleep(0.5)


def _kill_trial(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        trial = session.kill_trial(args.trial_id)
    write_line(f"Trial {trial['id']}: kill -> {trial['state']}")
    return 0


def _unpack(data: bytes, dest: str) -> None:
    """Unpack a checkpoint archive into ``dest``, never outside it; entries left out
    (links leaving the directory, absolute paths, device files) are reported on stderr.
    An unreadable archive or a failed write ends the command with ``Error: ...``."""
    try:
        skipped = extract_archive(data, dest)
    except tarfile.TarError as exc:
        exit_with_error(f"the master's archive could not be read: {exc}")
    except OSError as exc:
        exit_with_error(f"cannot write into {dest}: {exc.strerror or exc}")
    for entry in skipped:
        note(f"Skipped {entry.name!r} of the checkpoint (not written): {entry.reason}")


def _download_checkpoint(args: argparse.Namespace) -> int:
    dest = args.output or os.path.join("checkpoints", args.uuid)
    with open_session(args) as session:
        _unpack(session.download_checkpoint(args.uuid), dest)
    write_line(f"Checkpoint {args.uuid} downloaded to {dest}")
    return 0


def _download_experiment(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        exp = session.get_experiment(args.experiment_id)["experiment"]
        ckpts = [
            c
            for c in session.get_experiment_checkpoints(args.experiment_id)
            if c["state"] == "COMPLETED"
        ]
        smaller = exp.get("smaller_is_better", True)

        def key(c: Mapping[str, Any]) -> tuple[int, float, int]:
            m = c.get("searcher_metric")
            if not isinstance(m, (int, float)) or not math.isfinite(m):
                return (1, 0.0, -c["total_batches"])
            return (0, m if smaller else -m, -c["total_batches"])

        best = sorted(ckpts, key=key)[: args.top_n]
        if not best:
            exit_with_error(f"experiment {args.experiment_id} has no checkpoint to download")
        for c in best:
            dest = os.path.join(args.output, c["uuid"])
            _unpack(session.download_checkpoint(c["uuid"]), dest)
            write_line(
                f"Checkpoint {c['uuid']} (trial {c['trial_id']}, batches "
                f"{c['total_batches']}, {exp.get('searcher_metric')}="
                f"{c.get('searcher_metric')}) -> {dest}"
            )
    return 0


def register_experiment_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the lifecycle commands to the ``experiment`` group's subparsers."""
    for action, aliases, help_text in (
        ("pause", [], "pause: trials checkpoint and free their slots"),
        ("activate", ["unpause"], "resume a paused experiment from its checkpoints"),
        ("cancel", [], "stop gracefully: trials checkpoint and end CANCELED"),
        ("kill", [], "stop now: trial processes are killed"),
        ("archive", [], "hide a finished experiment from lists (keeps every record)"),
        ("unarchive", [], "show an archived experiment again"),
    ):
        p = sub.add_parser(action, aliases=aliases, help=help_text, parents=[common])
        p.add_argument("experiment_id", metavar="ID", type=positive_int)
        add_json_flag(p)
        p.set_defaults(func=_action, action=action)

    p = sub.add_parser(
        "delete", help="delete a finished experiment and its checkpoints", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser(
        "wait", help="wait until the experiment ends; exit 0 if COMPLETED", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--polling-interval", type=float, default=5.0, metavar="SECONDS")
    p.set_defaults(func=_wait)

    p = sub.add_parser("logs", help="print the logs of every trial", parents=[common])
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("-f", "--follow", action="store_true", help="follow until the experiment ends")
    p.add_argument("--json", action="store_true", help="print each line as one JSON object")
    add_log_filters(p)  # --head/--tail/--rank-id/--level apply per trial
    p.set_defaults(func=_experiment_logs)

    p = sub.add_parser("download", help="download the best checkpoints", parents=[common])
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--top-n", type=positive_int, default=1, help="how many (by searcher metric)")
    p.add_argument(
        "-o",
        "--output",
        "--output-dir",
        default="checkpoints",
        help="directory (default checkpoints)",
    )
    p.set_defaults(func=_download_experiment)

    setp = sub.add_parser(
        "set", help="change an experiment's name, description or GC policy", parents=[common]
    )
    setsub = setp.add_subparsers(dest="set_command", metavar="FIELD", required=True)
    for field in ("name", "description", "priority", "weight", "max-slots"):
        p = setsub.add_parser(field, help=f"set the {field}", parents=[common])
        p.add_argument("experiment_id", metavar="ID", type=positive_int)
        p.add_argument("value", metavar="VALUE")
        p.set_defaults(func=_set, field=field)
    p = setsub.add_parser(
        "gc-policy", help="set the checkpoint GC policy and collect now", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    for flag in ("--save-experiment-best", "--save-trial-best", "--save-trial-latest"):
        p.add_argument(flag, type=int, default=None, metavar="N")
    p.add_argument("--yes", action="store_true", help="accepted for compatibility")
    p.set_defaults(func=_set, field="gc-policy")
    from .compat_cmds import set_log_retention

    p = setsub.add_parser(
        "log-retention",
        help="how long the trials' logs are kept after they end",
        parents=[common],
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    days = p.add_mutually_exclusive_group(required=True)
    days.add_argument("--days", type=int, help="days (0..32767; 0: at the next cleanup)")
    days.add_argument("--forever", action="store_true", help="keep them forever")
    p.set_defaults(func=set_log_retention)


def register_trial_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``det trial kill``."""
    p = sub.add_parser("kill", help="kill a trial (it ends CANCELED)", parents=[common])
    p.add_argument("trial_id", metavar="ID", type=positive_int)
    p.set_defaults(func=_kill_trial)


def register_checkpoint_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``det checkpoint download`` and ``det checkpoint list``."""
    p = sub.add_parser("download", help="download a checkpoint directory", parents=[common])
    p.add_argument("uuid", metavar="UUID")
    p.add_argument(
        "-o", "--output", "--output-dir", default=None, help="directory (default checkpoints/UUID)"
    )
    p.set_defaults(func=_download_checkpoint)
