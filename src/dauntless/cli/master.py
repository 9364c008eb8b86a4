"""``det master``: information about the master, its logs and its config (issue 34)."""

from __future__ import annotations

import argparse
import datetime as _dt
import time
from typing import Any

import yaml

from . import _util
from ._util import add_json_flag, exit_with_error, open_session, print_fields, print_json


def _info(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        info = session.master_info()
        url = session.master_url
    if args.json:
        print_json(info)
        return 0
    print_fields(
        [
            ("Master URL", url),
            ("Version", info.get("version")),
            ("Cluster name", info.get("cluster_name")),
            ("Cluster ID", info.get("cluster_id")),
        ]
    )
    return 0


def _print_line(line: dict[str, Any]) -> None:
    at = _dt.datetime.fromtimestamp(line["timestamp"], tz=_dt.timezone.utc)
    print(f"{at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')} [{line['level']}] {line['message']}", flush=True)


def _logs(args: argparse.Namespace) -> int:
    """Print the master's recent log lines; with ``-f`` keep printing new ones."""
    with open_session(args) as session:
        params: dict[str, Any] = {"limit": 10_000}
        if args.tail is not None:
            params["offset"] = -args.tail
        lines = session.get_json("/master/logs", params)["logs"]
        for line in lines:
            _print_line(line)
        if not args.follow:
            return 0
        last = lines[-1]["id"] if lines else 0
        if not lines and args.tail is not None:
            newest = session.get_json("/master/logs", {"offset": -1})["logs"]
            last = newest[-1]["id"] if newest else 0
        try:
            while True:
                time.sleep(_util.POLL_INTERVAL)
                lines = session.get_json("/master/logs", {"offset": last + 1, "limit": 10_000})[
                    "logs"
                ]
                for line in lines:
                    _print_line(line)
                if lines:
                    last = lines[-1]["id"]
        except KeyboardInterrupt:
            return 0


def _config_show(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        config = session.get_json("/master/config")["config"]
    if args.json:
        print_json(config)
    else:
        print(yaml.safe_dump(config, sort_keys=True), end="")
    return 0


def _config_set(args: argparse.Namespace) -> int:
    if args.log_level is None and not args.log_color:
        exit_with_error("nothing to set: give --log.level LEVEL")
    paths = []
    log: dict[str, Any] = {}
    if args.log_level is not None:
        paths.append("log.level")
        log["level"] = args.log_level
    if args.log_color:
        paths.append("log.color")
        log["color"] = True
    with open_session(args) as session:
        answer = session.request(
            "PATCH", "/master/config", json={"config": {"log": log}, "field_mask": {"paths": paths}}
        ).json()
    for warning in answer.get("warnings", []):
        print(f"warning: {warning}")
    print(f"log.level: {answer['config']['log']['level']}")
    return 0


def _message_get(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        message = session.get_json("/master/cluster_message")["clusterMessage"]
    if args.json:
        print_json(message)
    elif message is None:
        print("No cluster message.")
    else:
        end = message["endTime"] or "cleared"
        print(f"{message['message']}\n(from {message['startTime']} until {end})")
    return 0


def _message_set(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"message": args.message}
    if args.start is not None:
        body["start_time"] = args.start
    if args.end is not None:
        body["end_time"] = args.end
    if args.duration is not None:
        body["duration"] = args.duration
    with open_session(args) as session:
        session.show_cluster_message = False
        answer = session.request("PUT", "/master/cluster_message", json=body).json()
    message = answer["clusterMessage"]
    print(
        f"Cluster message set, from {message['startTime']} until {message['endTime'] or 'cleared'}"
    )
    return 0


def _message_clear(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        session.show_cluster_message = False
        session.request("DELETE", "/master/cluster_message")
    print("Cluster message cleared.")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``master`` command group."""
    group = subparsers.add_parser("master", help="inspect the master", parents=[common])
    sub = group.add_subparsers(dest="master_command", metavar="COMMAND", required=True)
    p = sub.add_parser("info", help="show the master's version and cluster", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_info)
    p = sub.add_parser("logs", help="print the master's recent log lines", parents=[common])
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("--tail", type=_util.positive_int, default=None, help="only the last N lines")
    p.set_defaults(func=_logs)
    p = sub.add_parser("config", help="show or change the master's config", parents=[common])
    csub = p.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    q = csub.add_parser("show", help="print the config (secrets redacted)", parents=[common])
    add_json_flag(q)
    q.add_argument("--yaml", action="store_true", help="YAML (the default)")
    q.set_defaults(func=_config_show)
    q = csub.add_parser("set", help="change what the master takes while it runs", parents=[common])
    q.add_argument(
        "--log.level",
        dest="log_level",
        choices=["debug", "info", "warning", "error"],
        help="the master's log level until it stops",
    )
    q.add_argument("--log.color", dest="log_color", action="store_true", help=argparse.SUPPRESS)
    q.set_defaults(func=_config_set)
    p = sub.add_parser(
        "cluster-message", help="the message every user sees (admins set it)", parents=[common]
    )
    msub = p.add_subparsers(dest="message_command", metavar="COMMAND", required=True)
    q = msub.add_parser("get", help="print the message showing now", parents=[common])
    add_json_flag(q)
    q.set_defaults(func=_message_get)
    # Not parents=[common]: -m is the message here, as in Determined (give the master's
    # address before the command: det -m URL master cluster-message set -m TEXT).
    q = msub.add_parser("set", help="show a message to every user")
    q.add_argument("-m", "--message", required=True, help="up to 250 characters")
    q.add_argument("-s", "--start", help="RFC 3339 start time (default now)")
    end = q.add_mutually_exclusive_group()
    end.add_argument("-e", "--end", help="RFC 3339 end time (default: until cleared)")
    end.add_argument("-d", "--duration", help="how long it shows, e.g. 2h or 30m")
    q.set_defaults(func=_message_set)
    q = msub.add_parser("clear", help="end the message", parents=[common])
    q.set_defaults(func=_message_clear)


__all__ = ["register"]
