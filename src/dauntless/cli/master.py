"""``det master``: information about the master."""

from __future__ import annotations

import argparse
from typing import Any

from ._util import add_json_flag, open_session, print_fields, print_json


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


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``master`` command group."""
    group = subparsers.add_parser("master", help="inspect the master", parents=[common])
    sub = group.add_subparsers(dest="master_command", metavar="COMMAND", required=True)
    p = sub.add_parser("info", help="show the master's version and cluster", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_info)


__all__ = ["register"]
