"""``det rbac``: roles, their permissions, and who holds which role where (Determined's
commands and flags, reference §2.5)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _teams
from ._util import add_json_flag, exit_with_error, open_session, print_json, print_table, write_line


def _scope(a: dict[str, Any], names: dict[int, str]) -> str:
    if a.get("scope_cluster") or a.get("scope_workspace_id") is None:
        return "cluster"
    ws = a["scope_workspace_id"]
    return f"workspace {names.get(ws, ws)}"


def _workspace_names(session: Any) -> dict[int, str]:
    return {w["id"]: w["name"] for w in session.get_json("/workspaces")["workspaces"]}


def _my_permissions(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        summary = session.get_json("/permissions/summary")
        names = _workspace_names(session)
    if args.json:
        print_json(summary)
        return 0
    roles = {r["role_id"]: r for r in summary["roles"]}
    rows = []
    for a in summary["assignments"]:
        scopes = (["cluster"] if a["scope_cluster"] else []) + [
            f"workspace {names.get(w, w)}" for w in a["scope_workspace_ids"]
        ]
        rows.append([roles[a["role_id"]]["name"], ", ".join(scopes)])
    if summary.get("basic"):
        write_line(
            "Authorization: basic (every user may view everything and create; owners "
            "and admins change)."
        )
    print_table(["Role", "Where"], rows)
    return 0


def _list_roles(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        body = {"offset": args.offset, "limit": args.limit}
        answer = session.post_json("/roles/search", body)
        while (
            args.pages == "all"
            and args.limit
            and answer["roles"]
            and (answer["pagination"]["end_index"] < answer["pagination"]["total"])
        ):
            body["offset"] = answer["pagination"]["end_index"]
            more = session.post_json("/roles/search", body)
            answer["roles"] += more["roles"]
            answer["pagination"] = more["pagination"]
    roles = [
        r
        for r in answer["roles"]
        if not (args.exclude_global_roles and not r["scope_type_mask"]["workspace"])
    ]
    if args.json:
        print_json({"roles": roles, "pagination": answer["pagination"]})
        return 0
    print_table(
        ["ID", "Name", "Permissions", "Global only"],
        [
            [
                r["role_id"],
                r["name"],
                len(r["permissions"]),
                "yes" if not r["scope_type_mask"]["workspace"] else "no",
            ]
            for r in roles
        ],
    )
    return 0


def _describe_role(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        role = _teams.role(session, args.role_name)
    if args.json:
        print_json(role)
        return 0
    write_line(f"Role {role['name']} (id {role['role_id']})")
    print_table(
        ["ID", "Permission", "Global only"],
        [
            [p["id"], p["name"], "yes" if not p["scope_type_mask"]["workspace"] else "no"]
            for p in role["permissions"]
        ],
    )
    return 0


def _holder_rows(answer: dict[str, Any], key: str, names: dict[int, str]) -> list[list[Any]]:
    rows = []
    for entry in answer["roles"]:
        for a in entry[key]:
            via = a.get("via_group")
            rows.append(
                [
                    entry["role"]["name"],
                    _scope(a["role_assignment"], names),
                    f"group {via['name']}" if via else "directly",
                ]
            )
    return rows


def _list_users_roles(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        u = _teams.user(session, args.username)
        answer = session.get_json(f"/roles/search/by-user/{u['id']}")
        names = _workspace_names(session)
    if args.json:
        print_json(answer)
        return 0
    print_table(["Role", "Where", "How"], _holder_rows(answer, "user_role_assignments", names))
    return 0


def _list_groups_roles(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        g = _teams.group(session, args.group_name)
        answer = session.get_json(f"/roles/search/by-group/{g['group_id']}")
        names = _workspace_names(session)
    if args.json:
        print_json(answer)
        return 0
    print_table(["Role", "Where", "How"], _holder_rows(answer, "group_role_assignments", names))
    return 0


def _assign(add: bool):
    def run(args: argparse.Namespace) -> int:
        if (args.username_to_assign is None) == (args.group_name_to_assign is None):
            exit_with_error(
                "give exactly one of -u/--username-to-assign and -g/--group-name-to-assign"
            )
        with open_session(args) as session:
            role = _teams.role(session, args.role_name)
            assignment: dict[str, Any] = {"role": {"role_id": role["role_id"]}}
            where = "the cluster"
            if args.workspace_name:
                ws = _teams.workspace(session, args.workspace_name)
                assignment["scope_workspace_id"] = ws["id"]
                where = f"workspace '{ws['name']}'"
            else:
                assignment["scope_cluster"] = True
            body: dict[str, Any] = {"group_role_assignments": [], "user_role_assignments": []}
            if args.username_to_assign:
                u = _teams.user(session, args.username_to_assign)
                body["user_role_assignments"].append(
                    {"user_id": u["id"], "role_assignment": assignment}
                )
                who = f"user '{u['username']}'"
            else:
                g = _teams.group(session, args.group_name_to_assign)
                body["group_role_assignments"].append(
                    {"group_id": g["group_id"], "role_assignment": assignment}
                )
                who = f"group '{g['name']}'"
            path = "/roles/add-assignments" if add else "/roles/remove-assignments"
            session.post_json(path, body)
        if add:
            write_line(f"Assigned role {role['name']} to {who} on {where}.")
        else:
            write_line(f"Removed role {role['name']} from {who} on {where}.")
        return 0

    return run


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``rbac`` command group."""
    group = subparsers.add_parser("rbac", help="roles and role assignments", parents=[common])
    sub = group.add_subparsers(dest="rbac_command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "my-permissions", help="your roles and where you hold them", parents=[common]
    )
    add_json_flag(p)
    p.set_defaults(func=_my_permissions)

    p = sub.add_parser("list-roles", help="list roles", parents=[common])
    p.add_argument("--exclude-global-roles", action="store_true", help="only workspace roles")
    p.add_argument("--limit", type=int, default=200, help="at most this many")
    p.add_argument("--offset", type=int, default=0, help="skip this many first")
    p.add_argument("--pages", choices=("all", "1"), default="all", help="fetch every page, or one")
    add_json_flag(p)
    p.set_defaults(func=_list_roles)

    p = sub.add_parser("describe-role", help="a role's permissions", parents=[common])
    p.add_argument("role_name", metavar="ROLE")
    add_json_flag(p)
    p.set_defaults(func=_describe_role)

    p = sub.add_parser("list-users-roles", help="a user's roles", parents=[common])
    p.add_argument("username", metavar="USERNAME")
    add_json_flag(p)
    p.set_defaults(func=_list_users_roles)

    p = sub.add_parser("list-groups-roles", help="a group's roles", parents=[common])
    p.add_argument("group_name", metavar="GROUP")
    add_json_flag(p)
    p.set_defaults(func=_list_groups_roles)

    for name, add, help_text in (
        ("assign-role", True, "give a role to a user or group, on a workspace or the cluster"),
        ("unassign-role", False, "take a role back"),
    ):
        # Not the common options: -u here is the user to assign, as in Determined (give
        # -m/-u of the caller before the command: det -u admin rbac assign-role ...).
        p = sub.add_parser(name, help=help_text)
        p.add_argument("role_name", metavar="ROLE")
        p.add_argument("-w", "--workspace-name", help="on this workspace (default: the cluster)")
        p.add_argument("-u", "--username-to-assign", help="the user")
        p.add_argument("-g", "--group-name-to-assign", help="the group")
        p.set_defaults(func=_assign(add))
