"""The master's own operation under ``/api/v1/master`` (issue 34 scope 4;
:mod:`dauntless.master.master_ops`).

| route | who | answer |
|---|---|---|
| ``GET /master/logs`` ``?offset&limit`` | VIEW_MASTER_LOGS | ``{"logs": [{id, timestamp, level, message}]}`` (no ``follow`` stream, unlike Determined's: a follower polls with ``offset``) |
| ``GET /master/config`` | VIEW_MASTER_CONFIG | ``{"config": {...}}``, secrets shown as ``********``, ``log.level`` the level now |
| ``PATCH /master/config`` | UPDATE_MASTER_CONFIG | body ``{"config": {"log": {"level"}}, "field_mask": {"paths": ["log.level"]}}``; only the log level changes at run time, until the master stops |

``offset``: the first line id to return (0: the oldest kept); negative ``offset=-N``
gives the newest N lines (``det master logs --tail N``).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from .master_ops import LEVELS, MasterLogBuffer, current_log_level, redacted_config, set_log_level
from .responses import operations as R

router = APIRouter(prefix="/api/v1")
log = logging.getLogger("dauntless.master")


def _buffer(request: Request) -> MasterLogBuffer:
    return request.app.state.master_logs


@router.get("/master/logs", response_model=R.MasterLogsOut)
def master_logs(
    request: Request,
    offset: int = Query(0, ge=-100_000, le=2**53, description="first id; -N: the last N"),
    limit: int = Query(1000, ge=1, le=100_000, description="the most lines per answer"),
) -> dict[str, Any]:
    """The master's recent log lines (the newest 10,000 are kept). A follower asks again
    with ``offset`` one past the last id it saw (``det master logs -f`` polls)."""
    buf = _buffer(request)
    if offset < 0:
        return {"logs": buf.read(tail=-offset, limit=limit)}
    return {"logs": buf.read(after_id=max(offset - 1, 0), limit=limit)}


@router.get("/master/config", response_model=R.MasterConfigOut)
def master_config(request: Request) -> dict[str, Any]:
    """The master's config, secrets redacted, with the log level in force now."""
    doc = redacted_config(request.app.state.config)
    doc["log"] = {"level": current_log_level()}
    return {"config": doc}


class _LogSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: str | None = Field(default=None, max_length=16)
    color: bool | None = None


class _ConfigPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    log: _LogSettings


class _FieldMask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(max_length=8)


class PatchMasterConfig(BaseModel):
    """Body of ``PATCH /master/config`` (Determined's PatchMasterConfigRequest)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    config: _ConfigPatch
    field_mask: _FieldMask = Field(alias="fieldMask")


@router.patch("/master/config", response_model=R.PatchMasterConfigOut)
def patch_master_config(body: PatchMasterConfig, request: Request) -> dict[str, Any]:
    """Change the settings the master takes while it runs: ``log.level`` only
    (``log.color`` is accepted and ignored with a warning: the master logs no colour)."""
    warnings = []
    for path in body.field_mask.paths:
        if path == "log.level":
            level = (body.config.log.level or "").lower()
            try:
                set_log_level(level)
            except ValueError as exc:
                raise HTTPException(400, str(exc)) from None
            log.warning("log level set to %s", level)
        elif path == "log.color":
            warnings.append("log.color: the master's log has no colour; nothing changed")
        else:
            raise HTTPException(
                400,
                f"field_mask.paths: {path!r} cannot change while the master runs "
                "(only log.level; edit the config file and restart for the rest)",
            )
    return {"config": {"log": {"level": current_log_level()}}, "warnings": warnings}


__all__ = ["LEVELS", "router"]
