"""The audit trail under ``/api/v1`` (admins only; :mod:`dauntless.master.audit`).

| route | query | answer |
|---|---|---|
| ``GET /audit`` | ``offset, limit (1..10000, default 100), username, since, until (seconds since the epoch), result, order (desc: newest first, default; asc)`` | ``{"entries": [AuditEntry], "pagination"}`` |
| ``GET /audit/verify`` | | ``{ok, rows, first_id, last_id, checkpoint, breaks: [{id, problem}], break_count}`` |

``AuditEntry = {id, at, user_id, username, token_kind, token_id, method, route, action,
target, status, result, client, prev_hash, hash}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from .api_spec import INT32_MAX
from .audit import AuditTrail
from .db import AuditRow
from .models import audit as audit_reads
from .responses import tokens as R

router = APIRouter(prefix="/api/v1")

_COLUMNS = tuple(c.name for c in AuditRow.__table__.columns)


def entry_view(row: AuditRow) -> dict[str, Any]:
    """The JSON of an audit row."""
    return {name: getattr(row, name) for name in _COLUMNS}


def _trail(request: Request) -> AuditTrail:
    return request.app.state.audit


@router.get("/audit", response_model=R.AuditOut)
def list_audit(
    request: Request,
    offset: int = Query(0, ge=0, le=INT32_MAX),
    limit: int = Query(100, ge=1, le=10_000),
    username: str | None = Query(None, max_length=256),
    since: float | None = Query(None, ge=0, le=1e11),
    until: float | None = Query(None, ge=0, le=1e11),
    result: str | None = Query(None, pattern="^(ok|denied|refused|error)$"),
    order: str = Query("desc", pattern="^(asc|desc)$"),
) -> dict[str, Any]:
    """A page of the audit trail, newest first unless ``order=asc``."""
    q = audit_reads.AuditQuery(
        username=username,
        since=since,
        until=until,
        result=result,
        newest_first=order == "desc",
        offset=offset,
        limit=limit,
    )
    with _trail(request).db.read() as s:
        rows, total = audit_reads.read_entries(s, q)
        entries = [entry_view(r) for r in rows]
    return {
        "entries": entries,
        "pagination": {
            "offset": offset,
            "limit": limit,
            "start_index": min(offset, total),
            "end_index": min(offset + len(entries), total),
            "total": total,
        },
    }


@router.get("/audit/verify", response_model=R.AuditVerifyOut)
async def verify_audit(request: Request) -> dict[str, Any]:
    """Check the whole chain (see :meth:`AuditTrail.verify`); ``ok`` false names each
    break."""
    result = await run_in_threadpool(_trail(request).verify)
    return dataclasses.asdict(result)


__all__ = ["entry_view", "router"]
