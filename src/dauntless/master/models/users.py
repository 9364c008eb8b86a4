"""Users: reads of ``UserRow`` the other models need (accounts, sessions and
passwords are :mod:`dauntless.master.auth`'s)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db import UserRow


def user_id(session: Session, username: str) -> int | None:
    """The id of the user named ``username``, None when there is none."""
    return session.scalar(select(UserRow.id).where(UserRow.username == username))
