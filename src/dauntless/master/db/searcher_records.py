"""Ended trials' searcher records (issue 37 scope 2). Kept apart from :mod:`.models` so
each stays short."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class TrialSearcherRecordRow(Base):
    """The searcher's record of an ended trial (issue 37 scope 2;
    ``TrialRecord.to_json()``): the master keeps no ended trial's record in memory and
    reads it here when an event names the ended trial (``det experiment continue``).

    A table of its own, not a column of ``trials``: a record is some 0.4 KB of JSON, and
    in the trials' rows it widened every scan of an experiment's trials (the master's
    CPU per trial then grew faster with the trials already run, side by side with the
    narrow rows)."""

    __tablename__ = "trial_searcher_records"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
