"""Webhooks: which events go to which webhook, in what form, signed how (issue 31 scope
6; reference §6.3, Determined's ``master/internal/webhooks``).

**Triggers.** ``TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE`` (condition ``{"state": S}``)
fires when an experiment enters exactly state S (:meth:`Webhooks.on_experiment_state`,
called by the one state setter, ``models.search.set_experiment_state``);
``TRIGGER_TYPE_TASK_LOG`` (condition ``{"regex": R}``) fires the first time a line of a
trial's logs matches R, at most once per trial and trigger (:meth:`Webhooks.on_logs`,
called by log ingestion); ``TRIGGER_TYPE_CUSTOM`` fires on ``core.alert`` from a trial
(:meth:`Webhooks.custom`).

**Which webhooks.** An experiment whose config says ``integrations.webhooks.exclude:
true`` sends nothing. A ``WEBHOOK_MODE_WORKSPACE`` webhook takes the events of every
experiment of its workspace (every workspace when it has none: a global webhook); a
``WEBHOOK_MODE_SPECIFIC`` one only those of experiments whose config names it
(``integrations.webhooks.webhook_id`` / ``webhook_name``), within its workspace if it has
one. Custom alerts go only to webhooks with a custom trigger that the experiment names.

**Queue.** An event is a ``webhook_events`` row written in the same transaction as the
change that caused it (it exists exactly when the change was committed); the
:class:`~dauntless.master.webhook_shipper.Shipper` delivers it after the commit, in the
background, so a slow or absent receiver never holds up the master.

**Signature.** ``X-Determined-AI-Signature-Timestamp: T`` and
``X-Determined-AI-Signature: hex(HMAC-SHA256(key, f"{T},".encode() + body))``
(Determined's scheme). The key is ``webhooks.signing_key``, else a random one kept in
``<data_dir>/webhook_signing_key`` (mode 0600); no route shows it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import regex
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from dauntless.config import MasterConfig

from .db import (
    Database,
    ExperimentRow,
    ProjectRow,
    TaskLogRow,
    TrialRow,
    WebhookEventRow,
    WebhookRow,
    WebhookTriggerRow,
    WorkspaceRow,
)

log = logging.getLogger("dauntless.master.webhooks")

SIGNING_KEY_FILE = "webhook_signing_key"
"""The file in the data directory holding the generated signing key."""

STATE_CHANGE = "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE"
TASK_LOG = "TRIGGER_TYPE_TASK_LOG"
CUSTOM = "TRIGGER_TYPE_CUSTOM"
METRIC_THRESHOLD = "TRIGGER_TYPE_METRIC_THRESHOLD_EXCEEDED"
TRIGGER_TYPES = (STATE_CHANGE, TASK_LOG, CUSTOM, METRIC_THRESHOLD)
WEBHOOK_TYPES = ("WEBHOOK_TYPE_DEFAULT", "WEBHOOK_TYPE_SLACK")
MODE_WORKSPACE, MODE_SPECIFIC = "WEBHOOK_MODE_WORKSPACE", "WEBHOOK_MODE_SPECIFIC"
MATCH_TIMEOUT = 0.05
"""Seconds one task-log regex may take on one line; a trigger whose regex takes longer is
switched off (until the master restarts, logged as a warning) so that log ingestion
never waits on it."""

MAX_FIRED = 100_000
"""The most (trigger, trial) pairs of fired task-log triggers remembered in memory (a
quick skip; past it the unique ``dedup`` rows are what keep each pair to one event)."""

EVENT_TYPES = {STATE_CHANGE: "EXPERIMENT_STATE_CHANGE", TASK_LOG: "TASK_LOG", CUSTOM: "CUSTOM"}


def load_signing_key(config: MasterConfig) -> bytes:
    """The webhook signing key: ``webhooks.signing_key``, else the one in
    ``<data_dir>/webhook_signing_key``, made (random, mode 0600) when missing.

    Raises:
        ValueError: ``webhooks.signing_key`` is set but empty.
    """
    if config.webhooks.signing_key is not None:
        value = config.webhooks.signing_key.get_secret_value()
        if not value:
            raise ValueError("webhooks.signing_key must not be empty")
        return value.encode()
    path = os.path.join(config.data_dir, SIGNING_KEY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value.encode()
    except FileNotFoundError:
        pass
    value = secrets.token_hex(32)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)
    return value.encode()


def signature(key: bytes, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``"<timestamp>,<body>"`` under ``key`` (Determined's
    ``X-Determined-AI-Signature``)."""
    return hmac.new(key, f"{timestamp},".encode() + body, hashlib.sha256).hexdigest()


def signed_headers(key: bytes, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one delivery of ``body`` at ``timestamp`` (seconds)."""
    return {
        "Content-Type": "application/json; charset=UTF-8",
        "X-Determined-AI-Signature-Timestamp": str(timestamp),
        "X-Determined-AI-Signature": signature(key, timestamp, body),
    }


@dataclass(frozen=True)
class Trigger:
    id: int
    trigger_type: str
    condition: dict[str, Any]
    regex: regex.Pattern[str] | None


@dataclass(frozen=True)
class Hook:
    """A webhook as the matcher holds it (a snapshot of its rows)."""

    id: int
    name: str
    url: str
    webhook_type: str
    mode: str
    workspace_id: int | None
    triggers: tuple[Trigger, ...]


def _hook(row: WebhookRow, triggers: list[WebhookTriggerRow]) -> Hook:
    return Hook(
        row.id,
        row.name,
        row.url,
        row.webhook_type,
        row.mode,
        row.workspace_id,
        tuple(
            Trigger(
                t.id,
                t.trigger_type,
                dict(t.condition or {}),
                compile_log_regex(t.condition["regex"]) if t.trigger_type == TASK_LOG else None,
            )
            for t in triggers
        ),
    )


def compile_log_regex(pattern: str) -> regex.Pattern[str]:
    """A task-log trigger's regex, compiled with the ``regex`` library (Python's ``re``
    syntax) rather than ``re``: its matches take a timeout, so a pattern that backtracks
    without end cannot hold up log ingestion (:data:`MATCH_TIMEOUT`).

    Raises:
        regex.error: not a valid pattern.
    """
    return regex.compile(pattern)


def integrations(exp: ExperimentRow) -> dict[str, Any]:
    """The experiment config's ``integrations.webhooks`` (empty when not given)."""
    section = (exp.config or {}).get("integrations") or {}
    hooks = section.get("webhooks") if isinstance(section, dict) else None
    return hooks if isinstance(hooks, dict) else {}


def matches(hook: Hook, workspace_id: int, integ: dict[str, Any], custom: bool = False) -> bool:
    """Whether ``hook`` takes an event of an experiment of workspace ``workspace_id``
    whose ``integrations.webhooks`` is ``integ`` (see the module)."""
    if integ.get("exclude"):
        return False
    if hook.workspace_id is not None and hook.workspace_id != workspace_id:
        return False
    named = hook.id in (integ.get("webhook_id") or []) or hook.name in (
        integ.get("webhook_name") or []
    )
    if custom or hook.mode == MODE_SPECIFIC:
        return named
    return True


class Webhooks:
    """The matcher and queue of webhook events (one per master, ``ctx.webhooks``).

    Args:
        db: the master database (for the change flag of webhooks and triggers).
        config: the master config (``webhooks``, ``data_dir``).
        clock: seconds since the epoch.
    """

    def __init__(self, db: Database, config: MasterConfig, clock: Any) -> None:
        self.config = config.webhooks
        self.clock = clock
        self._master_config = config
        self._key: bytes | None = None
        self.wake = threading.Event()
        self._changes = db.change_flag((WebhookRow, WebhookTriggerRow))
        self._lock = threading.Lock()
        self._version = -1
        self._hooks: tuple[Hook, ...] = ()
        self._fired: set[tuple[int, int]] = set()
        self._slow: set[int] = set()  # task-log triggers switched off (MATCH_TIMEOUT)

    @property
    def key(self) -> bytes:
        """The signing key (read or made on first use: :func:`load_signing_key`)."""
        with self._lock:
            if self._key is None:
                self._key = load_signing_key(self._master_config)
            return self._key

    # ------------------------------------------------------------------ the hooks

    def hooks(self, s: Session) -> tuple[Hook, ...]:
        """Every webhook with its triggers (read in ``s`` again only after a change)."""
        version = self._changes.version()
        with self._lock:
            if version == self._version:
                return self._hooks
        rows = list(s.scalars(select(WebhookRow).order_by(WebhookRow.id)))
        triggers: dict[int, list[WebhookTriggerRow]] = {}
        for t in s.scalars(select(WebhookTriggerRow).order_by(WebhookTriggerRow.id)):
            triggers.setdefault(t.webhook_id, []).append(t)
        hooks = tuple(_hook(r, triggers.get(r.id, [])) for r in rows)
        with self._lock:
            self._version, self._hooks = version, hooks
        return hooks

    def _wanted(self, s: Session, kind: str) -> list[tuple[Hook, Trigger]]:
        return [(h, t) for h in self.hooks(s) for t in h.triggers if t.trigger_type == kind]

    # ------------------------------------------------------------------ events

    def on_experiment_state(self, s: Session, exp: ExperimentRow, state: str) -> None:
        """Queue the events of experiment ``exp`` entering ``state`` (in ``s``, the
        transaction that changes the state)."""
        wanted = [
            (h, t) for h, t in self._wanted(s, STATE_CHANGE) if t.condition.get("state") == state
        ]
        if not wanted:
            return
        info = experiment_info(s, exp, state, self.clock())
        integ = integrations(exp)
        for hook, trigger in wanted:
            if matches(hook, info["workspace_id"], integ):
                data = {"experiment": _public(info)}
                self.enqueue(s, hook, trigger, data)

    def on_logs(self, s: Session, rows: list[TaskLogRow]) -> None:
        """Queue the events of new trial log lines ``rows`` that match a task-log
        trigger: once per trial and trigger."""
        wanted = self._wanted(s, TASK_LOG)
        if not wanted:
            return
        for row in rows:
            if row.trial_id is None:
                continue
            for hook, trigger in wanted:
                key = (trigger.id, row.trial_id)
                if key in self._fired or trigger.regex is None or trigger.id in self._slow:
                    continue
                try:
                    found = trigger.regex.search(row.log, timeout=MATCH_TIMEOUT)
                except TimeoutError:
                    self._slow.add(trigger.id)
                    log.warning(
                        "webhook %d: the task-log regex %r took over %s s on one line; the "
                        "trigger is off until the master restarts (recreate it with a "
                        "simpler pattern)",
                        hook.id,
                        trigger.condition.get("regex"),
                        MATCH_TIMEOUT,
                    )
                    continue
                if found:
                    self._fire_log(s, hook, trigger, row)

    def _fire_log(self, s: Session, hook: Hook, trigger: Trigger, row: TaskLogRow) -> None:
        trial_id = row.trial_id
        assert trial_id is not None
        dedup = f"log:{trigger.id}:{trial_id}"
        with self._lock:
            if len(self._fired) >= MAX_FIRED:  # the dedup rows still say what fired
                self._fired.clear()
            self._fired.add((trigger.id, trial_id))
        if s.scalar(select(WebhookEventRow.id).where(WebhookEventRow.dedup == dedup)):
            return
        trial = s.get(TrialRow, trial_id)
        exp = s.get(ExperimentRow, trial.experiment_id) if trial else None
        if exp is None:
            return
        info = experiment_info(s, exp, exp.state, self.clock())
        if not matches(hook, info["workspace_id"], integrations(exp)):
            return
        data = {
            "experiment": {**_public(info), "trial_id": trial_id},
            "task_log": {
                "task_id": row.allocation_id,
                "node_name": "",
                "triggering_log": row.log,
            },
        }
        self.enqueue(s, hook, trigger, data, dedup=dedup)

    def custom(self, s: Session, exp: ExperimentRow, trial_id: int, data: dict[str, Any]) -> int:
        """Queue a custom alert (``core.alert``) of ``exp``'s trial ``trial_id`` to the
        webhooks with a custom trigger that ``exp`` names; returns how many."""
        info = experiment_info(s, exp, exp.state, self.clock())
        integ = integrations(exp)
        sent = 0
        for hook, trigger in self._wanted(s, CUSTOM):
            if matches(hook, info["workspace_id"], integ, custom=True):
                payload = {
                    "experiment": {**_public(info), "trial_id": trial_id},
                    "custom_data": data,
                }
                self.enqueue(s, hook, trigger, payload)
                sent += 1
        return sent

    def enqueue(
        self,
        s: Session,
        hook: Hook,
        trigger: Trigger,
        data: dict[str, Any],
        dedup: str | None = None,
    ) -> None:
        """Add the event ``data`` of ``trigger`` for ``hook`` to the queue (in ``s``);
        the shipper is woken when ``s`` commits."""
        now = self.clock()
        kind = EVENT_TYPES.get(trigger.trigger_type, trigger.trigger_type)
        body = render(hook, kind, trigger.condition, data, now, self.config.base_url)
        s.add(
            WebhookEventRow(
                webhook_id=hook.id,
                event_type=kind,
                body=body,
                dedup=dedup,
                state="QUEUED",
                attempts=0,
                next_at=now,
                created_at=now,
            )
        )
        event.listen(s, "after_commit", lambda _s: self.wake.set(), once=True)


def experiment_info(s: Session, exp: ExperimentRow, state: str, now: float) -> dict[str, Any]:
    """Determined's ``event_data.experiment`` of ``exp`` (``duration`` in whole
    seconds), plus ``workspace_id`` (dropped from what is sent)."""
    row = s.execute(
        select(ProjectRow.name, WorkspaceRow.name, WorkspaceRow.id)
        .join(WorkspaceRow, WorkspaceRow.id == ProjectRow.workspace_id)
        .where(ProjectRow.id == exp.project_id)
    ).first()
    project, workspace, ws_id = row if row is not None else ("", "", 1)
    resources = (exp.config or {}).get("resources") or {}
    end = exp.end_time if exp.end_time is not None else now
    return {
        "id": exp.id,
        "state": state,
        "name": exp.name,
        "duration": max(0, int(end - (exp.start_time or end))),
        "resource_pool": resources.get("resource_pool") or "default",
        "slots_per_trial": int(resources.get("slots_per_trial") or 1),
        "workspace": workspace,
        "project": project,
        "workspace_id": ws_id,
    }


def _public(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != "workspace_id"}


def render(
    hook: Hook | WebhookRow,
    event_type: str,
    condition: dict[str, Any],
    data: dict[str, Any],
    now: float,
    base_url: str = "",
) -> str:
    """The request body of one event for ``hook``: Determined's default payload
    ``{event_id, event_type, timestamp, condition, event_data}``, or a Slack Block Kit
    message for a Slack webhook."""
    if hook.webhook_type == "WEBHOOK_TYPE_SLACK":
        return json.dumps(slack_message(event_type, data, base_url))
    return json.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "event_type": event_type,
            "timestamp": int(now),
            "condition": condition,
            "event_data": data,
        }
    )


def slack_message(event_type: str, data: dict[str, Any], base_url: str = "") -> dict[str, Any]:
    """A Slack Block Kit message for an event (``blocks`` and one colored
    ``attachments`` entry: green for COMPLETED, red for ERROR, grey otherwise)."""
    exp = data.get("experiment") or {}
    name = exp.get("name", "")
    link = f"<{base_url.rstrip('/')}/det/experiments/{exp.get('id')}|{name}>" if base_url else name
    if event_type == "CUSTOM":
        custom = data.get("custom_data") or {}
        title = f"{custom.get('title') or 'Alert'} ({custom.get('level', 'info')})"
        text = f"{title}\n{custom.get('description') or ''}\nExperiment {exp.get('id')}: {link}"
    elif event_type == "TASK_LOG":
        line = (data.get("task_log") or {}).get("triggering_log", "")
        text = f"Experiment {exp.get('id')} ({link}) logged: `{line[:500]}`"
    elif event_type == "EXPERIMENT_STATE_CHANGE":
        text = f"Experiment {exp.get('id')} ({link}) is {exp.get('state')}"
    else:
        text = f"Test message from Dauntless: {json.dumps(data)[:500]}"
    state = exp.get("state")
    color = {"COMPLETED": "#13B670", "ERROR": "#DD5040"}.get(str(state), "#AAAAAA")
    section = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    return {"blocks": [section], "attachments": [{"color": color, "blocks": [section]}]}
