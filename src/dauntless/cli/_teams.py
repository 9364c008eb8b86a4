"""Names to ids for the workspace, project, RBAC and group commands: the CLI takes
Determined's names (``det p describe WORKSPACE PROJECT``), the REST API ids."""

from __future__ import annotations

import sys
from typing import Any

from dauntless.client import Session

from ._util import exit_with_error

PAGE = 1000
"""How many rows one request of a name lookup asks for."""


def call(session: Session, method: str, path: str, body: Any = None, **params: Any) -> Any:
    """One JSON request under ``/api/v1`` (``body`` as JSON for non-GET methods)."""
    response = session.request(
        method, path, params=params or None, json=None if method == "GET" else (body or {})
    )
    return response.json()


def workspace(session: Session, name: str) -> dict[str, Any]:
    """The workspace called ``name`` (case-insensitive, as the master compares).

    Raises:
        SystemExit: (1) no such workspace (or the caller may not see it).
    """
    found = session.get_json("/workspaces", {"name": name})["workspaces"]
    if not found:
        exit_with_error(f"no workspace named {name!r} (or you may not view it)")
    return dict(found[0])


def workspace_id(session: Session, name: str | None) -> int | None:
    """The id of workspace ``name``, or None when no name is given."""
    return None if name is None else int(workspace(session, name)["id"])


def project(session: Session, workspace_name: str, name: str) -> dict[str, Any]:
    """The project called ``name`` in workspace ``workspace_name``.

    Raises:
        SystemExit: (1) no such workspace or project.
    """
    ws = workspace(session, workspace_name)
    found = session.get_json(f"/workspaces/{ws['id']}/projects", {"name": name})["projects"]
    if not found:
        exit_with_error(f"no project named {name!r} in workspace {ws['name']!r}")
    return dict(found[0])


def user(session: Session, username: str) -> dict[str, Any]:
    """The user called ``username``.

    Raises:
        SystemExit: (1) no such user.
    """
    for u in session.list_users():
        if u["username"] == username:
            return dict(u)
    exit_with_error(f"no user named {username!r}")


def user_ids(session: Session, usernames: str) -> list[int]:
    """The ids of comma-separated usernames (``a,b``), as Determined's CLI takes them."""
    names = [n.strip() for n in usernames.split(",") if n.strip()]
    by_name = {u["username"]: int(u["id"]) for u in session.list_users()}
    missing = [n for n in names if n not in by_name]
    if missing:
        exit_with_error(f"no user named {', '.join(repr(n) for n in missing)}")
    return [by_name[n] for n in names]


def group(session: Session, name: str) -> dict[str, Any]:
    """The group called ``name`` (``{group_id, name}``).

    Raises:
        SystemExit: (1) no such group.
    """
    found = session.post_json("/groups/search", {"name": name, "limit": 1})["groups"]
    if not found:
        exit_with_error(f"no group named {name!r}")
    return dict(found[0]["group"])


def role(session: Session, name: str) -> dict[str, Any]:
    """The role called ``name`` (any case).

    Raises:
        SystemExit: (1) no such role, naming the roles there are.
    """
    roles = session.post_json("/roles/search", {})["roles"]
    for r in roles:
        if r["name"].lower() == name.lower():
            return dict(r)
    exit_with_error(f"no role named {name!r}; roles: {', '.join(r['name'] for r in roles)}")


def confirm(yes: bool, question: str, what: str) -> bool:
    """Whether to go on: ``--yes``, else the answer on a terminal ([y/N]).

    Raises:
        SystemExit: (1) without ``--yes`` and without a terminal to ask on.
    """
    if yes:
        return True
    if not sys.stdin.isatty():
        exit_with_error(f"{what}; pass --yes to confirm")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
