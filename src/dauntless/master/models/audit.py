"""Reads of the audit trail (``GET /api/v1/audit``). Appending, verifying and pruning are
:class:`dauntless.master.audit.AuditTrail`'s: the chain is written under its own lock."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from ..db import AuditRow


@dataclass(frozen=True)
class AuditQuery:
    """A page of the trail (:func:`read_entries`).

    Attributes:
        username: only rows of this user (as recorded).
        since, until: only rows with ``since <= at < until`` (seconds since the epoch).
        result: only ``ok``, ``denied``, ``refused`` or ``error`` rows.
        newest_first: order by id descending.
        offset, limit: the page.
    """

    username: str | None = None
    since: float | None = None
    until: float | None = None
    result: str | None = None
    newest_first: bool = True
    offset: int = 0
    limit: int = 100


def read_entries(session: Session, q: AuditQuery) -> tuple[list[AuditRow], int]:
    """A page of audit rows and how many match in all."""
    where: list[ColumnElement[bool]] = []
    if q.username is not None:
        where.append(AuditRow.username == q.username)
    if q.since is not None:
        where.append(AuditRow.at >= q.since)
    if q.until is not None:
        where.append(AuditRow.at < q.until)
    if q.result is not None:
        where.append(AuditRow.result == q.result)
    total = session.scalar(select(func.count()).select_from(AuditRow).where(*where)) or 0
    order = AuditRow.id.desc() if q.newest_first else AuditRow.id
    rows = session.scalars(
        select(AuditRow).where(*where).order_by(order).offset(q.offset).limit(q.limit)
    )
    return list(rows), total
