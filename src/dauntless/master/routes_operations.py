"""The cluster message and log retention under ``/api/v1`` (issue 34 scope 4;
:mod:`dauntless.master.models.operations`). Determined's routes and shapes:

| route | who | body / answer |
|---|---|---|
| ``GET /master/cluster_message`` | anyone signed in | ``{"clusterMessage": {message, startTime, endTime, createdTime} | null}`` |
| ``PUT /master/cluster_message`` | UPDATE_MASTER_CONFIG | ``{message, start_time?, end_time?, duration?}`` (times RFC 3339 or seconds since the epoch; ``duration`` ``1h30m``; not with ``end_time``) |
| ``DELETE /master/cluster_message`` | UPDATE_MASTER_CONFIG | ``{}`` |
| ``PUT /experiments/{id}/retain_logs`` | UPDATE_EXPERIMENT on it | ``{num_days}`` (-1: forever) |
| ``POST /cleanup_logs`` | an admin | ``{"removedCount"}``: deletes expired logs now |
"""

from __future__ import annotations

import datetime as _dt
import time
import urllib.parse
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from dauntless.config import parse_duration

from .api_spec import DbId
from .auth import principal
from .db import ClusterMessageRow
from .models import operations
from .responses import Empty
from .responses import operations as R
from .routes import _ctx, _read

router = APIRouter(prefix="/api/v1")


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def message_view(row: ClusterMessageRow | None) -> dict[str, Any] | None:
    """Determined's ClusterMessage JSON of a row (times RFC 3339), or None."""
    if row is None:
        return None
    return {
        "message": row.message,
        "startTime": _iso(row.start_time),
        "endTime": _iso(row.end_time),
        "createdTime": _iso(row.created_at),
    }


def _cache(request: Request) -> operations.ClusterMessageCache:
    return request.app.state.cluster_message


CLUSTER_MESSAGE_HEADER = "X-Det-Cluster-Message"
"""The header of every ``/api/v1`` answer while a cluster message shows: the message,
percent-encoded UTF-8 (headers are Latin-1); the CLI prints it once per command."""


class ClusterMessageHeader:
    """ASGI middleware adding :data:`CLUSTER_MESSAGE_HEADER` to ``/api/v1`` answers.

    Args:
        app: the wrapped ASGI application.
        cache: the message cache (``app.state.cluster_message``).
    """

    def __init__(self, app: Any, cache: operations.ClusterMessageCache) -> None:
        self.app = app
        self.cache = cache

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/v1/"):
            await self.app(scope, receive, send)
            return
        message = self.cache.current(time.time())
        if message is None:
            await self.app(scope, receive, send)
            return
        value = urllib.parse.quote(message, safe=" ").encode("latin-1")

        async def send_with(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                msg = {
                    **msg,
                    "headers": [*msg.get("headers", []), (b"x-det-cluster-message", value)],
                }
            await send(msg)

        await self.app(scope, receive, send_with)


LATEST_TIME = 253_402_300_799.0
"""The last second of year 9999 (seconds since the epoch): the latest start or end time a
cluster message may have (later ones cannot be written as RFC 3339 times)."""


def _bounded(name: str, t: float | None) -> float | None:
    """``t`` (seconds since the epoch) if finite and within 0..LATEST_TIME; else 400."""
    if t is not None and not (0.0 <= t <= LATEST_TIME):
        raise HTTPException(400, f"{name}: expected a time between 1970 and 9999, got {t!r}")
    return t


def _time(name: str, value: str | float | None) -> float | None:
    if value is None or isinstance(value, float | int):
        return None if value is None else _bounded(name, float(value))
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"{name}: {value!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return _bounded(name, parsed.timestamp())


class SetClusterMessage(BaseModel):
    """Body of ``PUT /master/cluster_message`` (Determined's SetClusterMessageRequest)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    message: str = Field(max_length=operations.MAX_MESSAGE_CHARS)
    start_time: str | float | None = Field(default=None, alias="startTime")
    end_time: str | float | None = Field(default=None, alias="endTime")
    duration: str | None = Field(default=None, max_length=64)


@router.get("/master/cluster_message", response_model=R.ClusterMessageOut)
def get_cluster_message(request: Request) -> dict[str, Any]:
    """The message showing now, or null."""
    row = _read(request, operations.cluster_message, time.time())
    return {"clusterMessage": message_view(row)}


@router.put("/master/cluster_message", response_model=R.ClusterMessageOut)
def put_cluster_message(body: SetClusterMessage, request: Request) -> dict[str, Any]:
    """Show a message to every user (WebUI banner, CLI)."""
    if body.duration is not None and body.end_time is not None:
        raise HTTPException(400, "duration: give end_time or duration, not both")
    now = time.time()
    start = _time("start_time", body.start_time)
    end = _time("end_time", body.end_time)
    if body.duration is not None:
        try:
            seconds = float(parse_duration(body.duration))
        except ValueError as exc:
            raise HTTPException(400, f"duration: {exc}") from None
        end = _bounded("duration", (start if start is not None else now) + seconds)
    user_id = principal(request).user_id

    def put(s: Any, ctx: Any) -> dict[str, Any] | None:
        row = operations.set_cluster_message(s, now, user_id, body.message, start, end)
        view = message_view(row)
        _cache(request).load(s, now)
        return view

    return {"clusterMessage": _ctx(request).write(put)}


@router.delete("/master/cluster_message", response_model=Empty)
def delete_cluster_message(request: Request) -> dict[str, Any]:
    """End the message showing (and any scheduled)."""

    def clear(s: Any, ctx: Any) -> None:
        now = time.time()
        operations.clear_cluster_message(s, now)
        s.flush()
        _cache(request).load(s, now)

    _ctx(request).write(clear)
    return {}


class RetainLogs(BaseModel):
    """Body of ``PUT /experiments/{id}/retain_logs``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    num_days: int = Field(alias="numDays", ge=-1, le=32767)


@router.put("/experiments/{exp_id}/retain_logs", response_model=Empty)
def retain_logs(exp_id: DbId, body: RetainLogs, request: Request) -> dict[str, Any]:
    """Keep the experiment's trial logs ``num_days`` days after each trial ends."""
    _ctx(request).write(lambda s, ctx: operations.set_log_retention(s, exp_id, body.num_days))
    return {}


@router.post("/cleanup_logs", response_model=R.CleanupLogsOut)
async def cleanup_logs(request: Request) -> dict[str, Any]:
    """Delete the logs past their retention now (in bounded batches)."""
    ctx = _ctx(request)
    removed = await run_in_threadpool(
        operations.delete_expired_logs,
        ctx.db,
        time.time(),
        ctx.config.retention_policy.log_retention_days,
    )
    return {"removedCount": removed}
