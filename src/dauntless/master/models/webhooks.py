"""Webhooks' rows (issue 31 scope 6; reference §6.3): create (with Determined's checks),
read, list, change the URL, delete, and the delivery log of one webhook.

Matching events to webhooks and queueing them is :mod:`dauntless.master.webhooks`;
delivering them is :mod:`dauntless.master.webhook_shipper`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import regex
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..db import (
    ExperimentRow,
    TrialRow,
    WebhookEventRow,
    WebhookRow,
    WebhookTriggerRow,
    WorkspaceRow,
)
from ..errors import BadRequest, NotFound
from ..states import State
from ..webhooks import (
    CUSTOM,
    MODE_SPECIFIC,
    MODE_WORKSPACE,
    STATE_CHANGE,
    TASK_LOG,
    TRIGGER_TYPES,
    WEBHOOK_TYPES,
    compile_log_regex,
)

MAX_TRIGGERS = 100
"""The most triggers one webhook may have."""

MAX_REGEX = 1024
"""The longest task-log regex, in characters."""


def check_url(url: str) -> str:
    """An ``http``/``https`` URL with a host.

    Raises:
        BadRequest: anything else ("valid url required", Determined's words).
    """
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest("valid url required", [("url", "an http:// or https:// URL")])
    return url.strip()


def _state(value: Any) -> str:
    text = value.removeprefix("STATE_") if isinstance(value, str) else ""
    if text not in State.__members__:
        raise BadRequest(
            "invalid trigger condition: state must be an experiment state",
            [("triggers.condition.state", "one of " + ", ".join(State.__members__))],
        )
    return text


def check_triggers(triggers: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Determined's checks of a new webhook's triggers; returns them normalised
    (``state`` without a ``STATE_`` prefix).

    Raises:
        BadRequest: no trigger ("at least one trigger required"), an unknown type, a
            state-change condition without a known ``state``, a task-log condition that
            is not exactly ``{"regex": str}`` (or does not compile), a custom trigger of a
            webhook whose mode is not ``WEBHOOK_MODE_SPECIFIC``.
    """
    if not triggers:
        raise BadRequest("at least one trigger required", [("triggers", "at least one")])
    if len(triggers) > MAX_TRIGGERS:
        raise BadRequest(f"at most {MAX_TRIGGERS} triggers", [("triggers", "too many")])
    out = []
    for t in triggers:
        kind = t.get("trigger_type")
        cond = t.get("condition") or {}
        if kind not in TRIGGER_TYPES or not isinstance(cond, dict):
            raise BadRequest(
                f"invalid trigger_type {kind!r}",
                [("triggers.trigger_type", "one of " + ", ".join(TRIGGER_TYPES))],
            )
        if kind == STATE_CHANGE:
            cond = {"state": _state(cond.get("state"))}
        elif kind == TASK_LOG:
            pattern = cond.get("regex")
            if set(cond) != {"regex"} or not isinstance(pattern, str) or len(pattern) > MAX_REGEX:
                raise BadRequest(
                    "task log trigger condition must have exactly one key 'regex' of type string",
                    [("triggers.condition", '{"regex": "<at most 1024 characters>"}')],
                )
            try:
                compile_log_regex(pattern)
            except regex.error as exc:
                raise BadRequest(
                    f"invalid task log regex: {exc}", [("triggers.condition.regex", str(exc))]
                ) from None
        elif kind == CUSTOM and mode != MODE_SPECIFIC:
            raise BadRequest(
                "custom trigger only works on webhook with mode 'SPECIFIC'",
                [("triggers.trigger_type", "needs mode WEBHOOK_MODE_SPECIFIC")],
            )
        out.append({"trigger_type": kind, "condition": cond})
    return out


def create_webhook(
    s: Session,
    *,
    name: str,
    url: str,
    webhook_type: str,
    mode: str,
    workspace_id: int | None,
    triggers: list[dict[str, Any]],
    user_id: int | None,
    now: float,
) -> WebhookRow:
    """Create a webhook and its triggers (``workspace_id`` None: global).

    Raises:
        BadRequest: a bad name, URL, type, mode or trigger (see :func:`check_triggers`).
        NotFound: no such workspace.
    """
    name = name.strip()
    if not name or len(name) > 256:
        raise BadRequest("invalid webhook name: 1-256 characters", [("name", "1-256 characters")])
    url = check_url(url)
    if webhook_type not in WEBHOOK_TYPES:
        raise BadRequest(
            f"invalid webhook_type {webhook_type!r}",
            [("webhook_type", "one of " + ", ".join(WEBHOOK_TYPES))],
        )
    if mode not in (MODE_WORKSPACE, MODE_SPECIFIC):
        raise BadRequest(
            f"invalid mode {mode!r}", [("mode", f"{MODE_WORKSPACE} or {MODE_SPECIFIC}")]
        )
    checked = check_triggers(triggers, mode)
    if workspace_id is not None and s.get(WorkspaceRow, workspace_id) is None:
        raise NotFound(f"workspace {workspace_id} not found")
    row = WebhookRow(
        name=name,
        url=url,
        webhook_type=webhook_type,
        mode=mode,
        workspace_id=workspace_id,
        user_id=user_id,
        created_at=now,
    )
    s.add(row)
    s.flush()
    for t in checked:
        s.add(WebhookTriggerRow(webhook_id=row.id, **t))
    s.flush()
    return row


def read_webhook(s: Session, webhook_id: int) -> WebhookRow:
    """Webhook ``webhook_id``.

    Raises:
        NotFound: no such webhook.
    """
    row = s.get(WebhookRow, webhook_id)
    if row is None:
        raise NotFound(f"webhook {webhook_id} not found")
    return row


def read_webhooks(s: Session, visible: set[int] | None) -> list[WebhookRow]:
    """The webhooks of the workspaces in ``visible`` (None: every webhook, global ones
    included; global ones need the permission on the cluster, i.e. ``visible`` None)."""
    q = select(WebhookRow).order_by(WebhookRow.id)
    if visible is not None:
        q = q.where(WebhookRow.workspace_id.in_(sorted(visible)))
    return list(s.scalars(q))


def triggers_of(s: Session, webhook_ids: list[int]) -> dict[int, list[WebhookTriggerRow]]:
    """The triggers of each webhook in ``webhook_ids``."""
    out: dict[int, list[WebhookTriggerRow]] = {i: [] for i in webhook_ids}
    if webhook_ids:
        q = select(WebhookTriggerRow).where(WebhookTriggerRow.webhook_id.in_(webhook_ids))
        for t in s.scalars(q.order_by(WebhookTriggerRow.id)):
            out[t.webhook_id].append(t)
    return out


def update_url(s: Session, webhook_id: int, url: str) -> WebhookRow:
    """Set webhook ``webhook_id``'s URL (the one field Determined lets change).

    Raises:
        NotFound: no such webhook. BadRequest: not a URL.
    """
    row = read_webhook(s, webhook_id)
    row.url = check_url(url)
    return row


def delete_webhook(s: Session, webhook_id: int) -> None:
    """Delete a webhook, its triggers and its queued and logged events.

    Raises:
        NotFound: no such webhook.
    """
    row = read_webhook(s, webhook_id)
    for model in (WebhookEventRow, WebhookTriggerRow):
        s.execute(delete(model).where(model.webhook_id == webhook_id))
    s.delete(row)


def custom_alert(
    s: Session, webhooks: Any, experiment_id: int, trial_id: int, data: dict[str, Any]
) -> int:
    """Queue a custom alert of trial ``trial_id`` of experiment ``experiment_id``
    (``core.alert``) through ``webhooks`` (:class:`~dauntless.master.webhooks.Webhooks`);
    returns how many webhooks take it.

    Raises:
        NotFound: no such trial in that experiment.
    """
    trial = s.get(TrialRow, trial_id)
    exp = s.get(ExperimentRow, experiment_id)
    if trial is None or exp is None or trial.experiment_id != experiment_id:
        raise NotFound(f"trial {trial_id} of experiment {experiment_id} not found")
    return int(webhooks.custom(s, exp, trial_id, data))


def read_events(s: Session, webhook_id: int, limit: int) -> list[WebhookEventRow]:
    """The newest ``limit`` events of webhook ``webhook_id``, newest first."""
    q = select(WebhookEventRow).where(WebhookEventRow.webhook_id == webhook_id)
    return list(s.scalars(q.order_by(WebhookEventRow.id.desc()).limit(limit)))
