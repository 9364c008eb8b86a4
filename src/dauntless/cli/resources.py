"""``det resources|res``: historical cluster usage from allocation records (issue 34).

``raw`` and ``aggregated`` print Determined's CSVs; ``summary`` prints slot-hours of the
last days by user, workspace, resource pool or experiment label, as a table or CSV.
"""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from ._util import add_json_flag, open_session, print_json, print_table

_GROUPS = ("username", "workspace", "resource_pool", "experiment_label")


def _raw(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        body = session.get_json(
            "/resources/allocation/raw",
            {"timestamp_after": args.timestamp_after, "timestamp_before": args.timestamp_before},
        )
    if args.json:
        print_json(body)
        return 0
    out = csv.writer(sys.stdout)
    out.writerow(
        [
            "experiment_id",
            "kind",
            "username",
            "workspace",
            "resource_pool",
            "labels",
            "slots",
            "start_time",
            "end_time",
            "seconds",
        ]
    )
    for e in body["resource_entries"]:
        out.writerow(
            [
                e["experiment_id"] or "",
                e["kind"],
                e["username"],
                e["workspace"],
                e["resource_pool"],
                ";".join(e["labels"]),
                e["slots"],
                e["start_time"],
                e["end_time"],
                f"{e['seconds']:.3f}",
            ]
        )
    return 0


def _aggregated(args: argparse.Namespace) -> int:
    period = "MONTHLY" if args.monthly else "DAILY"
    with open_session(args) as session:
        body = session.get_json(
            "/resources/allocation/aggregated",
            {
                "start_date": args.start_date,
                "end_date": args.end_date,
                "period": f"RESOURCE_ALLOCATION_AGGREGATION_PERIOD_{period}",
            },
        )
    if args.json:
        print_json(body)
        return 0
    out = csv.writer(sys.stdout)
    out.writerow(["aggregation_type", "aggregation_key", "date", "seconds"])
    for e in body["resource_entries"]:
        out.writerow(["total", "total", e["period_start"], f"{e['seconds']:.3f}"])
        for group in _GROUPS:
            for key, seconds in sorted(e[f"by_{group}"].items()):
                out.writerow([group, key, e["period_start"], f"{seconds:.3f}"])
    return 0


def _summary(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        body = session.get_json("/resources/usage", {"days": args.days})
    if args.json:
        print_json(body)
        return 0
    groups = [args.by] if args.by else list(_GROUPS)
    rows: list[list[Any]] = []
    for group in groups:
        for key, seconds in sorted(body[f"by_{group}"].items(), key=lambda kv: -kv[1]):
            rows.append([group, key, f"{seconds / 3600:.3f}"])
    rows.append(["total", "total", f"{body['total'] / 3600:.3f}"])
    if args.csv:
        out = csv.writer(sys.stdout)
        out.writerow(["group", "key", "slot_hours"])
        out.writerows(rows)
    else:
        print(f"Slot-hours from {body['since']} until {body['until']}")
        print_table(["Group", "Key", "Slot-hours"], rows)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add ``resources`` (alias ``res``): raw, aggregated, summary."""
    group = subparsers.add_parser(
        "resources",
        aliases=["res"],
        help="historical cluster usage (slot-hours)",
        parents=[common],
    )
    sub = group.add_subparsers(dest="resources_command", metavar="COMMAND", required=True)
    p = sub.add_parser("raw", help="every allocation's use in a window (CSV)", parents=[common])
    p.add_argument("timestamp_after", help="YYYY-MM-DDTHH:MM:SSZ")
    p.add_argument("timestamp_before", help="YYYY-MM-DDTHH:MM:SSZ")
    add_json_flag(p)
    p.set_defaults(func=_raw)
    p = sub.add_parser("aggregated", help="slot-seconds per day or month (CSV)", parents=[common])
    p.add_argument("start_date", help="YYYY-MM-DD")
    p.add_argument("end_date", help="YYYY-MM-DD (included)")
    p.add_argument("--monthly", action="store_true", help="per month instead of per day")
    add_json_flag(p)
    p.set_defaults(func=_aggregated)
    p = sub.add_parser(
        "summary",
        help="slot-hours of the last days by user, workspace, pool, label",
        parents=[common],
    )
    p.add_argument("--days", type=int, default=30, help="how many days back (default 30)")
    p.add_argument("--by", choices=_GROUPS, help="only this grouping")
    p.add_argument("--csv", action="store_true", help="CSV instead of a table")
    add_json_flag(p)
    p.set_defaults(func=_summary)
