"""Users who sign in through single sign-on: provisioning at the first sign-in, and the
groups the identity provider names for them (:mod:`dauntless.master.sso`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..db import UserRow, UserSsoGroupRow
from . import users


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


def sync_sso_groups(session: Session, user_id: int, group_names: Sequence[str]) -> list[str]:
    """Record the groups the identity provider named for a user at this sign-in,
    replacing the last sign-in's (the ``oidc.groups_attribute_name`` claim).

    This is the one place where a sign-in's group claim meets the cluster's groups: the
    user groups and roles of the permission model (issue 30 scope 2) map these names to
    memberships here. Returns the names stored, sorted.
    """
    names = sorted(set(group_names))
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
