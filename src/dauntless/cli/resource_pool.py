"""``det resource-pool|rp list``: pools with their schedulers and slots used and free;
``det rp bindings add|remove|replace|list-workspaces``: pools bound to workspaces (a
bound pool is usable only by its workspaces' experiments and tasks)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _teams
from ._util import add_json_flag, open_session, print_json, print_table, write_line

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


def _bind(method: str, verb: str):
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            ids = [int(_teams.workspace(session, name)["id"]) for name in args.workspace_names]
            _teams.call(
                session,
                method,
                f"/resource-pools/{args.pool_name}/workspace-bindings",
                {"workspace_ids": ids},
            )
        write_line(f"{verb} {args.pool_name}: {', '.join(args.workspace_names)}.")
        return 0

    return run


def _list_workspaces(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        answer = session.get_json(f"/resource-pools/{args.pool_name}/workspace-bindings")
    if getattr(args, "json", False):
        print_json(answer)
        return 0
    print_table(["Workspace ID", "Workspace"], [[w["id"], w["name"]] for w in answer["workspaces"]])
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

    bindings = sub.add_parser(
        "bindings", help="bind resource pools to workspaces", parents=[common]
    )
    bsub = bindings.add_subparsers(dest="bindings_command", metavar="COMMAND", required=True)
    for name, method, verb, help_text in (
        ("add", "POST", "Bound", "bind a pool to workspaces (admins)"),
        ("remove", "DELETE", "Unbound", "unbind workspaces from a pool (admins)"),
        ("replace", "PUT", "Bound only", "bind a pool to exactly these workspaces (admins)"),
    ):
        p = bsub.add_parser(name, help=help_text, parents=[common])
        p.add_argument("pool_name", metavar="POOL")
        p.add_argument("workspace_names", metavar="WORKSPACE", nargs="+")
        p.set_defaults(func=_bind(method, verb))
    p = bsub.add_parser(
        "list-workspaces", help="the workspaces a pool is bound to", parents=[common]
    )
    p.add_argument("pool_name", metavar="POOL")
    add_json_flag(p)
    p.set_defaults(func=_list_workspaces)
