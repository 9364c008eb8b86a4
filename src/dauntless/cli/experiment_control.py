"""``det experiment`` commands that change or follow an experiment: pause, activate, cancel,
kill, archive, unarchive, delete, wait, logs, set (name, description, priority, weight,
max-slots, gc-policy) and label add/remove."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from dauntless.client import (
    follow_trial_logs,
)

from ._logs import add_log_filters, filter_lines, print_log_line
from ._util import (
    add_json_flag,
    exit_with_error,
    open_session,
    positive_int,
    print_json,
    write_line,
)

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


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add pause, activate, cancel, kill, archive, unarchive, delete, wait, logs, set and
    label to the ``experiment`` group's subparsers."""
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

    p = sub.add_parser("label", help="add or remove an experiment label", parents=[common])
    lsub = p.add_subparsers(dest="label_action", metavar="ACTION", required=True)
    for action in ("add", "remove"):
        q = lsub.add_parser(action, help=f"{action} a label", parents=[common])
        q.add_argument("experiment_id", metavar="ID", type=positive_int)
        q.add_argument("label", metavar="LABEL")
        q.set_defaults(func=_label)


__all__ = ["register"]
