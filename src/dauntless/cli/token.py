"""``det token`` (alias ``tkn``): access tokens for scripts and CI (Determined's commands
and flags, reference §2.7).

A token is printed once, at ``create``; use it as ``DET_USER_TOKEN=<token>`` or an
``Authorization: Bearer <token>`` header, or save it for later commands with
``det token login <token>``. ``list --sessions`` shows login sessions instead, and
``revoke`` ends either kind.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from dauntless.client import Session

from ._util import (
    add_json_flag,
    exit_with_error,
    note,
    open_session,
    print_json,
    print_table,
    write_line,
)
from .user import read_password


def _fmt(stamp: str | None) -> str:
    """An RFC 3339 time of the master as local ``YYYY-MM-DD HH:MM:SS``."""
    if not stamp:
        return ""
    try:
        when = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _user_id(session: Session, username: str | None) -> int | None:
    return int(session.get_user_by_name(username)["id"]) if username else None


def _table(tokens: list[dict[str, Any]]) -> None:
    rows = [
        (
            t.get("id"),
            t.get("username", t.get("user_id")),
            str(t.get("token_type", "")).removeprefix("TOKEN_TYPE_"),
            t.get("description") or "",
            _fmt(t.get("created_at")),
            _fmt(t.get("expiry")),
            "yes" if t.get("revoked") else "no",
        )
        for t in tokens
    ]
    print_table(["ID", "User", "Type", "Description", "Created", "Expires", "Revoked"], rows)


def _create(args: argparse.Namespace) -> int:
    days = args.expiration_days
    if days is not None and days != -1 and days < 1:
        exit_with_error("--expiration-days must be -1 (the longest allowed) or at least 1")
    body: dict[str, Any] = {}
    if days is not None:
        body["lifespan"] = "-1" if days == -1 else f"{24 * days}h"
    if args.description:
        body["description"] = args.description
    with open_session(args) as session:
        user_id = _user_id(session, args.username)
        if user_id is not None:
            body["user_id"] = user_id
        answer = session.post_json("/tokens", body)
    if args.json:
        print_json(answer)
        return 0
    write_line(f"Created access token {answer['token_id']}. It is shown only now:")
    write_line(str(answer["token"]))
    return 0


def _list(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "show_inactive": "true" if args.show_inactive else None,
        "username": args.username,
        "token_type": "TOKEN_TYPE_USER_SESSION" if args.sessions else None,
    }
    with open_session(args) as session:
        answer = session.get_json("/tokens", params)
    if args.json:
        print_json(answer)
        return 0
    _table(answer["token_info"])
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        answer = session.get_json(
            "/tokens",
            {
                "token_ids": args.token_id,
                "show_inactive": "true",
                "token_type": "TOKEN_TYPE_UNSPECIFIED",
            },
        )
    found = {t["id"] for t in answer["token_info"]}
    missing = [i for i in args.token_id if i not in found]
    if args.json:
        print_json(answer)
    else:
        _table(answer["token_info"])
    if missing:
        exit_with_error(f"no token with id {', '.join(map(str, missing))} (that you may see)")
    return 0


def _patch(session: Session, token_id: int, body: dict[str, Any]) -> dict[str, Any]:
    answer = session.request("PATCH", f"/tokens/{token_id}", json=body).json()
    return dict(answer["token_info"])


def _edit(args: argparse.Namespace) -> int:
    if args.description is None:
        exit_with_error("nothing to change: give -d/--description")
    with open_session(args) as session:
        info = _patch(session, args.token_id, {"description": args.description})
    if args.json:
        print_json({"token_info": info})
        return 0
    write_line(f"Updated the description of token {args.token_id}.")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        info = _patch(session, args.token_id, {"set_revoked": True})
    kind = "login session" if info.get("token_type") == "TOKEN_TYPE_USER_SESSION" else "token"
    write_line(f"Revoked {kind} {args.token_id} of user '{info.get('username')}'.")
    return 0


def _login(args: argparse.Namespace) -> int:
    token = args.token
    if token in (None, "-"):
        token = read_password("Access token: ").strip()
    else:
        note(
            "a token on the command line can be read by other users of this machine (ps); "
            "pipe it instead: det token login < FILE"
        )
    if not token:
        exit_with_error("no token given")
    with open_session(args, login=False) as session:
        user = session.adopt_token(token)
    write_line(f"Signed in with an access token as user '{user.get('username')}'.")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``token`` (alias ``tkn``) command group."""
    group = subparsers.add_parser(
        "token", aliases=["tkn"], help="access tokens for scripts and CI", parents=[common]
    )
    sub = group.add_subparsers(dest="token_command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "create", help="create an access token (yours, or a user's as an admin)", parents=[common]
    )
    p.add_argument("username", nargs="?", metavar="USERNAME", help="default: yourself")
    p.add_argument(
        "-e",
        "--expiration-days",
        type=int,
        default=None,
        metavar="N",
        help="days until it expires (-1: the longest the master allows; default: the "
        "master's security.token.default_lifespan_days)",
    )
    p.add_argument("-d", "--description", default=None, help="what the token is for")
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser(
        "list", aliases=["ls"], help="list access tokens (or login sessions)", parents=[common]
    )
    p.add_argument("username", nargs="?", metavar="USERNAME", help="default: yours (admins: all)")
    p.add_argument("--show-inactive", action="store_true", help="also revoked and expired tokens")
    p.add_argument("--sessions", action="store_true", help="list login sessions instead")
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("describe", help="show tokens by id", parents=[common])
    p.add_argument("token_id", nargs="+", type=int, metavar="TOKEN_ID")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser("edit", help="change a token's description", parents=[common])
    p.add_argument("token_id", type=int, metavar="TOKEN_ID")
    p.add_argument("-d", "--description", default=None, help="the new description")
    add_json_flag(p)
    p.set_defaults(func=_edit)

    p = sub.add_parser(
        "revoke", help="revoke an access token or a login session (permanent)", parents=[common]
    )
    p.add_argument("token_id", type=int, metavar="TOKEN_ID")
    p.set_defaults(func=_revoke)

    p = sub.add_parser(
        "login",
        help="use an access token for later commands (saved like a login)",
        parents=[common],
    )
    p.add_argument(
        "token",
        nargs="?",
        metavar="TOKEN",
        help="the token; omitted or '-': read from the terminal (no echo) or stdin",
    )
    p.set_defaults(func=_login)


__all__ = ["register"]
