"""``det template|tpl``: config templates (Determined's commands and flags, reference
§6.1): ``list [-d]``, ``describe NAME``, ``create NAME FILE [-w WORKSPACE]``,
``set NAME FILE`` (create or replace), ``set-value config NAME FILE`` (Determined's
spelling of the same), ``remove|rm NAME``.

A template's config is merged under an experiment's or a task's config when it is
submitted with ``--template NAME`` (``det e create``, ``det cmd run`` ...).
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

import yaml

from dauntless.config import MAX_TEXT_BYTES, LimitError, load_yaml

from . import _teams
from ._util import add_json_flag, exit_with_error, open_session, print_json, print_table, write_line


def _path(name: str) -> str:
    return f"/templates/{quote(name, safe='')}"


def _read_config(path: str) -> dict[str, Any]:
    """The mapping in YAML file ``path``.

    Raises:
        SystemExit: (1) unreadable, over the parsing limits, or not a mapping.
    """
    try:
        with open(path, "rb") as f:
            loaded = load_yaml(f.read(MAX_TEXT_BYTES + 1))
    except (OSError, LimitError) as exc:
        exit_with_error(f"cannot read template file {path}: {exc}")
    if not isinstance(loaded, dict):
        exit_with_error(f"template file {path} must hold a mapping")
    return loaded


def _workspace_names(session: Any) -> dict[int, str]:
    return {w["id"]: w["name"] for w in session.get_json("/workspaces")["workspaces"]}


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        answer = session.get_json("/templates")
        names = _workspace_names(session)
    if args.json:
        print_json(answer)
        return 0
    columns = ["Name", "Workspace"] + (["Config"] if args.details else [])
    rows = [
        [t["name"], names.get(t["workspace_id"], str(t["workspace_id"]))]
        + ([yaml.safe_dump(t["config"], sort_keys=False).strip()] if args.details else [])
        for t in answer["templates"]
    ]
    print_table(columns, rows)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        t = _teams.call(session, "GET", _path(args.template_name))["template"]
    if args.json:
        print_json(t)
        return 0
    write_line(yaml.safe_dump(t["config"], sort_keys=False).rstrip())
    return 0


def _store(replace: bool):
    def run(args: argparse.Namespace) -> int:
        config = _read_config(args.template_file)
        with open_session(args) as session:
            body: dict[str, Any] = {"name": args.template_name, "config": config}
            ws = _teams.workspace_id(session, getattr(args, "workspace_name", None))
            if ws is None and replace:  # set keeps an existing template's workspace
                found = session.get_json("/templates", {"name": args.template_name})["templates"]
                ws = next(
                    (t["workspace_id"] for t in found if t["name"] == args.template_name), None
                )
            if ws is not None:
                body["workspace_id"] = ws
            method = "PUT" if replace else "POST"
            t = _teams.call(session, method, _path(args.template_name), body)["template"]
        verb = "Set" if replace else "Created"
        write_line(f"{verb} template {t['name']}.")
        return 0

    return run


def _remove(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        _teams.call(session, "DELETE", _path(args.template_name))
    write_line(f"Removed template {args.template_name}.")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``template`` (alias ``tpl``) command group."""
    group = subparsers.add_parser(
        "template", aliases=["tpl"], help="manage config templates", parents=[common]
    )
    sub = group.add_subparsers(dest="template_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", aliases=["ls"], help="list templates", parents=[common])
    p.add_argument("-d", "--details", action="store_true", help="show each template's config")
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("describe", help="print a template's config", parents=[common])
    p.add_argument("template_name", metavar="NAME")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("create", help="create a template from a YAML file", parents=[common])
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("template_file", metavar="FILE")
    p.add_argument("-w", "--workspace-name", metavar="WORKSPACE", help="default: Uncategorized")
    p.set_defaults(func=_store(False))

    p = sub.add_parser("set", help="create or replace a template", parents=[common])
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("template_file", metavar="FILE")
    p.add_argument("-w", "--workspace-name", metavar="WORKSPACE", help="move it there too")
    p.set_defaults(func=_store(True))

    p = sub.add_parser("set-value", help="set a template's value", parents=[common])
    what = p.add_subparsers(dest="template_value", metavar="VALUE", required=True)
    q = what.add_parser("config", help="replace a template's config", parents=[common])
    q.add_argument("template_name", metavar="NAME")
    q.add_argument("template_file", metavar="FILE")
    q.set_defaults(func=_store(True))

    p = sub.add_parser("remove", aliases=["rm"], help="delete a template", parents=[common])
    p.add_argument("template_name", metavar="NAME")
    p.set_defaults(func=_remove)
