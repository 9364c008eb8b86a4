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
    in the trials' rows it would widen every scan of an experiment's trials, which the
    master runs per event. (Measured in-process, ``master_memory_per_trial.py --cpu --n
    3000``, load 7-10: CPU per trial last/first 1.15 and 1.03 with this table, 1.13 and
    0.75 with the column, 1.52 and 1.30 on main before either: the load decides.)"""

    __tablename__ = "trial_searcher_records"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
