"""``det user-group``: groups of users, to give roles to many at once (Determined's
commands and flags, reference §2.5; usernames are comma-separated)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _teams
from ._util import add_json_flag, open_session, print_json, print_table, write_line


def _create(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ids = _teams.user_ids(session, args.add_user) if args.add_user else []
        g = session.post_json("/groups", {"name": args.group_name, "add_users": ids})["group"]
    write_line(
        f"Created group '{g['name']}' (id {g['group_id']}) with {len(g['users'])} member(s)."
    )
    return 0


def _members(add: bool):
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            g = _teams.group(session, args.group_name)
            ids = _teams.user_ids(session, args.usernames)
            key = "add_users" if add else "remove_users"
            _teams.call(session, "PUT", f"/groups/{g['group_id']}", {key: ids})
        verb = "Added" if add else "Removed"
        write_line(f"{verb} {len(ids)} user(s) {'to' if add else 'from'} group '{g['name']}'.")
        return 0

    return run


def _change_name(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        g = _teams.group(session, args.old_group_name)
        _teams.call(session, "PUT", f"/groups/{g['group_id']}", {"name": args.new_group_name})
    write_line(f"Renamed group '{args.old_group_name}' to '{args.new_group_name}'.")
    return 0


def _delete(args: argparse.Namespace) -> int:
    if not _teams.confirm(
        args.yes,
        f"Delete group '{args.group_name}' and its role assignments?",
        f"deleting group {args.group_name!r} takes its roles from its members",
    ):
        write_line("Not deleted.")
        return 1
    with open_session(args) as session:
        g = _teams.group(session, args.group_name)
        _teams.call(session, "DELETE", f"/groups/{g['group_id']}")
    write_line(f"Deleted group '{g['name']}'.")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        g = _teams.group(session, args.group_name)
        group = session.get_json(f"/groups/{g['group_id']}")["group"]
    if args.json:
        print_json(group)
        return 0
    write_line(f"Group {group['name']} (id {group['group_id']})")
    print_table(
        ["ID", "Username", "Display name"],
        [[u["id"], u["username"], u.get("display_name") or ""] for u in group["users"]],
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        body: dict[str, Any] = {"offset": args.offset, "limit": args.limit}
        if args.groups_user_belongs_to:
            body["user_id"] = _teams.user(session, args.groups_user_belongs_to)["id"]
        answer = session.post_json("/groups/search", body)
        while (
            args.pages == "all"
            and args.limit
            and answer["pagination"]["end_index"] < (answer["pagination"]["total"])
            and answer["groups"]
        ):
            body["offset"] = answer["pagination"]["end_index"]
            more = session.post_json("/groups/search", body)
            answer["groups"] += more["groups"]
            answer["pagination"] = more["pagination"]
    if args.json:
        print_json(answer)
        return 0
    print_table(
        ["ID", "Name", "Members"],
        [[g["group"]["group_id"], g["group"]["name"], g["num_members"]] for g in answer["groups"]],
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``user-group`` command group."""
    group = subparsers.add_parser("user-group", help="manage user groups", parents=[common])
    sub = group.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a group", parents=[common])
    p.add_argument("group_name", metavar="GROUP")
    p.add_argument("--add-user", metavar="USERS", help="comma-separated usernames to add")
    p.set_defaults(func=_create)

    for name, add in (("add-user", True), ("remove-user", False)):
        p = sub.add_parser(
            name, help=f"{name.split('-')[0]} users (comma-separated)", parents=[common]
        )
        p.add_argument("group_name", metavar="GROUP")
        p.add_argument("usernames", metavar="USERS")
        p.set_defaults(func=_members(add))

    p = sub.add_parser("change-name", help="rename a group", parents=[common])
    p.add_argument("old_group_name", metavar="GROUP")
    p.add_argument("new_group_name", metavar="NEW_NAME")
    p.set_defaults(func=_change_name)

    p = sub.add_parser("delete", help="delete a group", parents=[common])
    p.add_argument("group_name", metavar="GROUP")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser("describe", help="a group's members", parents=[common])
    p.add_argument("group_name", metavar="GROUP")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("list", aliases=["ls"], help="list groups", parents=[common])
    p.add_argument("--limit", type=int, default=200, help="at most this many")
    p.add_argument("--offset", type=int, default=0, help="skip this many first")
    p.add_argument("--pages", choices=("all", "1"), default="all", help="fetch every page, or one")
    p.add_argument("--groups-user-belongs-to", metavar="USER", help="only this user's groups")
    add_json_flag(p)
    p.set_defaults(func=_list)
