"""``det version``: the client's version and, when reachable, the master's."""

from __future__ import annotations

import argparse
from typing import Any

from dauntless import __version__
from dauntless.client import ClientError

from ._util import add_json_flag, open_session, print_fields, print_json


def _version(args: argparse.Namespace) -> int:
    master: dict[str, Any] | None = None
    problem = ""
    with open_session(args, timeout=5.0, retries=0) as session:
        url = session.master_url
        try:
            master = dict(session.master_info())
        except ClientError as exc:
            problem = str(exc)
    if args.json:
        print_json(
            {
                "client": {"version": __version__},
                "master_url": url,
                "master": master,
                "master_error": problem or None,
            }
        )
        return 0
    print_fields(
        [
            ("Client version", __version__),
            ("Master URL", url),
            ("Master version", master.get("version") if master else f"unknown: {problem}"),
        ]
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``version`` command."""
    p = subparsers.add_parser("version", help="show client and master versions", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_version)


__all__ = ["register"]
