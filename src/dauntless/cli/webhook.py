"""``det webhook``: webhooks (reference §6.3; issue 31 scope 6): ``create NAME URL``
with its triggers, ``list``, ``delete ID``, ``test ID`` (sends a test event now) and
``events ID`` (the delivery log).

Triggers: ``--trigger STATE`` (an experiment entering STATE, e.g. COMPLETED or ERROR;
repeatable), ``--log-regex REGEX`` (a trial log line matching REGEX, once per trial;
repeatable), ``--custom`` (``core_context.alert``; needs ``--specific``).
"""

from __future__ import annotations

import argparse
from typing import Any

from . import _teams
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

_TRIGGER_NAMES = {
    "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE": "state",
    "TRIGGER_TYPE_TASK_LOG": "log",
    "TRIGGER_TYPE_CUSTOM": "custom",
}


def _triggers(args: argparse.Namespace) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"trigger_type": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", "condition": {"state": s.upper()}}
        for s in args.trigger or []
    ]
    out += [
        {"trigger_type": "TRIGGER_TYPE_TASK_LOG", "condition": {"regex": r}}
        for r in args.log_regex or []
    ]
    if args.custom:
        out.append({"trigger_type": "TRIGGER_TYPE_CUSTOM", "condition": {}})
    if not out:
        exit_with_error("give at least one trigger: --trigger STATE, --log-regex R or --custom")
    return out


def _describe_trigger(t: dict[str, Any]) -> str:
    kind = _TRIGGER_NAMES.get(t["trigger_type"], t["trigger_type"])
    cond = t.get("condition") or {}
    return (
        f"{kind}:{cond['state']}"
        if "state" in cond
        else (f"{kind}:{cond['regex']}" if "regex" in cond else kind)
    )


def _create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "name": args.name,
        "url": args.url,
        "webhook_type": f"WEBHOOK_TYPE_{args.type.upper()}",
        "mode": "WEBHOOK_MODE_SPECIFIC" if args.specific else "WEBHOOK_MODE_WORKSPACE",
        "triggers": _triggers(args),
    }
    with open_session(args) as session:
        ws = _teams.workspace_id(session, args.workspace_name)
        if ws is not None:
            body["workspace_id"] = ws
        hook = _teams.call(session, "POST", "/webhooks", body)["webhook"]
    if args.json:
        print_json(hook)
        return 0
    write_line(f"Created webhook {hook['id']} ({hook['name']}).")
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        hooks = session.get_json("/webhooks")["webhooks"]
        names = {w["id"]: w["name"] for w in session.get_json("/workspaces")["workspaces"]}
    if args.json:
        print_json({"webhooks": hooks})
        return 0
    rows = [
        [
            str(h["id"]),
            h["name"],
            h["url"],
            h["webhook_type"].removeprefix("WEBHOOK_TYPE_").lower(),
            names.get(h["workspace_id"], "(global)") if h["workspace_id"] else "(global)",
            h["mode"].removeprefix("WEBHOOK_MODE_").lower(),
            ", ".join(_describe_trigger(t) for t in h["triggers"]),
        ]
        for h in hooks
    ]
    print_table(["ID", "Name", "URL", "Type", "Workspace", "Mode", "Triggers"], rows)
    return 0


def _delete(args: argparse.Namespace) -> int:
    if not _teams.confirm(
        args.yes, f"Delete webhook {args.webhook_id}?", f"deleting webhook {args.webhook_id}"
    ):
        write_line("Not deleted.")
        return 1
    with open_session(args) as session:
        _teams.call(session, "DELETE", f"/webhooks/{args.webhook_id}")
    write_line(f"Deleted webhook {args.webhook_id}.")
    return 0


def _test(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        _teams.call(session, "POST", f"/webhooks/{args.webhook_id}/test")
    write_line(f"Webhook {args.webhook_id} answered the test event.")
    return 0


def _events(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        events = session.get_json(f"/webhooks/{args.webhook_id}/events", {"limit": args.limit})
    if args.json:
        print_json(events)
        return 0
    rows = [
        [
            str(e["id"]),
            e["event_type"],
            e["state"],
            str(e["attempts"]),
            fmt_time(e["created_at"]),
            fmt_time(e["delivered_at"]),
            str(e["last_status"] or "") or (e["last_error"] or "")[:60],
        ]
        for e in events["events"]
    ]
    print_table(["ID", "Event", "State", "Tries", "Queued", "Delivered", "Last answer"], rows)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``webhook`` command group."""
    group = subparsers.add_parser("webhook", help="manage webhooks", parents=[common])
    sub = group.add_subparsers(dest="webhook_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a webhook", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("url", metavar="URL")
    p.add_argument("--type", choices=("default", "slack"), default="default", help="payload form")
    p.add_argument("--trigger", metavar="STATE", action="append", help="an experiment state")
    p.add_argument("--log-regex", metavar="REGEX", action="append", help="a trial log regex")
    p.add_argument("--custom", action="store_true", help="custom alerts (core_context.alert)")
    p.add_argument(
        "--specific",
        action="store_true",
        help="only experiments naming it in integrations.webhooks (default: all of the workspace)",
    )
    p.add_argument("-w", "--workspace-name", metavar="WORKSPACE", help="default: global")
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser("list", aliases=["ls"], help="list webhooks", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("delete", help="delete a webhook", parents=[common])
    p.add_argument("webhook_id", metavar="ID", type=positive_int)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_delete)

    p = sub.add_parser("test", help="send a test event now", parents=[common])
    p.add_argument("webhook_id", metavar="ID", type=positive_int)
    p.set_defaults(func=_test)

    p = sub.add_parser("events", help="a webhook's delivery log", parents=[common])
    p.add_argument("webhook_id", metavar="ID", type=positive_int)
    p.add_argument("--limit", type=positive_int, default=50, help="newest N (default 50)")
    add_json_flag(p)
    p.set_defaults(func=_events)
