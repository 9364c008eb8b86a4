"""``det model|m``: the model registry (Determined's commands and flags, reference
``determined-surface-platform.md`` §4.4): create, list, describe, register-version,
list-versions, move, delete, and this project's delete-version, edit, archive,
unarchive and metadata edits. Every command goes through :class:`dauntless.client.Registry`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import _teams
from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_time,
    open_session,
    print_fields,
    print_json,
    print_table,
    write_line,
)

MODEL_COLUMNS = ("ID", "Name", "Description", "Labels", "Versions", "Workspace", "Archived",
                 "Owner", "Last updated")  # fmt: skip
VERSION_COLUMNS = ("Version", "Name", "Checkpoint", "Trial", "Batches", "Labels", "Comment",
                   "Created")  # fmt: skip


def model_row(m: dict[str, Any]) -> list[Any]:
    return [
        m["id"],
        m["name"],
        m["description"],
        ", ".join(m["labels"]),
        m["num_versions"],
        m["workspace_id"],
        "yes" if m["archived"] else "no",
        m.get("username") or "",
        fmt_time(m["last_updated_time"]),
    ]


def version_row(v: dict[str, Any]) -> list[Any]:
    c = v["checkpoint"]
    return [
        v["model_version"],
        v["name"],
        c["uuid"],
        c["trial_id"],
        c["total_batches"],
        ", ".join(v["labels"]),
        v["comment"],
        fmt_time(v["creation_time"]),
    ]


def _registry(args: argparse.Namespace) -> Any:
    from dauntless.client import Registry

    return Registry(open_session(args))


def _json_object(text: str, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line.

    Raises:
        SystemExit: (1) not JSON, or not an object.
    """
    from dauntless.config import LimitError, load_json

    try:
        value = load_json(text, flag)
    except LimitError as exc:
        exit_with_error(f"{flag}: not usable JSON: {exc}")
    if not isinstance(value, dict):
        exit_with_error(f"{flag}: must be a JSON object")
    return value


def _create(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        model = reg.create_model(
            args.name,
            description=args.description or "",
            labels=args.label or [],
            metadata=_json_object(args.metadata, "--metadata") if args.metadata else None,
            workspace_name=args.workspace_name,
        )
    if args.json:
        print_json(model)
    else:
        write_line(f"Created model {model['name']!r} (id {model['id']})")
    return 0


def _list(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        models = reg.list_models(
            sort_by=args.sort_by,
            order_by=args.order_by,
            workspace_names=args.workspace_names.split(",") if args.workspace_names else None,
            archived=None if args.all else False,
        )
    if args.json:
        print_json({"models": models})
        return 0
    print_table(MODEL_COLUMNS, [model_row(m) for m in models])
    return 0


def _describe(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        model = reg.get_model(args.name)
        version = reg.get_version(model["id"], args.version)
    if args.json:
        print_json({"model": model, "model_version": version})
        return 0
    print_fields(
        [
            ("ID", model["id"]),
            ("Name", model["name"]),
            ("Description", model["description"]),
            ("Workspace", model["workspace_id"]),
            ("Labels", ", ".join(model["labels"])),
            ("Metadata", json.dumps(model["metadata"])),
            ("Versions", model["num_versions"]),
            ("Archived", "yes" if model["archived"] else "no"),
            ("Owner", model.get("username") or ""),
            ("Created", fmt_time(model["creation_time"])),
            ("Last updated", fmt_time(model["last_updated_time"])),
        ]
    )
    if version is not None:
        write_line("")
        print_table(VERSION_COLUMNS, [version_row(version)])
        write_line(f"Version metadata: {json.dumps(version['metadata'])}")
        write_line(f"Checkpoint metadata: {json.dumps(version['checkpoint']['metadata'])}")
    return 0


def _list_versions(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        model = reg.get_model(args.name)
        versions = reg.list_versions(model["id"])
    if args.json:
        print_json({"model": model, "model_versions": versions})
        return 0
    print_table(VERSION_COLUMNS, [version_row(v) for v in versions])
    return 0


def _register_version(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        version = reg.register_version(
            args.name,
            args.uuid,
            name=args.version_name or "",
            comment=args.comment or "",
            labels=args.label or [],
            metadata=_json_object(args.metadata, "--metadata") if args.metadata else None,
        )
    if args.json:
        print_json(version)
    else:
        write_line(
            f"Registered checkpoint {args.uuid} as version {version['model_version']} of "
            f"model {version['model_name']!r}"
        )
    return 0


def _move(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        ws = _teams.workspace(reg.session, args.workspace_name)
        reg.move_model(args.name, int(ws["id"]))
    write_line(f"Moved model {args.name!r} to workspace {ws['name']!r}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    question = f"Delete model {args.name!r} and all of its versions?"
    if not _teams.confirm(args.yes, question, f"deleting model {args.name!r}"):
        return 1
    reg = _registry(args)
    with reg.session:
        reg.delete_model(args.name)
    write_line(f"Deleted model {args.name!r}")
    return 0


def _delete_version(args: argparse.Namespace) -> int:
    question = f"Delete version {args.version} of model {args.name!r}?"
    what = f"deleting version {args.version} of model {args.name!r}"
    if not _teams.confirm(args.yes, question, what):
        return 1
    reg = _registry(args)
    with reg.session:
        reg.delete_version(args.name, args.version)
    write_line(f"Deleted version {args.version} of model {args.name!r}")
    return 0


def _edit(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {}
    if args.new_name is not None:
        fields["name"] = args.new_name
    if args.description is not None:
        fields["description"] = args.description
    if args.label is not None:
        fields["labels"] = args.label
    if args.notes is not None:
        fields["notes"] = args.notes
    if not fields:
        exit_with_error("nothing to change: give --name, --description, --label or --notes")
    reg = _registry(args)
    with reg.session:
        model = reg.patch_model(args.name, **fields)
    if args.json:
        print_json(model)
    else:
        write_line(f"Updated model {model['name']!r}")
    return 0


def _archive(archived: bool):
    def run(args: argparse.Namespace) -> int:
        reg = _registry(args)
        with reg.session:
            reg.archive_model(args.name, archived)
        write_line(f"{'Archived' if archived else 'Unarchived'} model {args.name!r}")
        return 0

    return run


def _metadata(args: argparse.Namespace) -> int:
    reg = _registry(args)
    with reg.session:
        if args.version is None:
            if args.metadata_command == "add":
                after = reg.add_model_metadata(args.name, _json_object(args.value, "METADATA"))
            else:
                after = reg.remove_model_metadata(args.name, args.keys)
        elif args.metadata_command == "add":
            value = _json_object(args.value, "METADATA")
            after = reg.add_version_metadata(args.name, args.version, value)
        else:
            after = reg.remove_version_metadata(args.name, args.version, args.keys)
    print_json(after)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``model`` (alias ``m``) command group."""
    group = subparsers.add_parser(
        "model", aliases=["m"], help="the model registry", parents=[common]
    )
    sub = group.add_subparsers(dest="model_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a model", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("-w", "--workspace-name", help="its workspace (default: Uncategorized)")
    p.add_argument("--description", help="a description")
    p.add_argument("--label", action="append", help="a label (repeat for more)")
    p.add_argument("--metadata", help="metadata, a JSON object")
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser("list", aliases=["ls"], help="list models", parents=[common])
    p.add_argument("-w", "--workspace-names", help="only these workspaces (comma-separated)")
    p.add_argument(
        "--sort-by",
        default="last_updated_time",
        choices=("name", "description", "creation_time", "last_updated_time"),
    )
    p.add_argument("--order-by", default="asc", choices=("asc", "desc"))
    p.add_argument("--all", action="store_true", help="include archived models")
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("describe", help="describe a model and one version", parents=[common])
    p.add_argument("name", metavar="NAME", help="its name or id")
    p.add_argument("--version", type=int, default=-1, help="the version (-1: the latest)")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("list-versions", help="list a model's versions", parents=[common])
    p.add_argument("name", metavar="NAME")
    add_json_flag(p)
    p.set_defaults(func=_list_versions)

    p = sub.add_parser(
        "register-version", help="register a checkpoint as the next version", parents=[common]
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("uuid", metavar="UUID", help="a COMPLETED checkpoint")
    p.add_argument("--version-name", help="the version's name")
    p.add_argument("--comment", help="a comment")
    p.add_argument("--label", action="append", help="a label (repeat for more)")
    p.add_argument("--metadata", help="metadata, a JSON object")
    add_json_flag(p)
    p.set_defaults(func=_register_version)

    p = sub.add_parser("move", help="move a model to another workspace", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("-w", "--workspace-name", required=True, help="the destination")
    p.set_defaults(func=_move)

    p = sub.add_parser("delete", help="delete a model and its versions", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser(
        "delete-version", help="delete a version (releases its checkpoint)", parents=[common]
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("version", metavar="VERSION", type=int)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete_version)

    p = sub.add_parser("edit", help="rename a model or change its description, labels, notes",
                       parents=[common])  # fmt: skip
    p.add_argument("name", metavar="NAME")
    p.add_argument("--name", dest="new_name", help="a new name")
    p.add_argument("--description", help="a new description")
    p.add_argument("--label", action="append", help="the labels (replace them; repeat)")
    p.add_argument("--notes", help="new notes (Markdown)")
    add_json_flag(p)
    p.set_defaults(func=_edit)

    for verb, flag in (("archive", True), ("unarchive", False)):
        p = sub.add_parser(verb, help=f"{verb} a model", parents=[common])
        p.add_argument("name", metavar="NAME")
        p.set_defaults(func=_archive(flag))

    p = sub.add_parser("metadata", help="add or remove model or version metadata",
                       parents=[common])  # fmt: skip
    msub = p.add_subparsers(dest="metadata_command", metavar="ACTION", required=True)
    q = msub.add_parser("add", help="merge a JSON object into the metadata", parents=[common])
    q.add_argument("name", metavar="NAME")
    q.add_argument("value", metavar="METADATA", help="a JSON object")
    q.add_argument("--version", type=int, help="a version's metadata instead of the model's")
    q.set_defaults(func=_metadata)
    q = msub.add_parser("remove", help="remove top-level keys", parents=[common])
    q.add_argument("name", metavar="NAME")
    q.add_argument("keys", metavar="KEY", nargs="+")
    q.add_argument("--version", type=int, help="a version's metadata instead of the model's")
    q.set_defaults(func=_metadata)
