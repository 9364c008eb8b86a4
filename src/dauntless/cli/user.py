"""``det user``: sign in and out, and manage users (administrators).

Passwords are read from the terminal without echo; when stdin is not a terminal (scripts,
tests) each password is one line read from stdin. They are never taken from the command
line except by ``det user create --password``, as in Determined.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from dauntless.client import DEFAULT_USER, Session
from dauntless.client._auth import USER_ENV

from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_time,
    open_session,
    print_json,
    print_table,
    write_line,
)


def read_password(prompt: str) -> str:
    """One password: from the terminal without echo, else one line of stdin.

    Raises:
        SystemExit: (1) when stdin is closed before a line is read.
    """
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        exit_with_error("no password given: stdin ended (type it on a terminal, or pipe it)")
    return line.rstrip("\r\n")


def _target_user(args: argparse.Namespace) -> str:
    """USERNAME, else ``-u``, else ``DET_USER``, else ``determined``."""
    return (
        getattr(args, "username", None)
        or getattr(args, "user", None)
        or os.environ.get(USER_ENV, "").strip()
        or DEFAULT_USER
    )


def _login(args: argparse.Namespace) -> int:
    username = _target_user(args)
    password = read_password(f"Password for user '{username}': ")
    with open_session(args) as session:
        user = session.login(username, password)
    write_line(f"Signed in as user '{user.get('username', username)}' on {session.master_url}.")
    return 0


def _logout(args: argparse.Namespace) -> int:
    if not args.all:
        with open_session(args) as session:
            session.logout()
            who = session.username
        write_line(f"Signed out{f' user {who!r}' if who else ''} from {session.master_url}.")
        return 0
    with open_session(args) as probe:
        url, store = probe.master_url, probe.token_store
        cert_file = probe.cert_file
    saved = store.users(url)
    for name, token in saved.items():
        with Session(url, token=token, cert_file=cert_file, token_store=store, login=False) as s:
            s.logout()
        store.drop_token(url, name)
    store.drop_master(url)
    write_line(f"Signed out {len(saved)} user(s) from {url}.")
    return 0


def _whoami(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        user = session.whoami()
    if args.json:
        print_json({"user": user})
        return 0
    write_line(
        f"You are signed in as user '{user.get('username')}'"
        + (" (administrator)." if user.get("admin") else ".")
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        users = session.list_users()
    if args.json:
        print_json({"users": users})
        return 0
    rows = [
        (
            u.get("id"),
            u.get("username"),
            u.get("display_name") or "",
            "yes" if u.get("admin") else "no",
            "yes" if u.get("active") else "no",
            fmt_time(u.get("modified_at")),
        )
        for u in sorted(users, key=lambda u: str(u.get("username")))
    ]
    print_table(["ID", "Username", "Display name", "Admin", "Active", "Modified"], rows)
    return 0


def _create(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        user = session.create_user(
            args.username, args.password or "", admin=args.admin, remote=args.remote
        )
    if args.json:
        print_json({"user": user})
        return 0
    kind = "administrator" if user.get("admin") else "user"
    write_line(f"Created {kind} '{user.get('username')}' (id {user.get('id')}).")
    return 0


def _change_password(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        me = session.whoami()
        username = args.username or me["username"]
        target = me if username == me["username"] else session.get_user_by_name(username)
        password = read_password(f"New password for user '{username}': ")
        again = read_password("Confirm password: ") if sys.stdin.isatty() else password
        if password != again:
            exit_with_error("the passwords do not match; nothing was changed")
        session.set_password(int(target["id"]), password)
        if target["id"] == me["id"]:
            # The change revoked every token of this user, ours included: sign in again.
            session.login(username, password)
    write_line(f"Changed the password of user '{username}'.")
    return 0


def _set_active(active: bool) -> Any:
    def run(args: argparse.Namespace) -> int:
        with open_session(args) as session:
            target = session.get_user_by_name(args.username)
            session.patch_user(int(target["id"]), active=active)
        write_line(f"{'Activated' if active else 'Deactivated'} user '{args.username}'.")
        return 0

    return run


def _link_with_agent_user(args: argparse.Namespace) -> int:
    # As Determined's CLI: every one of the four is required, checked before any call.
    for flag in ("agent_uid", "agent_gid", "agent_user", "agent_group"):
        if getattr(args, flag) is None:
            exit_with_error(f"{flag.replace('_', '-')} argument required")
    with open_session(args) as session:
        target = session.get_user_by_name(args.det_username)
        session.link_with_agent_user(
            int(target["id"]), args.agent_uid, args.agent_gid, args.agent_user, args.agent_group
        )
    write_line(
        f"Linked user '{args.det_username}' to {args.agent_user} (uid {args.agent_uid}), "
        f"group {args.agent_group} (gid {args.agent_gid}): its tasks run as them."
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``user`` (alias ``u``) command group."""
    group = subparsers.add_parser(
        "user", aliases=["u"], help="sign in and out; manage users", parents=[common]
    )
    sub = group.add_subparsers(dest="user_command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "login",
        help="sign in (asks for the password) and save the token for later commands",
        parents=[common],
    )
    p.add_argument(
        "username",
        nargs="?",
        metavar="USERNAME",
        help="default: -u, else $DET_USER, else determined",
    )
    p.set_defaults(func=_login)

    p = sub.add_parser("logout", help="revoke the saved token and forget it", parents=[common])
    p.add_argument(
        "--all", action="store_true", help="sign out every user with a saved token on this master"
    )
    p.set_defaults(func=_logout)

    p = sub.add_parser("whoami", help="show the signed-in user", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_whoami)

    p = sub.add_parser("list", aliases=["ls"], help="list users", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_list)

    p = sub.add_parser("create", help="create a user (administrators)", parents=[common])
    p.add_argument("username", metavar="USERNAME")
    p.add_argument("--admin", action="store_true", help="make the user an administrator")
    p.add_argument("--password", default=None, help="initial password (default: empty)")
    p.add_argument(
        "--remote",
        action="store_true",
        help="the user signs in only through single sign-on (no password)",
    )
    add_json_flag(p)
    p.set_defaults(func=_create)

    p = sub.add_parser(
        "change-password",
        help="set a password (yours, or another user's as an administrator); asks twice",
        parents=[common],
    )
    p.add_argument("username", nargs="?", metavar="USERNAME", help="default: yourself")
    p.set_defaults(func=_change_password)

    for name, active in (("activate", True), ("deactivate", False)):
        p = sub.add_parser(
            name,
            help=f"{name} a user (administrators); a deactivated user cannot sign in",
            parents=[common],
        )
        p.add_argument("username", metavar="USERNAME")
        p.set_defaults(func=_set_active(active))

    p = sub.add_parser(
        "link-with-agent-user",
        help="run a user's tasks as a Unix uid/gid on the agents (administrators)",
        parents=[common],
    )
    p.add_argument("det_username", metavar="DET_USERNAME")
    p.add_argument("--agent-uid", type=int, default=None, help="the Unix user id")
    p.add_argument("--agent-gid", type=int, default=None, help="the Unix group id")
    p.add_argument("--agent-user", default=None, help="the Unix user name")
    p.add_argument("--agent-group", default=None, help="the Unix group name")
    p.set_defaults(func=_link_with_agent_user)


__all__ = ["read_password", "register"]
