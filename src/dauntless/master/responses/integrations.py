"""Answers of the template and webhook routes (Determined's shapes, reference §6.1 and
§6.3; issue 31)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .teams import Pagination


class TemplateView(BaseModel):
    """A config template: ``config`` is the mapping merged under submitted configs."""

    name: str
    config: dict[str, Any]
    workspace_id: int


class TemplateOut(BaseModel):
    template: TemplateView


class TemplatesOut(BaseModel):
    templates: list[TemplateView]
    pagination: Pagination


class TriggerView(BaseModel):
    """A webhook's trigger: ``trigger_type`` ``TRIGGER_TYPE_*`` and its ``condition``."""

    id: int
    trigger_type: str
    condition: dict[str, Any]
    webhook_id: int


class WebhookView(BaseModel):
    """A webhook (``workspace_id`` 0: global)."""

    id: int
    name: str
    url: str
    webhook_type: str
    mode: str
    workspace_id: int
    triggers: list[TriggerView]


class WebhookOut(BaseModel):
    webhook: WebhookView


class WebhooksOut(BaseModel):
    webhooks: list[WebhookView]


class WebhookEventView(BaseModel):
    """One event of a webhook's delivery log: ``state`` ``QUEUED``, ``DELIVERED`` or
    ``FAILED``; ``attempts`` made; the last HTTP status or transport error; times in
    seconds since the epoch."""

    id: int
    webhook_id: int
    event_type: str
    state: str
    attempts: int
    created_at: float
    next_at: float
    delivered_at: float | None
    last_status: int | None
    last_error: str | None


class WebhookEventsOut(BaseModel):
    events: list[WebhookEventView]


class Completed(BaseModel):
    """``{completed: true}``: done."""

    completed: bool
