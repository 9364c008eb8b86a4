"""REST routes of webhooks under ``/api/v1`` (Determined's paths and shapes, reference
§6.3; issue 31 scope 6).

| route | needs (on the webhook's workspace; the cluster for a global one) | answer |
|---|---|---|
| ``GET /webhooks`` | ``VIEW_WEBHOOKS`` (lists only those) | ``{webhooks}`` |
| ``POST /webhooks`` | ``EDIT_WEBHOOKS`` | ``{webhook}`` |
| ``PATCH /webhooks/{id}`` | ``EDIT_WEBHOOKS`` (only ``url`` changes) | ``{webhook}`` |
| ``DELETE /webhooks/{id}`` | ``EDIT_WEBHOOKS`` | ``{}`` |
| ``POST /webhooks/{id}/test`` | ``EDIT_WEBHOOKS``; sends a test event now | ``{completed}``; 502 if it fails |
| ``GET /webhooks/{id}/events`` | ``VIEW_WEBHOOKS``: the delivery log (ours) | ``{events}`` |
| ``POST /webhooks/custom`` | a trial's own token (``core.alert``) | ``{}`` |

Under ``security.authz.type: basic`` anyone may edit a workspace's webhooks and only an
admin a global one ("non admin users can't edit global webhooks", Determined's words).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .api_spec import INT32_MAX, DbId
from .auth import forbidden, principal
from .auth_access import require_own_trial
from .authz import read_target, require, visible
from .db import WebhookEventRow, WebhookRow, WebhookTriggerRow
from .errors import BadRequest, NotFound
from .models import webhooks as M
from .rbac import Perm
from .responses import Empty
from .responses import integrations as R
from .webhook_shipper import post

router = APIRouter(prefix="/api/v1")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TriggerIn(_Body):
    trigger_type: str = Field(max_length=64)
    condition: dict[str, Any] = Field(default_factory=dict)
    id: int | None = None
    webhook_id: int | None = None


class WebhookIn(_Body):
    name: str = Field(max_length=256)
    url: str = Field(max_length=2048)
    webhook_type: str = Field(default="WEBHOOK_TYPE_DEFAULT", max_length=32)
    mode: str = Field(default="WEBHOOK_MODE_WORKSPACE", max_length=32)
    workspace_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    triggers: list[TriggerIn] = Field(default_factory=list, max_length=M.MAX_TRIGGERS)
    id: int | None = None


class UrlIn(_Body):
    url: str = Field(max_length=2048)


class CustomData(_Body):
    level: Literal["debug", "info", "warn", "warning", "error", ""] = "info"
    title: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=65_536)


class CustomIn(_Body):
    data: CustomData
    experiment_id: int = Field(ge=0, le=INT32_MAX)
    trial_id: int = Field(ge=0, le=INT32_MAX)


def _ctx(request: Request) -> Any:
    return request.app.state.ctx


def _parse(model: type[BaseModel], body: Any, key: str) -> Any:
    """``body``, or ``body[key]`` when that is all it holds (Determined's clients send
    both forms)."""
    if isinstance(body, dict) and set(body) == {key} and isinstance(body[key], dict):
        body = body[key]
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(
            "invalid request",
            [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()],
        ) from None


def webhook_views(s: Any, rows: list[WebhookRow]) -> list[dict[str, Any]]:
    """The API form of ``rows`` (``workspace_id`` 0: global)."""
    triggers = M.triggers_of(s, [r.id for r in rows])
    return [
        {
            "id": r.id,
            "name": r.name,
            "url": r.url,
            "webhook_type": r.webhook_type,
            "mode": r.mode,
            "workspace_id": r.workspace_id or 0,
            "triggers": [_trigger(t) for t in triggers[r.id]],
        }
        for r in rows
    ]


def _trigger(t: WebhookTriggerRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "trigger_type": t.trigger_type,
        "condition": t.condition,
        "webhook_id": t.webhook_id,
    }


def _require(request: Request, workspace_id: int | None, perm: Perm) -> None:
    """``perm`` on workspace ``workspace_id``, or on the cluster (and, under basic
    authz, admin) for a global webhook."""
    if workspace_id is None:
        az = request.app.state.authz
        who = principal(request)
        if perm == Perm.EDIT_WEBHOOKS and az.basic and not az.is_admin(who):
            raise forbidden("non admin users can't edit global webhooks")
        require(request, None, perm=perm)
        return
    target = read_target(request, "workspace", workspace_id)
    if target is None:
        raise NotFound(f"workspace {workspace_id} not found")
    require(request, target, perm=perm)


def _existing(request: Request, webhook_id: int, perm: Perm) -> WebhookRow:
    with _ctx(request).db.read() as s:
        row = M.read_webhook(s, webhook_id)
        s.expunge(row)
    _require(request, row.workspace_id, perm)
    return row


@router.get("/webhooks", response_model=R.WebhooksOut)
def list_webhooks(request: Request) -> dict[str, Any]:
    """The webhooks the caller may view (global ones with ``VIEW_WEBHOOKS`` on the
    cluster)."""
    seen = visible(request)
    with _ctx(request).db.read() as s:
        return {"webhooks": webhook_views(s, M.read_webhooks(s, seen))}


@router.post("/webhooks", response_model=R.WebhookOut)
async def post_webhook(request: Request) -> dict[str, Any]:
    """Create a webhook (body: the webhook, or ``{webhook: ...}``)."""
    body = _parse(WebhookIn, await _json(request), "webhook")
    ws = body.workspace_id or None
    await run_in_threadpool(_require, request, ws, Perm.EDIT_WEBHOOKS)
    who = principal(request)

    def create(s: Any, c: Any) -> dict[str, Any]:
        row = M.create_webhook(
            s,
            name=body.name,
            url=body.url,
            webhook_type=body.webhook_type,
            mode=body.mode,
            workspace_id=ws,
            triggers=[t.model_dump(include={"trigger_type", "condition"}) for t in body.triggers],
            user_id=who.user_id,
            now=c.clock(),
        )
        return webhook_views(s, [row])[0]

    return {"webhook": await run_in_threadpool(_ctx(request).write, create)}


async def _json(request: Request) -> Any:
    from dauntless.config import LimitError, load_json

    try:
        return load_json(await request.body(), "body")
    except LimitError as exc:
        raise BadRequest(f"invalid request: {exc}", exc.errors) from None


@router.patch("/webhooks/{webhook_id}", response_model=R.WebhookOut)
async def patch_webhook(webhook_id: DbId, request: Request) -> dict[str, Any]:
    """Change a webhook's URL (body ``{webhook: {url}}`` or ``{url}``)."""
    body = _parse(UrlIn, await _json(request), "webhook")
    await run_in_threadpool(_existing, request, webhook_id, Perm.EDIT_WEBHOOKS)

    def update(s: Any, _c: Any) -> dict[str, Any]:
        return webhook_views(s, [M.update_url(s, webhook_id, body.url)])[0]

    return {"webhook": await run_in_threadpool(_ctx(request).write, update)}


@router.delete("/webhooks/{webhook_id}", response_model=Empty)
def delete_webhook(webhook_id: DbId, request: Request) -> dict[str, Any]:
    """Delete a webhook (its queued events are dropped)."""
    _existing(request, webhook_id, Perm.EDIT_WEBHOOKS)
    _ctx(request).write(lambda s, _c: M.delete_webhook(s, webhook_id))
    return {}


@router.post("/webhooks/{webhook_id}/test", response_model=R.Completed)
def test_webhook(webhook_id: DbId, request: Request) -> dict[str, Any]:
    """Send a test event to the webhook now (not queued); 502 naming the failure when
    the request fails or answers an error."""
    from .webhooks import render

    row = _existing(request, webhook_id, Perm.EDIT_WEBHOOKS)
    ctx = _ctx(request)
    now = ctx.clock()
    body = render(row, "TEST", {}, {"data": "test event from Dauntless"}, now)
    import httpx

    with httpx.Client(timeout=ctx.config.webhooks.timeout) as client:
        status, error = post(client, row.url, body.encode(), ctx.webhooks.key, now)
    if status is None or status >= 300:
        from fastapi import HTTPException

        raise HTTPException(
            502, f"webhook {webhook_id}: the test request failed: {error or f'HTTP {status}'}"
        )
    return {"completed": True}


@router.get("/webhooks/{webhook_id}/events", response_model=R.WebhookEventsOut)
def webhook_events(
    webhook_id: DbId, request: Request, limit: int = Query(100, ge=1, le=10_000)
) -> dict[str, Any]:
    """The delivery log of a webhook: its newest ``limit`` events, newest first."""
    _existing(request, webhook_id, Perm.VIEW_WEBHOOKS)
    with _ctx(request).db.read() as s:
        rows = M.read_events(s, webhook_id, limit)
        return {"events": [_event(e) for e in rows]}


def _event(e: WebhookEventRow) -> dict[str, Any]:
    return {
        "id": e.id,
        "webhook_id": e.webhook_id,
        "event_type": e.event_type,
        "state": e.state,
        "attempts": e.attempts,
        "created_at": e.created_at,
        "next_at": e.next_at,
        "delivered_at": e.delivered_at,
        "last_status": e.last_status,
        "last_error": e.last_error,
    }


@router.post("/webhooks/custom", response_model=Empty)
def custom_alert(body: CustomIn, request: Request) -> dict[str, Any]:
    """A custom alert from a trial (``core.alert``): queued for the webhooks with a
    custom trigger that its experiment's config names."""
    require_own_trial(request, body.trial_id)
    data = {
        "title": body.data.title or "",
        "description": body.data.description or "",
        "level": body.data.level or "info",
    }

    _ctx(request).write(
        lambda s, c: M.custom_alert(s, c.webhooks, body.experiment_id, body.trial_id, data)
    )
    return {}
