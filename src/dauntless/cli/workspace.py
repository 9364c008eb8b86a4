"""``det workspace|w``: create, list, describe, edit, archive and delete workspaces, list
their projects, pools and members (Determined's commands and flags, reference §1.6)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import _teams
from ._util import (
    add_json_flag,
    exit_with_error,
    open_session,
    positive_int,
    print_fields,
    print_json,
    print_table,
    write_line,
)

WORKSPACE_COLUMNS = ("ID", "Name", "Archived", "Projects", "Experiments", "Owner", "Pinned")
PROJECT_COLUMNS = ("ID", "Name", "Key", "Description", "Experiments", "Active", "Archived")

_K8S = (
    "Kubernetes namespace bindings and resource quotas apply to Determined's Kubernetes "
    "resource manager; this master has none"
)


def workspace_row(w: dict[str, Any]) -> list[Any]:
    return [
        w["id"],
        w["name"],
        "yes" if w["archived"] else "no",
        w["num_projects"],
        w["num_experiments"],
        w.get("username") or "",
        "yes" if w.get("pinned") else "no",
    ]


def project_row(p: dict[str, Any]) -> list[Any]:
    return [
        p["id"],
        p["name"],
        p["key"],
        p["description"],
        p["num_experiments"],
        p["num_active_experiments"],
        "yes" if p["archived"] else "no",
    ]


def _order(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "sort_by": f"SORT_BY_{args.sort_by.upper()}",
        "order_by": f"ORDER_BY_{args.order_by.upper()}",
        "limit": args.limit,
        "offset": args.offset,
    }


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        answer = session.get_json("/workspaces", _order(args))
    if args.json:
        print_json(answer)
        return 0
    print_table(WORKSPACE_COLUMNS, [workspace_row(w) for w in answer["workspaces"]])
    return 0


def _storage(args: argparse.Namespace) -> dict[str, Any] | None:
    text = args.checkpoint_storage_config
    if args.checkpoint_storage_config_file:
        if text is not None:
            exit_with_error(
                "give --checkpoint-storage-config or --checkpoint-storage-config-file, not both"
            )
        try:
            with open(args.checkpoint_storage_config_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            exit_with_error(f"cannot read {args.checkpoint_storage_config_file}: {exc}")
    if text is None:
        return None
    from dauntless.config import LimitError, load_yaml

    try:
        value = load_yaml(text, "checkpoint_storage_config")  # JSON is YAML too
    except LimitError as exc:
        exit_with_error(f"the checkpoint storage config is not usable JSON or YAML: {exc}")
    if value is None:
        return {}
    if not isinstance(value, dict):
        exit_with_error("the checkpoint storage config must be a mapping")
    return value


def _agent_user_group(args: argparse.Namespace) -> dict[str, Any] | None:
    group = {
        "agent_uid": args.agent_uid,
        "agent_gid": args.agent_gid,
        "agent_user": args.agent_user,
        "agent_group": args.agent_group,
    }
    group = {k: v for k, v in group.items() if v is not None}
    return group or None


def _refuse_k8s(args: argparse.Namespace) -> None:
    for flag in ("cluster_name", "namespace", "resource_quota"):
        if getattr(args, flag, None) is not None:
            exit_with_error(f"--{flag.replace('_', '-')}: {_K8S}")
    for flag in ("auto_create_namespace", "auto_create_namespace_all_clusters"):
        if getattr(args, flag, False):
            exit_with_error(f"--{flag.replace('_', '-')}: {_K8S}")


def _describe_one(w: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(w)
        return
    print_table(WORKSPACE_COLUMNS, [workspace_row(w)])
    extra = []
    if w.get("agent_user_group"):
        extra.append(("Agent user group", json.dumps(w["agent_user_group"])))
    if w.get("checkpoint_storage_config"):
        extra.append(("Checkpoint storage", json.dumps(w["checkpoint_storage_config"])))
    if w.get("default_compute_pool"):
        extra.append(("Default compute pool", w["default_compute_pool"]))
    if w.get("default_aux_pool"):
        extra.append(("Default aux pool", w["default_aux_pool"]))
    if extra:
        print_fields(extra)


def _create(args: argparse.Namespace) -> int:
    _refuse_k8s(args)
    body: dict[str, Any] = {"name": args.name}
    group = _agent_user_group(args)
    if group:
        body["agent_user_group"] = group
    storage = _storage(args)
    if storage:
        body["checkpoint_storage_config"] = storage
    if args.default_compute_pool:
        body["default_compute_pool"] = args.default_compute_pool
    if args.default_aux_pool:
        body["default_aux_pool"] = args.default_aux_pool
    with open_session(args) as session:
        w = session.post_json("/workspaces", body)["workspace"]
    if args.json:
        print_json(w)
        return 0
    write_line(f"Created workspace '{w['name']}' (id {w['id']}).")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        w = _teams.workspace(session, args.workspace_name)
    _describe_one(w, args.json)
    return 0


def _edit(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.name is not None:
        body["name"] = args.name
    group = _agent_user_group(args)
    if group:
        body["agent_user_group"] = group
    storage = _storage(args)
    if storage is not None:
        body["checkpoint_storage_config"] = storage
    if args.default_compute_pool is not None:
        body["default_compute_resource_pool"] = args.default_compute_pool
    if args.default_aux_pool is not None:
        body["default_aux_resource_pool"] = args.default_aux_pool
    if not body:
        exit_with_error(
            "nothing to change: give --name, an agent user flag, a checkpoint "
            "storage config or a default pool"
        )
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        w = _teams.call(session, "PATCH", f"/workspaces/{ws['id']}", body)["workspace"]
    if args.json:
        print_json(w)
        return 0
    write_line(f"Edited workspace '{w['name']}' (id {w['id']}).")
    return 0


def _action(verb: str):
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            ws = _teams.workspace(session, args.workspace_name)
            session.post_json(f"/workspaces/{ws['id']}/{verb}")
        write_line(f"{verb.capitalize()}d workspace '{ws['name']}'.")
        return 0

    return run


def _delete(args: argparse.Namespace) -> int:
    if not _teams.confirm(
        args.yes,
        f"Delete workspace '{args.workspace_name}' and its empty projects?",
        f"deleting workspace {args.workspace_name!r} deletes its projects",
    ):
        write_line("Not deleted.")
        return 1
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        _teams.call(session, "DELETE", f"/workspaces/{ws['id']}")
    write_line(f"Deleted workspace '{ws['name']}'.")
    return 0


def _list_projects(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        answer = session.get_json(f"/workspaces/{ws['id']}/projects", _order(args))
    if args.json:
        print_json(answer)
        return 0
    print_table(PROJECT_COLUMNS, [project_row(p) for p in answer["projects"]])
    return 0


def _list_pools(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        pools = session.get_json(f"/workspaces/{ws['id']}/available-resource-pools")
    if getattr(args, "json", False):
        print_json(pools)
        return 0
    print_table(["Resource pool"], [[p] for p in pools["resource_pools"]])
    return 0


def _list_members(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ws = _teams.workspace(session, args.workspace_name)
        members = session.get_json(f"/roles/workspace/{ws['id']}")
        roles = {r["role_id"]: r["name"] for r in session.post_json("/roles/search", {})["roles"]}
    users = {u["id"]: u["username"] for u in members["users_assigned_directly"]}
    groups = {g["group_id"]: g["name"] for g in members["groups"]}
    rows = []
    for a in members["assignments"]:
        if "user_id" in a:
            rows.append(
                ["user", users.get(a["user_id"], a["user_id"]), roles.get(a["role"]["role_id"])]
            )
        else:
            rows.append(
                ["group", groups.get(a["group_id"], a["group_id"]), roles.get(a["role"]["role_id"])]
            )
    if args.json:
        print_json(members)
    elif args.yaml:
        import yaml

        write_line(yaml.safe_dump(members, sort_keys=False).rstrip())
    elif args.csv:
        write_line("kind,name,role")
        for row in rows:
            write_line(",".join(str(x) for x in row))
    else:
        print_table(["Kind", "Name", "Role"], rows)
    return 0


def _k8s(args: argparse.Namespace) -> int:
    exit_with_error(_K8S)


def _agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-uid", type=int, help="uid tasks of this workspace run as")
    p.add_argument("--agent-user", help="user name tasks of this workspace run as")
    p.add_argument("--agent-gid", type=int, help="gid tasks of this workspace run as")
    p.add_argument("--agent-group", help="group name tasks of this workspace run as")
    p.add_argument(
        "--checkpoint-storage-config", metavar="JSON", help="checkpoint storage (JSON or YAML)"
    )
    p.add_argument("--checkpoint-storage-config-file", metavar="FILE", help="the same, from a file")
    p.add_argument("--default-compute-pool", metavar="POOL", help="pool of tasks with slots")
    p.add_argument("--default-aux-pool", metavar="POOL", help="pool of tasks without slots")


def _order_flags(p: argparse.ArgumentParser, sorts: tuple[str, ...]) -> None:
    p.add_argument("--sort-by", choices=sorts, default="id", help="sort by (default: id)")
    p.add_argument("--order-by", choices=("asc", "desc"), default="asc", help="order")
    p.add_argument("--limit", type=positive_int, default=200, help="at most this many")
    p.add_argument("--offset", type=int, default=0, help="skip this many first")


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``workspace`` (alias ``w``) command group."""
    group = subparsers.add_parser(
        "workspace", aliases=["w"], help="manage workspaces", parents=[common]
    )
    sub = group.add_subparsers(dest="workspace_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", aliases=["ls"], help="list workspaces", parents=[common])
    _order_flags(p, ("id", "name"))
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("create", help="create a workspace", parents=[common])
    p.add_argument("name", metavar="NAME")
    _agent_flags(p)
    p.add_argument("--cluster-name", help="(Kubernetes only: refused)")
    p.add_argument("-n", "--namespace", help="(Kubernetes only: refused)")
    p.add_argument("--auto-create-namespace", action="store_true", help="(Kubernetes only)")
    p.add_argument(
        "--auto-create-namespace-all-clusters", action="store_true", help="(Kubernetes only)"
    )
    p.add_argument("--resource-quota", help="(Kubernetes only: refused)")
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser("describe", help="describe a workspace", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("edit", help="rename a workspace or change its defaults", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.add_argument("--name", help="new name")
    _agent_flags(p)
    add_json_flag(p)
    p.set_defaults(func=_edit)

    for verb, help_text in (
        ("archive", "archive a workspace (no new projects or experiments)"),
        ("unarchive", "unarchive a workspace"),
    ):
        p = sub.add_parser(verb, help=help_text, parents=[common])
        p.add_argument("workspace_name", metavar="WORKSPACE")
        p.set_defaults(func=_action(verb))

    p = sub.add_parser("delete", help="delete an empty workspace", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser("list-projects", help="list a workspace's projects", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    _order_flags(p, ("id", "name", "description", "creation_time"))
    add_json_flag(p)
    p.set_defaults(func=_list_projects)

    p = sub.add_parser("list-pools", help="list the pools a workspace may use", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    p.set_defaults(func=_list_pools)

    p = sub.add_parser("list-members", help="list who holds roles on it", parents=[common])
    p.add_argument("workspace_name", metavar="WORKSPACE")
    add_json_flag(p)
    p.add_argument("--yaml", action="store_true", help="print YAML")
    p.add_argument("--csv", action="store_true", help="print CSV")
    p.set_defaults(func=_list_members)

    p = sub.add_parser(
        "bindings", help="(Kubernetes namespace bindings: refused)", parents=[common]
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_k8s)
    p = sub.add_parser("resource-quota", help="(Kubernetes quotas: refused)", parents=[common])
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_k8s)
