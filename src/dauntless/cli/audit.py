"""``det audit``: the audit trail (administrators): who changed what, and whether the
record is intact (docs/protocol.md, "Audit trail").

``verify`` exits 1 when the chain is broken, naming each break (a deleted or edited
row, a retention checkpoint not signed by the master, rows missing at the end).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_time,
    open_session,
    positive_int,
    print_json,
    print_table,
    write_line,
)


def _list(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "limit": args.limit,
        "offset": args.offset,
        "username": args.username,
        "result": args.result,
        "order": "asc" if args.oldest_first else "desc",
    }
    with open_session(args) as session:
        answer = session.get_json("/audit", params)
    if args.json:
        print_json(answer)
        return 0
    rows = [
        (
            e["id"],
            fmt_time(e["at"]),
            e.get("username") or "",
            str(e.get("token_kind", "")).replace("USER_SESSION", "session").lower(),
            f"{e['method']} {e['route']}",
            e.get("target") or "",
            f"{e['result']} ({e['status']})",
            e.get("client") or "",
        )
        for e in answer["entries"]
    ]
    print_table(["ID", "Time", "User", "Token", "Request", "Target", "Result", "Client"], rows)
    page = answer["pagination"]
    write_line(f"{page['end_index'] - page['start_index']} of {page['total']} entries.")
    return 0


def _verify(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        result = session.get_json("/audit/verify")
    if args.json:
        print_json(result)
    elif result["ok"]:
        start = result.get("checkpoint")
        since = f" since the retention cut at row {start['cut_id']}" if start else ""
        write_line(
            f"The audit trail is intact: {result['rows']} rows checked{since}"
            + (f" (rows {result['first_id']} to {result['last_id']})." if result["rows"] else ".")
        )
    else:
        for brk in result["breaks"]:
            write_line(f"BREAK at row {brk['id']}: {brk['problem']}")
    if not result["ok"]:
        more = result["break_count"] - len(result["breaks"])
        exit_with_error(
            f"the audit trail is broken: {result['break_count']} break(s)"
            + (f" ({more} not listed)" if more > 0 else "")
        )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``audit`` command group."""
    group = subparsers.add_parser(
        "audit", help="the audit trail of who changed what (administrators)", parents=[common]
    )
    sub = group.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "list", aliases=["ls"], help="list audit entries, newest first", parents=[common]
    )
    p.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100)"
    )
    p.add_argument("--offset", type=int, default=0, help="skip this many first")
    p.add_argument("--username", default=None, help="only this user's entries")
    p.add_argument(
        "--result",
        choices=["ok", "denied", "refused", "error"],
        default=None,
        help="only entries with this result",
    )
    p.add_argument("--oldest-first", action="store_true", help="oldest first")
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser(
        "verify", help="check the hash chain; exits 1 naming each break", parents=[common]
    )
    add_json_flag(p)
    p.set_defaults(func=_verify)


__all__ = ["register"]
