"""Shared bases and the small answers of several aggregates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Empty(BaseModel):
    """``{}``: the request was applied."""

    model_config = ConfigDict(extra="forbid")


class Stored(BaseModel):
    """Whether the report was new (False: a repeat, ignored)."""

    stored: bool


class StoredMany(BaseModel):
    stored: list[bool]


class StoredCount(BaseModel):
    stored: int
