"""Historical cluster usage under ``/api/v1/resources`` (issue 34 scope 5;
:mod:`dauntless.master.models.usage`). Needs VIEW_CLUSTER_USAGE (admins, cluster
viewers).

| route | query | answer |
|---|---|---|
| ``GET /resources/allocation/raw`` | ``timestamp_after, timestamp_before`` (RFC 3339) | ``{"resource_entries": [{allocation_id, kind, experiment_id, username, user_id, workspace, resource_pool, labels, slots, start_time, end_time, seconds}]}`` |
| ``GET /resources/allocation/aggregated`` | ``start_date, end_date`` (YYYY-MM-DD, both included), ``period`` (``RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY`` or ``_MONTHLY``) | ``{"resource_entries": [{period_start, period, seconds, by_username, by_workspace, by_resource_pool, by_experiment_label}]}`` (slot-seconds) |
| ``GET /resources/usage`` | ``days`` (1..3660, default 30) | ``{since, until, total, by_username, by_workspace, by_resource_pool, by_experiment_label}`` (slot-seconds of the last ``days``) |
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from .models import usage
from .responses import operations as R
from .routes import _read

router = APIRouter(prefix="/api/v1")

_PERIODS = {
    "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY": False,
    "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY": True,
}


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _timestamp(name: str, text: str) -> float:
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"{name}: {text!r} is not an RFC 3339 time") from None
    return (t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)).timestamp()


def _date(name: str, text: str) -> float:
    try:
        d = _dt.date.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"{name}: {text!r} is not a date (YYYY-MM-DD)") from None
    return _dt.datetime(d.year, d.month, d.day, tzinfo=_dt.timezone.utc).timestamp()


def _entries(request: Request, after: float, before: float) -> list[usage.UsageEntry]:
    try:
        return _read(request, usage.usage_entries, after, before, time.time())
    except usage.UsageWindowError as exc:
        raise HTTPException(400, str(exc)) from None


@router.get("/resources/allocation/raw", response_model=R.UsageRawOut)
def allocation_raw(
    request: Request,
    timestamp_after: str = Query(max_length=64),
    timestamp_before: str = Query(max_length=64),
) -> dict[str, Any]:
    """Every allocation part's use within the window (seconds are wall time)."""
    after = _timestamp("timestamp_after", timestamp_after)
    before = _timestamp("timestamp_before", timestamp_before)
    return {
        "resource_entries": [
            {
                "allocation_id": e.allocation_id,
                "kind": e.kind,
                "experiment_id": e.experiment_id,
                "username": e.username,
                "user_id": e.user_id,
                "workspace": e.workspace,
                "resource_pool": e.resource_pool,
                "labels": list(e.labels),
                "slots": e.slots,
                "start_time": _iso(e.start_time),
                "end_time": _iso(e.end_time),
                "seconds": e.seconds,
            }
            for e in _entries(request, after, before)
        ]
    }


@router.get("/resources/allocation/aggregated", response_model=R.UsageAggregatedOut)
def allocation_aggregated(
    request: Request,
    start_date: str = Query(max_length=10),
    end_date: str = Query(max_length=10),
    period: str = Query("RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY", max_length=64),
) -> dict[str, Any]:
    """Slot-seconds per day or month, in total and by user, workspace, pool and label."""
    if period not in _PERIODS:
        raise HTTPException(400, f"period: {period!r} is not one of {', '.join(_PERIODS)}")
    after = _date("start_date", start_date)
    before = _date("end_date", end_date) + 86_400.0  # the end date is included
    entries = _entries(request, after, before)
    return {"resource_entries": usage.aggregate(entries, monthly=_PERIODS[period])}


@router.get("/resources/usage", response_model=R.UsageSummaryOut)
def usage_summary(request: Request, days: int = Query(30, ge=1, le=3660)) -> dict[str, Any]:
    """Slot-seconds of the last ``days`` days by user, workspace, pool and label."""
    until = time.time()
    since = until - days * 86_400.0
    entries = _entries(request, since, until)
    out: dict[str, Any] = {"since": _iso(since), "until": _iso(until)}
    out["total"] = usage.totals(entries, "total").get("total", 0.0)
    for group in usage.GROUPS:
        out[f"by_{group}"] = usage.totals(entries, group)
    return out
