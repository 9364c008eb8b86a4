"""Users who sign in through single sign-on: provisioning at the first sign-in, and the
groups the identity provider names for them (:mod:`dauntless.master.sso`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..db import UserRow, UserSsoGroupRow
from . import groups, users


class SsoRefused(Exception):
    """The identity provider vouched for someone who may not sign in here (the answer is
    403, with this message)."""


MAX_USERNAME = 128


def sso_user(
    session: Session,
    username: str,
    display_name: str | None,
    auto_provision: bool,
    now: float,
) -> UserRow:
    """The user an identity provider signed in as ``username``: created (``remote``: no
    password) when missing and ``auto_provision``; its display name updated when the
    provider sent one.

    Raises:
        SsoRefused: no such user and no auto-provisioning; a user of that name that was
            not made for single sign-on (Determined refuses these too: signing in as an
            existing password user would let the provider's users take local accounts,
            ``admin`` included); a deactivated user; a name Dauntless cannot use.
    """
    if len(username) > MAX_USERNAME or any(c.isspace() or c in "/\\" for c in username):
        raise SsoRefused(f"the identity provider's user name {username[:64]!r} cannot be used")
    user = users.read_user_by_name(session, username)
    if user is None:
        if not auto_provision:
            raise SsoRefused(
                f"user {username} does not exist here; an admin can create it with "
                f"`det user create {username} --remote` (or set oidc.auto_provision_users)"
            )
        user = users.create_user(session, username, None, False, display_name, now, remote=True)
    elif not user.remote:
        raise SsoRefused(
            f"user {username} exists but was not created with --remote, so it cannot sign "
            "in through single sign-on; sign in with its password"
        )
    if not user.active:
        raise SsoRefused(f"user {username} is deactivated; an admin may activate it")
    if display_name and display_name != user.display_name:
        user.display_name, user.modified_at = display_name, now
    return user


MAX_SSO_GROUPS = 1000
"""The most group names one sign-in's claim may carry; more is refused (403)."""


def sync_sso_groups(
    session: Session, user_id: int, group_names: Sequence[str], now: float
) -> list[str]:
    """Make the user's group memberships follow the identity provider's group claim
    (``oidc.groups_attribute_name``) at this sign-in, as Determined's OIDC group sync
    does: the user joins every group the claim names, each created (with no role) when
    it does not exist; the user leaves the groups that the previous sign-in's claim named
    and this one does not. Memberships an admin gave by hand in groups no claim ever named
    are left alone. Roles follow from the role assignments of the groups
    (``det rbac assign-role --group-name``), so a claim maps to roles through its groups.

    Args:
        group_names: the claim's names; blank names and names longer than
            :data:`dauntless.master.models.groups.MAX_GROUP_NAME` characters are skipped.
        now: the time of the sign-in (seconds since the epoch), for groups created here.

    Returns:
        The names recorded for this sign-in, sorted.

    Raises:
        SsoRefused: the claim named more than :data:`MAX_SSO_GROUPS` groups.
    """
    names = sorted({n for n in group_names if n.strip() and len(n) <= groups.MAX_GROUP_NAME})
    if len(names) > MAX_SSO_GROUPS:
        raise SsoRefused(
            f"the identity provider named {len(names)} groups for this user; at most "
            f"{MAX_SSO_GROUPS} can be synchronised"
        )
    left = set(read_sso_groups(session, user_id)) - set(names)
    by_name = groups.groups_by_name(session, [*names, *left])
    for name in names:
        group = by_name.get(name) or groups.create_group(session, now, name)
        groups.update_group(session, group.id, add_users=[user_id])
    for name in sorted(left):
        if name in by_name:
            groups.update_group(session, by_name[name].id, remove_users=[user_id])
    session.execute(delete(UserSsoGroupRow).where(UserSsoGroupRow.user_id == user_id))
    for name in names:
        session.add(UserSsoGroupRow(user_id=user_id, group_name=name))
    return names


def read_sso_groups(session: Session, user_id: int) -> list[str]:
    """The groups the identity provider named for a user at their latest sign-in."""
    return list(
        session.scalars(
            select(UserSsoGroupRow.group_name)
            .where(UserSsoGroupRow.user_id == user_id)
            .order_by(UserSsoGroupRow.group_name)
        )
    )
