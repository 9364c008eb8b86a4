"""``det project|p``: create, list, describe, edit, archive and delete projects, list
their experiments; and ``det experiment move`` (Determined's commands and flags,
reference §1.3 and appendix A)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _teams
from ._render import EXPERIMENT_COLUMNS, experiment_row
from ._util import (
    add_json_flag,
    open_session,
    positive_int,
    print_json,
    print_table,
    write_line,
)
from .workspace import PROJECT_COLUMNS, project_row


def _experiments(session: Any, project: dict[str, Any], args: argparse.Namespace) -> dict:
    params = {
        "project_id": project["id"],
        "archived": "all" if args.all else "false",
        "limit": args.limit,
        "offset": args.offset,
    }
    answer = session.get_json("/experiments", params)
    exps = answer["experiments"]
    if args.sort_by != "id" or args.order_by != "desc":
        exps.sort(key=lambda e: e.get(args.sort_by) or 0, reverse=args.order_by == "desc")
    return {"experiments": exps, "total": answer["total"]}


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        answer = session.get_json(
            f"/workspaces/{ws['id']}/projects",
            {
                "sort_by": f"SORT_BY_{args.sort_by.upper()}",
                "order_by": f"ORDER_BY_{args.order_by.upper()}",
                "limit": args.limit,
                "offset": args.offset,
            },
        )
    if args.json:
        print_json(answer)
        return 0
    print_table(PROJECT_COLUMNS, [project_row(p) for p in answer["projects"]])
    return 0


def _create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "description": args.description or ""}
    if args.key:
        body["key"] = args.key
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        p = session.post_json(f"/workspaces/{ws['id']}/projects", body)["project"]
    if args.json:
        print_json(p)
        return 0
    write_line(f"Created project '{p['name']}' (id {p['id']}, key {p['key']}) in '{ws['name']}'.")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        p = _teams.project(session, args.workspace_name, args.project_name)
        args.sort_by, args.order_by, args.limit, args.offset = "id", "desc", 200, 0
        exps = _experiments(session, p, args)
    if args.json:
        print_json({"project": p, **exps})
        return 0
    print_table(PROJECT_COLUMNS, [project_row(p)])
    write_line("")
    print_table(EXPERIMENT_COLUMNS, [experiment_row(e) for e in exps["experiments"]])
    return 0


def _edit(args: argparse.Namespace) -> int:
    body = {
        k: v
        for k, v in (
            ("name", args.new_name),
            ("description", args.description),
            ("key", args.key),
        )
        if v is not None
    }
    with open_session(args) as session:
        p = _teams.project(session, args.workspace_name, args.project_name)
        p = _teams.call(session, "PATCH", f"/projects/{p['id']}", body)["project"]
    if args.json:
        print_json(p)
        return 0
    write_line(f"Edited project '{p['name']}' (id {p['id']}).")
    return 0


def _action(verb: str):
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            p = _teams.project(session, args.workspace_name, args.project_name)
            session.post_json(f"/projects/{p['id']}/{verb}")
        write_line(f"{verb.capitalize()}d project '{p['name']}'.")
        return 0

    return run


def _delete(args: argparse.Namespace) -> int:
    if not _teams.confirm(
        args.yes,
        f"Delete project '{args.project_name}'?",
        f"deleting project {args.project_name!r} cannot be undone",
    ):
        write_line("Not deleted.")
        return 1
    with open_session(args) as session:
        p = _teams.project(session, args.workspace_name, args.project_name)
        _teams.call(session, "DELETE", f"/projects/{p['id']}")
    write_line(f"Deleted project '{p['name']}'.")
    return 0


def _list_experiments(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        p = _teams.project(session, args.workspace_name, args.project_name)
        exps = _experiments(session, p, args)
    if args.json:
        print_json(exps)
        return 0
    print_table(EXPERIMENT_COLUMNS, [experiment_row(e) for e in exps["experiments"]])
    return 0


def _move_experiment(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        p = _teams.project(session, args.workspace_name, args.project_name)
        session.post_json(
            f"/experiments/{args.experiment_id}/move", {"destination_project_id": p["id"]}
        )
    write_line(
        f"Moved experiment {args.experiment_id} to project '{p['name']}' of workspace "
        f"'{p['workspace_name']}'."
    )
    return 0


def register_experiment_move(sub: Any, common: argparse.ArgumentParser) -> None:
    """``det experiment move ID WORKSPACE PROJECT``."""
    p = sub.add_parser("move", help="move an experiment to another project", parents=[common])
    p.add_argument("experiment_id", metavar="ID", type=positive_int, help="experiment ID")
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.add_argument("project_name", metavar="PROJECT")
    p.set_defaults(func=_move_experiment)


def _two(p: argparse.ArgumentParser) -> None:
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.add_argument("project_name", metavar="PROJECT")


def _order_flags(p: argparse.ArgumentParser, sorts: tuple[str, ...]) -> None:
    p.add_argument("--sort-by", choices=sorts, default="id", help="sort by (default: id)")
    p.add_argument("--order-by", choices=("asc", "desc"), default="asc", help="order")
    p.add_argument("--limit", type=positive_int, default=200, help="at most this many")
    p.add_argument("--offset", type=int, default=0, help="skip this many first")


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``project`` (alias ``p``) command group."""
    group = subparsers.add_parser(
        "project", aliases=["p"], help="manage projects", parents=[common]
    )
    sub = group.add_subparsers(dest="project_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", aliases=["ls"], help="list a workspace's projects", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    _order_flags(p, ("id", "name", "description", "creation_time"))
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("create", help="create a project", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--description", help="what it is for")
    p.add_argument("--key", help="1-5 letters or digits (default: made from the name)")
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser("describe", help="describe a project and its experiments", parents=[common])
    _two(p)
    p.add_argument("-a", "--all", action="store_true", help="include archived experiments")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser(
        "edit", help="rename a project or set its description or key", parents=[common]
    )
    _two(p)
    p.add_argument("--new_name", "--new-name", dest="new_name", help="new name")
    p.add_argument("--description", help="new description")
    p.add_argument("--key", help="new key")
    add_json_flag(p)
    p.set_defaults(func=_edit)

    for verb, help_text in (
        ("archive", "archive a project (no new experiments)"),
        ("unarchive", "unarchive a project"),
    ):
        p = sub.add_parser(verb, help=help_text, parents=[common])
        _two(p)
        p.set_defaults(func=_action(verb))

    p = sub.add_parser("delete", help="delete a project without experiments", parents=[common])
    _two(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser("list-experiments", help="list a project's experiments", parents=[common])
    _two(p)
    p.add_argument("-a", "--all", action="store_true", help="include archived experiments")
    _order_flags(p, ("id", "name", "state", "start_time"))
    add_json_flag(p)
    p.set_defaults(func=_list_experiments)
