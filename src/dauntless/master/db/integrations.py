"""ORM models of config templates and webhooks (issue 31 scopes 5 and 6; migration
``0021_templates_webhooks``).

A template's ``name`` is its key on the whole cluster (Determined's primary key); its
``workspace_id`` decides who may see and change it. A webhook's triggers are rows of
their own; its events are the queue and the delivery log at once: one row per event
and webhook, with its state (``QUEUED``, ``DELIVERED``, ``FAILED``), tries, last answer
and times.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class TemplateRow(Base):
    """A config template: ``config`` is a mapping merged under submitted configs."""

    __tablename__ = "templates"

    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class WebhookRow(Base):
    """A webhook: where events go (``url``), in which form (``webhook_type``
    ``WEBHOOK_TYPE_DEFAULT`` or ``WEBHOOK_TYPE_SLACK``), for which experiments
    (``workspace_id`` None: every workspace; ``mode`` ``WEBHOOK_MODE_WORKSPACE`` or
    ``WEBHOOK_MODE_SPECIFIC``)."""

    __tablename__ = "webhooks"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(256), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    webhook_type: Mapped[str] = mapped_column(String(32))
    mode: Mapped[str] = mapped_column(String(32))
    workspace_id: Mapped[int | None] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=True, index=True
    )
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)


class WebhookTriggerRow(Base):
    """One trigger of a webhook: ``trigger_type`` (``TRIGGER_TYPE_*``) and its
    ``condition`` (``{"state": ...}``, ``{"regex": ...}`` or ``{}``)."""

    __tablename__ = "webhook_triggers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    trigger_type: Mapped[str] = mapped_column(String(64))
    condition: Mapped[dict[str, Any]] = mapped_column(JSON)


class WebhookEventRow(Base):
    """One event to deliver to one webhook, and how its delivery went.

    ``body`` is the exact request body (signed as sent); ``dedup`` is unique where set
    (a task-log trigger fires once per task and trigger); ``next_at`` is when the next
    try is due (seconds since the epoch).
    """

    __tablename__ = "webhook_events"
    __table_args__ = (
        Index("ix_webhook_events_state_next_at", "state", "next_at"),
        Index("ix_webhook_events_dedup", "dedup", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    event_type: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    dedup: Mapped[str | None] = mapped_column(String(256), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(1024), nullable=True)
