"""``det experiment list``: search experiments on the master and print them cheaply.

The master filters, sorts, pages and projects (``GET /api/v1/experiments``,
docs/protocol.md "Searching experiments"): the table asks only for the columns it
shows, and is written by :func:`plain_table` rather than rich's table layout (a
1,000-row rich table cost about a second of CPU, issue 37 scope 5). ``--json`` prints
the master's full experiments, as before, unless ``--fields`` names columns.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from collections.abc import Sequence
from typing import Any

from ._render import EXPERIMENT_COLUMNS, experiment_row
from ._util import exit_with_error, fmt_number, open_session, print_json

#: The columns the default table needs from the master.
TABLE_FIELDS = (
    "id",
    "name",
    "state",
    "progress",
    "num_trials",
    "best_searcher_metric",
    "searcher_metric",
    "start_time",
    "end_time",
)
SORT_KEYS = (
    "id",
    "name",
    "state",
    "owner",
    "start_time",
    "end_time",
    "progress",
    "num_trials",
    "searcher",
    "best_searcher_metric",
    "project_id",
    "description",
)


def _time(text: str) -> float:
    """Seconds since the epoch from ``text``: a number of seconds, or an ISO date or
    date-time (local time unless it names a zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds since the epoch or an ISO date such as 2026-11-28T10:00"
        ) from None


def _sort_key(text: str) -> str:
    if text in SORT_KEYS or (text.startswith("hp.") and len(text) > 3):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(SORT_KEYS)} or hp.<name>")


def add_list_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``det experiment list``."""
    p.add_argument("-a", "--all", action="store_true", help="include archived experiments")
    p.add_argument("--workspace-id", type=int, help="only this workspace's")
    p.add_argument("--project-id", type=int, help="only this project's")
    p.add_argument("--state", action="append", help="only in this state (repeatable: any)")
    p.add_argument(
        "--owner", action="append", dest="owner", help="owned by this user (repeatable: any)"
    )
    p.add_argument("--label", action="append", help="carrying this label (repeatable: all)")
    p.add_argument("--searcher", action="append", help="searcher name (repeatable: any)")
    p.add_argument("--name", help="a part of the name (case-insensitive)")
    for flag, help_text in (
        ("--started-after", "started at or after (epoch seconds or ISO date)"),
        ("--started-before", "started at or before"),
        ("--ended-after", "ended at or after"),
        ("--ended-before", "ended at or before"),
    ):
        p.add_argument(flag, type=_time, metavar="TIME", help=help_text)
    p.add_argument(
        "--hp",
        action="append",
        metavar="COND",
        help="hyperparameter condition NAME OP VALUE, e.g. 'lr>=0.001' (repeatable: all)",
    )
    p.add_argument(
        "--best-metric",
        action="append",
        metavar="COND",
        help="best searcher-metric condition, e.g. 'validation_loss<0.3' (repeatable: all)",
    )
    p.add_argument("--sort-by", type=_sort_key, default="id", help="sort key (default id)")
    p.add_argument("--order-by", choices=("asc", "desc"), default="desc")
    p.add_argument(
        "--columns",
        metavar="NAMES",
        help="extra table columns, comma-separated: hp.<name>, owner, searcher, labels, ...",
    )
    p.add_argument("--fields", metavar="NAMES", help="with --json: only these fields")
    p.add_argument("--show_project", "--show-project", action="store_true", dest="show_project")
    p.add_argument("--limit", type=int, default=200, help="experiments per request (default 200)")
    p.add_argument("--offset", type=int, default=0, help="skip this many first")
    p.add_argument(
        "--pages", choices=("all", "1"), default="all", help="all pages (default) or one"
    )
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "workspace_id": args.workspace_id,
        "project_id": args.project_id,
        "state": args.state,
        "owner": args.owner,
        "label": args.label,
        "searcher": args.searcher,
        "name": args.name,
        "start_after": args.started_after,
        "start_before": args.started_before,
        "end_after": args.ended_after,
        "end_before": args.ended_before,
        "hp": args.hp,
        "best_metric": args.best_metric,
    }


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def fetch(args: argparse.Namespace, fields: Sequence[str] | None) -> tuple[list[Any], int]:
    """The experiments ``args`` ask for (every page, or one with ``--pages 1``) and how
    many matched on the master."""
    if args.limit < 1 or args.offset < 0:
        exit_with_error("--limit must be >= 1 and --offset >= 0")
    out: list[Any] = []
    offset = args.offset
    with open_session(args) as session:
        while True:
            page = session.list_experiments(
                archived=None if args.all else False,
                limit=args.limit,
                offset=offset,
                fields=fields,
                sort_by=args.sort_by,
                order_by=args.order_by,
                **_filters(args),
            )
            items = page.get("experiments", [])
            total = int(page.get("total", 0))
            out.extend(items)
            offset += len(items)
            if args.pages == "1" or not items or offset >= total:
                return out, total


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table as text, in the layout of the CLI's other tables (header, a rule of
    ``─``, left-aligned cells, columns three spaces apart, no trailing spaces), built
    by padding strings: linear in the cells, where rich's layout measures each one."""
    widths = [len(c) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                widths[i] = len(cell)

    def line(cells: Sequence[str]) -> str:
        return "   ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "─" * (sum(widths) + 3 * (len(widths) - 1))
    return "\n".join([line(columns), rule, *(line(r) for r in rows)]) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(x) for x in value)
    return fmt_number(value)


def list_experiments(args: argparse.Namespace) -> int:
    """Run ``det experiment list`` (the options of :func:`add_list_arguments`)."""
    if args.json:
        fields = _split(args.fields) or None
        exps, total = fetch(args, fields)
        print_json({"experiments": exps, "total": total})
        return 0
    extra = _split(args.columns)
    if args.show_project:
        extra = ["workspace_name", "project_name", *extra]
    if args.all:
        extra.append("archived")
    exps, _total = fetch(args, [*TABLE_FIELDS, *extra])
    now = time.time()
    columns = [*EXPERIMENT_COLUMNS, *(_title(f) for f in extra)]
    rows = [experiment_row(e, now) + [_cell(e.get(f)) for f in extra] for e in exps]
    if args.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return 0
    sys.stdout.write(plain_table(columns, rows))
    return 0


def _title(field: str) -> str:
    if field.startswith("hp."):
        return field
    return field.replace("_", " ").capitalize()
