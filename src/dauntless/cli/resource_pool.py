"""``det resource-pool|rp list``: pools with their schedulers and slots used and free."""

from __future__ import annotations

import argparse
from typing import Any

from ._util import add_json_flag, open_session, print_json, print_table

POOL_COLUMNS = (
    "Name",
    "Scheduler",
    "Preemption",
    "Agents",
    "Slots",
    "Used",
    "Free",
    "Disabled",
    "Provider",
)


def _provider(p: dict[str, Any]) -> str:
    """``local 2/5``: the provider and its live instances of at most max_instances."""
    if not p.get("provider"):
        return "-"
    return f"{p['provider']} {p.get('instances', 0)}/{p.get('max_instances')}"


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        pools = session.list_resource_pools()
    if args.json:
        print_json({"resource_pools": pools})
        return 0
    print_table(
        POOL_COLUMNS,
        [
            [
                p["name"],
                p["scheduler"],
                str(p["preemption"]),
                str(p["agents"]),
                str(p["slots_total"]),
                str(p["slots_used"]),
                str(p["slots_free"]),
                str(p["slots_disabled"]),
                _provider(p),
            ]
            for p in pools
        ],
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``resource-pool`` (alias ``rp``) command group."""
    group = subparsers.add_parser(
        "resource-pool", aliases=["rp"], help="inspect resource pools", parents=[common]
    )
    sub = group.add_subparsers(dest="pool_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list resource pools", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_list)
