"""What ``det cmd|notebook|shell|tensorboard|task`` share: starting a task, listing,
killing, printing logs and configs, waiting for a service and opening it."""

from __future__ import annotations

import argparse
import json
import os
import time
import webbrowser
from collections.abc import Iterator
from typing import Any

import httpx
import yaml

from dauntless.client import Session, build_context_tarball
from dauntless.config import MAX_TEXT_BYTES, LimitError, load_yaml

from . import _util
from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_time,
    note,
    open_session,
    print_json,
    print_table,
    write_line,
)

TERMINAL = frozenset({"COMPLETED", "ERROR", "CANCELED"})
"""Task states that never change again."""


# ---------------------------------------------------------------------- config


def parse_override(text: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` of ``--config``: a dotted key and a YAML value
    (``resources.slots=0`` gives ``(["resources", "slots"], 0)``).

    Raises:
        argparse.ArgumentTypeError: without ``=`` or with an empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(not p for p in key.split(".")):
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. resources.slots=0), got {text!r}"
        )
    try:
        parsed = load_yaml(value, key.strip()) if value.strip() else ""
    except LimitError as exc:
        if not exc.detail.startswith("not valid YAML"):
            raise argparse.ArgumentTypeError(str(exc)) from None
        parsed = value  # not YAML: the text itself
    return key.strip().split("."), parsed


def _context_or_override(text: str) -> tuple[str, Any]:
    """``-c``: a context directory (Determined's ``-c/--context``) when ``text`` is an
    existing directory, else a ``KEY=VALUE`` config override."""
    if os.path.isdir(text) or "=" not in text:
        return ("context", text)
    return ("config", parse_override(text))


def add_start_options(p: argparse.ArgumentParser, context: bool = True) -> None:
    """``--config-file``, ``--config KEY=VALUE``, ``-c DIR|KEY=VALUE``, ``--context``,
    ``-d/--detach``."""
    p.add_argument("--config-file", metavar="FILE", help="task config (YAML)")
    p.add_argument(
        "--config",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        type=parse_override,
        default=[],
        help="set one config field (dotted key, YAML value), e.g. resources.slots=0",
    )
    if context:
        p.add_argument(
            "--context", metavar="DIR", help="directory uploaded as the task's working directory"
        )
        p.add_argument(
            "-c",
            dest="c_args",
            metavar="DIR|KEY=VALUE",
            action="append",
            type=_context_or_override,
            default=[],
            help="a context directory (as Determined's -c), or KEY=VALUE as --config",
        )
    p.add_argument(
        "-d", "--detach", action="store_true", help="print the task's id and return at once"
    )
    p.add_argument(
        "-w", "--workspace-name", metavar="WORKSPACE", help="its workspace (default: Uncategorized)"
    )
    p.add_argument(
        "--template",
        metavar="NAME",
        help="a config template merged under the config (det template)",
    )


def build_config(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The task config of ``--config-file`` with the overrides applied, and the context
    directory (or None).

    Raises:
        SystemExit: (1) an unreadable or non-mapping config file, two context dirs.
    """
    config: dict[str, Any] = {}
    if args.config_file:
        try:
            with open(args.config_file, "rb") as f:
                loaded = load_yaml(f.read(MAX_TEXT_BYTES + 1))
        except (OSError, LimitError) as exc:
            exit_with_error(f"cannot read --config-file {args.config_file}: {exc}")
        if loaded is not None and not isinstance(loaded, dict):
            exit_with_error(f"--config-file {args.config_file} must hold a mapping")
        config = loaded or {}
    overrides = list(getattr(args, "overrides", []))
    contexts = [getattr(args, "context", None)] if getattr(args, "context", None) else []
    for kind, value in getattr(args, "c_args", []):
        if kind == "context":
            contexts.append(value)
        else:
            overrides.append(value)
    for keys, value in overrides:
        node = config
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
    if len(contexts) > 1:
        exit_with_error(f"give one context directory, not {contexts}")
    return config, (contexts[0] if contexts else None)


def create_task(
    session: Session,
    family: str,
    config: dict[str, Any],
    context_dir: str | None = None,
    workspace: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """``POST /api/v1/{family}`` with the form of docs/protocol.md; prints warnings.

    Args:
        workspace: the name of the task's workspace (None: Uncategorized).
        fields: more form fields, each sent as JSON; ``template_name`` (a config
            template's name, or None) is sent as text.

    Returns:
        The master's answer (``task``, ``warnings``, ``reused``).
    """
    parts: dict[str, Any] = {"config": (None, yaml.safe_dump(config, sort_keys=False))}
    if workspace is not None:
        from ._teams import workspace_id

        parts["workspace_id"] = (None, str(workspace_id(session, workspace)))
    template = fields.pop("template_name", None)
    if template:
        parts["template_name"] = (None, str(template))
    for name, value in fields.items():
        parts[name] = (None, json.dumps(value))
    if context_dir is not None:
        data = build_context_tarball(context_dir)
        parts["context"] = ("context.tar.gz", data, "application/gzip")
    r = session.request(
        "POST",
        f"/{family}",
        files=parts,
        timeout=httpx.Timeout(session.timeout, write=session.upload_timeout),
    )
    answer = r.json()
    for w in answer.get("warnings", []):
        note(f"Warning: {w}")
    return answer


def iter_logs(session: Session, task_id: str, follow: bool) -> Iterator[dict[str, Any]]:
    """A task's log lines; with ``follow`` until the task has ended (and its last lines
    arrived)."""
    after = 0
    ended_polls = 0
    while True:
        answer = session.get_json(f"/tasks/{task_id}/logs", {"after_id": after, "limit": 1000})
        lines = answer["logs"]
        yield from lines
        if lines:
            after = lines[-1]["id"]
            continue
        if not follow:
            return
        if answer["task_state"] in TERMINAL:
            ended_polls += 1
            if ended_polls > 1:  # one more poll after the end: lines shipped late
                return
        time.sleep(_util.POLL_INTERVAL)


def wait_ready(session: Session, task_id: str, timeout: float = 300.0) -> dict[str, Any]:
    """Wait until a service task is ready; prints its state changes.

    Raises:
        SystemExit: (1) the task ended (its message and last log lines are printed), or
            it was not ready within ``timeout`` seconds.
    """
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        task = session.get_json(f"/tasks/{task_id}")["task"]
        if task["state"] != last:
            last = task["state"]
            note(f"Task {task_id} is {last}")
        if task["ready"]:
            return task
        if task["state"] in TERMINAL:
            tail = [ln["log"] for ln in iter_logs(session, task_id, follow=False)][-10:]
            for ln in tail:
                note(ln)
            exit_with_error(f"task {task_id} ended {task['state']}: {task.get('exit_message')}")
        time.sleep(_util.POLL_INTERVAL)
    exit_with_error(f"task {task_id} was not ready after {timeout:.0f} s (see det task logs)")


def service_url(session: Session, task: dict[str, Any], suffix: str = "") -> str:
    """The browser URL of a task's service through the master's proxy."""
    return session.master_url.rstrip("/") + f"/proxy/{task['id']}/" + suffix


def open_or_print(url: str, no_browser: bool) -> None:
    """Open ``url`` in a browser, or print it with ``--no-browser`` (or when none)."""
    if no_browser or not webbrowser.open(url):
        write_line(url)
    else:
        note(f"Opened {url} (sign in to the WebUI first if the browser asks)")


# ---------------------------------------------------------------------- shared commands


def _list(task_type: str | None):
    def run(args: argparse.Namespace) -> int:
        params: dict[str, Any] = {"type": task_type} if task_type else {}
        with open_session(args) as session:
            if getattr(args, "workspace_name", None):
                from ._teams import workspace_id

                params["workspace_id"] = workspace_id(session, args.workspace_name)
            tasks = session.get_json("/tasks", params)["tasks"]
            if not getattr(args, "all", True):
                me = session.whoami()["username"]
                tasks = [t for t in tasks if t["owner"] == me]
        if args.json:
            print_json({"tasks": tasks})
            return 0
        if getattr(args, "quiet", False):
            for t in tasks:
                write_line(t["id"])
            return 0
        print_table(
            ["ID", "Type", "Owner", "Description", "State", "Pool", "Slots", "Agent", "Started"],
            [
                [
                    t["id"],
                    t["type"],
                    t["owner"],
                    t["description"],
                    t["state"],
                    t["resource_pool"],
                    t["slots"],
                    t["agent_id"] or "",
                    fmt_time(t["start_time"]),
                ]
                for t in tasks
            ],
        )
        return 0

    return run


def _kill(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        for task_id in args.task_ids:
            task = session.post_json(f"/tasks/{task_id}/kill")["task"]
            write_line(f"Killed task {task_id} ({task['state']})")
    return 0


def _logs(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        for line in iter_logs(session, args.task_id, args.follow):
            write_line(json.dumps(line) if args.json else str(line["log"]))
    return 0


def _config(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        task = session.get_json(f"/tasks/{args.task_id}")["task"]
    if getattr(args, "json", False):
        print_json(task["config"])
    else:
        write_line(yaml.safe_dump(task["config"], sort_keys=False).rstrip())
    return 0


def _open(suffix: str):
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            task = wait_ready(session, args.task_id)
            open_or_print(service_url(session, task, suffix), getattr(args, "no_browser", False))
        return 0

    return run


def register_common(
    sub: Any,
    common: argparse.ArgumentParser,
    noun: str,
    task_type: str | None,
    open_suffix: str | None = None,
    config_cmd: bool = True,
) -> None:
    """``list``, ``kill``, ``logs``, ``config`` (and ``open`` for services) of a group."""
    p = sub.add_parser("list", aliases=["ls"], help=f"list {noun}s", parents=[common])
    p.add_argument("-q", "--quiet", action="store_true", help="print only the ids")
    p.add_argument(
        "-a", "--all", action="store_true", default=True, help="every user's (the default)"
    )
    p.add_argument(
        "--mine", dest="all", action="store_false", help="only the ones of the signed-in user"
    )
    p.add_argument("-w", "--workspace-name", metavar="WORKSPACE", help="only this workspace's")
    add_json_flag(p)
    p.set_defaults(func=_list(task_type))

    p = sub.add_parser("kill", help=f"kill {noun}s", parents=[common])
    p.add_argument("task_ids", nargs="+", metavar="ID", help=f"{noun} id")
    p.set_defaults(func=_kill)

    p = sub.add_parser("logs", help=f"print a {noun}'s logs", parents=[common])
    p.add_argument("task_id", metavar="ID", help=f"{noun} id")
    p.add_argument("-f", "--follow", action="store_true", help="follow until it ends")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.set_defaults(func=_logs)

    if config_cmd:
        p = sub.add_parser("config", help=f"print a {noun}'s config", parents=[common])
        p.add_argument("task_id", metavar="ID", help=f"{noun} id")
        add_json_flag(p)
        p.set_defaults(func=_config)

    if open_suffix is not None:
        p = sub.add_parser("open", help=f"open a {noun} in a browser", parents=[common])
        p.add_argument("task_id", metavar="ID", help=f"{noun} id")
        p.add_argument("--no-browser", action="store_true", help="print the URL only")
        p.set_defaults(func=_open(open_suffix))
