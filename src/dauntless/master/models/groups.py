"""User groups, their members, and role assignments to users and groups (reference
§2.3-2.5). Rows only; the caller's write session commits.

Every change goes through the ORM (no bulk statements), so that the grants remembered by
:class:`dauntless.master.authz.Authorizer` are read again after the commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import (
    RoleAssignmentRow,
    UserGroupMemberRow,
    UserGroupRow,
    UserRow,
    WorkspaceRow,
)
from ..errors import BadRequest, Conflict, NotFound
from ..rbac import ROLES

MAX_GROUP_NAME = 256
"""The longest group name, in characters."""


def _check_name(name: str) -> str:
    if not name or not name.strip() or len(name) > MAX_GROUP_NAME:
        raise BadRequest(
            "invalid group name", [("name", f"1 to {MAX_GROUP_NAME} characters, not all spaces")]
        )
    return name


def read_group(s: Session, group_id: int) -> UserGroupRow:
    """A group by id.

    Raises:
        NotFound: no such group.
    """
    g = s.get(UserGroupRow, group_id)
    if g is None:
        raise NotFound(f"group {group_id} not found")
    return g


def _check_users(s: Session, user_ids: Iterable[int], field: str) -> list[int]:
    ids = sorted(set(user_ids))
    if ids:
        found = set(s.scalars(select(UserRow.id).where(UserRow.id.in_(ids))))
        missing = [i for i in ids if i not in found]
        if missing:
            raise BadRequest(f"unknown user ids {missing}", [(field, f"no users {missing}")])
    return ids


def create_group(s: Session, now: float, name: str, user_ids: Sequence[int] = ()) -> UserGroupRow:
    """Create a group with members.

    Raises:
        BadRequest: a bad name or unknown users. Conflict: the name is taken.
    """
    _check_name(name)
    if s.scalar(select(UserGroupRow.id).where(UserGroupRow.name == name)) is not None:
        raise Conflict(f"group {name!r} already exists")
    ids = _check_users(s, user_ids, "add_users")
    g = UserGroupRow(name=name, created_at=now)
    s.add(g)
    s.flush()
    for uid in ids:
        s.add(UserGroupMemberRow(group_id=g.id, user_id=uid))
    return g


def groups_by_name(s: Session, names: Iterable[str]) -> dict[str, UserGroupRow]:
    """The groups of these names that exist, by name."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    return {g.name: g for g in s.scalars(select(UserGroupRow).where(UserGroupRow.name.in_(wanted)))}


def members(s: Session, group_ids: Iterable[int]) -> dict[int, list[UserRow]]:
    """The members of each group, by username."""
    ids = list(group_ids)
    out: dict[int, list[UserRow]] = {i: [] for i in ids}
    if ids:
        for gid, user in s.execute(
            select(UserGroupMemberRow.group_id, UserRow)
            .join(UserRow, UserRow.id == UserGroupMemberRow.user_id)
            .where(UserGroupMemberRow.group_id.in_(ids))
            .order_by(UserRow.username)
        ):
            out[gid].append(user)
    return out


def search_groups(
    s: Session,
    user_id: int | None = None,
    name: str | None = None,
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[tuple[UserGroupRow, int]], int]:
    """A page of groups (of which ``user_id`` is a member; called ``name``), by name,
    each with its number of members, and how many matched."""
    q = select(UserGroupRow)
    if user_id is not None:
        q = q.where(
            UserGroupRow.id.in_(
                select(UserGroupMemberRow.group_id).where(UserGroupMemberRow.user_id == user_id)
            )
        )
    if name:
        q = q.where(UserGroupRow.name == name)
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    q = q.order_by(UserGroupRow.name)
    if offset:
        q = q.offset(offset)
    if limit:
        q = q.limit(limit)
    groups = list(s.scalars(q))
    counts = dict(
        s.execute(
            select(UserGroupMemberRow.group_id, func.count())
            .where(UserGroupMemberRow.group_id.in_([g.id for g in groups]))
            .group_by(UserGroupMemberRow.group_id)
        ).all()
    )
    return [(g, counts.get(g.id, 0)) for g in groups], total


def update_group(
    s: Session,
    group_id: int,
    name: str | None = None,
    add_users: Sequence[int] = (),
    remove_users: Sequence[int] = (),
) -> UserGroupRow:
    """Rename a group, add and remove members (adding a member twice changes nothing).

    Raises:
        NotFound: no such group. BadRequest: a bad name or unknown users.
        Conflict: the name is taken.
    """
    g = read_group(s, group_id)
    if name is not None and name != g.name:
        _check_name(name)
        if s.scalar(select(UserGroupRow.id).where(UserGroupRow.name == name)) is not None:
            raise Conflict(f"group {name!r} already exists")
        g.name = name
    for uid in _check_users(s, add_users, "add_users"):
        if s.get(UserGroupMemberRow, (group_id, uid)) is None:
            s.add(UserGroupMemberRow(group_id=group_id, user_id=uid))
    for uid in _check_users(s, remove_users, "remove_users"):
        row = s.get(UserGroupMemberRow, (group_id, uid))
        if row is not None:
            s.delete(row)
    return g


def delete_group(s: Session, group_id: int) -> None:
    """Delete a group, its memberships and its role assignments.

    Raises:
        NotFound: no such group.
    """
    g = read_group(s, group_id)
    for member in s.scalars(select(UserGroupMemberRow).where(UserGroupMemberRow.group_id == g.id)):
        s.delete(member)
    for a in s.scalars(select(RoleAssignmentRow).where(RoleAssignmentRow.group_id == g.id)):
        s.delete(a)
    s.delete(g)


def assign_groups(
    s: Session, user_ids: Sequence[int], add_groups: Sequence[int], remove_groups: Sequence[int]
) -> None:
    """Add users to groups and remove them from others (``PATCH /users/assignments``).

    Raises:
        NotFound: an unknown group. BadRequest: unknown users.
    """
    for gid in [*add_groups, *remove_groups]:
        read_group(s, gid)
    for gid in add_groups:
        update_group(s, gid, add_users=user_ids)
    for gid in remove_groups:
        update_group(s, gid, remove_users=user_ids)


# ---------------------------------------------------------------------- assignments


@dataclass(frozen=True)
class Assignment:
    """One role given to a user or a group (exactly one of the two), on a workspace or
    (``workspace_id`` None) on the cluster."""

    role_id: int
    user_id: int | None
    group_id: int | None
    workspace_id: int | None


def _check(s: Session, a: Assignment, field: str) -> None:
    role = ROLES.get(a.role_id)
    if role is None:
        raise BadRequest(f"no role {a.role_id}", [(field, f"roles: {sorted(ROLES)}")])
    if (a.user_id is None) == (a.group_id is None):
        raise BadRequest("give a user or a group", [(field, "exactly one of user and group")])
    if a.workspace_id is not None:
        if role.global_only:
            raise BadRequest(
                f"role {role.name} can be assigned only on the cluster",
                [(field, "its permissions are global; leave out the workspace")],
            )
        if s.get(WorkspaceRow, a.workspace_id) is None:
            raise NotFound(f"workspace {a.workspace_id} not found")
    if a.user_id is not None and s.get(UserRow, a.user_id) is None:
        raise NotFound(f"user {a.user_id} not found")
    if a.group_id is not None:
        read_group(s, a.group_id)


def _find(s: Session, a: Assignment) -> RoleAssignmentRow | None:
    q = select(RoleAssignmentRow).where(RoleAssignmentRow.role_id == a.role_id)
    for column, value in (
        (RoleAssignmentRow.user_id, a.user_id),
        (RoleAssignmentRow.group_id, a.group_id),
        (RoleAssignmentRow.workspace_id, a.workspace_id),
    ):
        q = q.where(column.is_(None) if value is None else column == value)
    return s.scalars(q).first()


def add_assignments(s: Session, now: float, items: Sequence[Assignment]) -> int:
    """Give each role; one already given changes nothing. Returns how many were new.

    Raises:
        BadRequest: an unknown role, a global role on a workspace, neither or both of
            user and group. NotFound: an unknown user, group or workspace.
    """
    added = 0
    for i, a in enumerate(items):
        _check(s, a, f"assignments[{i}]")
        if _find(s, a) is None:
            s.add(
                RoleAssignmentRow(
                    role_id=a.role_id,
                    user_id=a.user_id,
                    group_id=a.group_id,
                    workspace_id=a.workspace_id,
                    created_at=now,
                )
            )
            s.flush()
            added += 1
    return added


def remove_assignments(s: Session, items: Sequence[Assignment]) -> int:
    """Take each role back; one not given changes nothing. Returns how many were removed.

    Raises:
        BadRequest, NotFound: as :func:`add_assignments`.
    """
    removed = 0
    for i, a in enumerate(items):
        _check(s, a, f"assignments[{i}]")
        row = _find(s, a)
        if row is not None:
            s.delete(row)
            s.flush()
            removed += 1
    return removed


def user_assignments(
    s: Session, user_id: int
) -> list[tuple[RoleAssignmentRow, UserGroupRow | None]]:
    """A user's role assignments: their own (group None) and their groups'."""
    own = [
        (a, None)
        for a in s.scalars(select(RoleAssignmentRow).where(RoleAssignmentRow.user_id == user_id))
    ]
    via = list(
        s.execute(
            select(RoleAssignmentRow, UserGroupRow)
            .join(UserGroupRow, UserGroupRow.id == RoleAssignmentRow.group_id)
            .join(UserGroupMemberRow, UserGroupMemberRow.group_id == UserGroupRow.id)
            .where(UserGroupMemberRow.user_id == user_id)
        ).all()
    )
    return [*own, *via]


def group_assignments(s: Session, group_id: int) -> list[RoleAssignmentRow]:
    """A group's role assignments."""
    return list(s.scalars(select(RoleAssignmentRow).where(RoleAssignmentRow.group_id == group_id)))


def workspace_assignments(
    s: Session, workspace_id: int
) -> list[tuple[RoleAssignmentRow, UserRow | None, UserGroupRow | None]]:
    """Who holds roles on a workspace (not counting cluster-wide roles): each
    assignment with its user or its group."""
    rows = s.scalars(
        select(RoleAssignmentRow)
        .where(RoleAssignmentRow.workspace_id == workspace_id)
        .order_by(RoleAssignmentRow.id)
    )
    out = []
    for a in rows:
        user = s.get(UserRow, a.user_id) if a.user_id is not None else None
        group = s.get(UserGroupRow, a.group_id) if a.group_id is not None else None
        out.append((a, user, group))
    return out
