"""Tables of the audit trail and of single sign-on (``dauntless.master.audit``,
``dauntless.master.sso``): kept apart from :mod:`.models` so each stays short."""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class AuditRow(Base):
    """One audited request: an append-only row of the hash chain.

    ``id`` is given by the master (one more than the last row's), never by the database,
    so a missing id names a deleted row. ``hash`` is the HMAC-SHA-256, under the master's
    audit key, of ``prev_hash`` and the row's other columns (``dauntless.master.audit``);
    ``prev_hash`` is the previous row's ``hash`` (64 zeros for the first row ever, or the
    head of the latest retention checkpoint). There is no foreign key: a row outlives its
    user, and no cascade may touch the table.
    """

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[float] = mapped_column(Float, index=True)
    user_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    username: Mapped[str | None] = mapped_column(String(256), nullable=True)
    token_kind: Mapped[str] = mapped_column(String(32))
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    method: Mapped[str] = mapped_column(String(8))
    route: Mapped[str] = mapped_column(String(512))
    action: Mapped[str] = mapped_column(String(128))
    target: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    status: Mapped[int] = mapped_column(Integer)
    result: Mapped[str] = mapped_column(String(16))
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditCheckpointRow(Base):
    """A retention cut of the audit trail: rows up to ``cut_id`` were removed, and the
    chain goes on from ``head_hash`` (the removed row ``cut_id``'s hash). ``signature`` is
    the HMAC-SHA-256 of the other columns under the audit key, so a checkpoint cannot be
    made up to cover rows deleted by hand."""

    __tablename__ = "audit_checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    cut_id: Mapped[int] = mapped_column(Integer)
    head_hash: Mapped[str] = mapped_column(String(64))
    removed: Mapped[int] = mapped_column(Integer)
    signature: Mapped[str] = mapped_column(String(64))


class UserSsoGroupRow(Base):
    """A group the identity provider named for a user at their latest single sign-on
    (the ``oidc.groups_attribute_name`` claim); replaced at each sign-in."""

    __tablename__ = "user_sso_groups"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    group_name: Mapped[str] = mapped_column(String(256), primary_key=True)
