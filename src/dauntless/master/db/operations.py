"""Tables of the master's operation (issue 34 scope 4): the cluster message. Kept apart
from :mod:`.models` so each stays short."""

from __future__ import annotations

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class ClusterMessageRow(Base):
    """A message an admin set for every user (the WebUI's banner, a line on CLI commands).

    Shown from ``start_time`` until ``end_time`` (seconds since the epoch; None: until
    cleared). Setting a new message ends the ones still showing (``end_time`` becomes
    the new one's start), so at most one shows at any instant; clearing ends them now.
    Rows are kept as the history of messages.
    """

    __tablename__ = "cluster_messages"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    message: Mapped[str] = mapped_column(String(250))
    created_by: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    start_time: Mapped[float] = mapped_column(Float, index=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
