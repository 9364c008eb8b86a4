"""Operating the master (issue 34 scope 4): its recent log lines, its config as an admin
may see it, and the settings changeable while it runs (the log level).

A leaf module: no database. ``det master logs`` reads :class:`MasterLogBuffer`; ``det
master config show`` reads :func:`redacted_config`; ``det master config set --log.level``
calls :func:`set_log_level`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from sqlalchemy.engine import make_url

from dauntless.config import MasterConfig

LOG_BUFFER_LINES = 10_000
"""Master log lines kept in memory for ``det master logs`` (the newest; ~2 MB)."""

REDACTED = "********"
"""What a secret of the config shows as (Determined's mask)."""

_SECRET_KEYS = frozenset(
    {
        "password",
        "initial_user_password",
        "cluster_secret",
        "client_secret",
        "secret_key",
        "access_key",
        "connection_string",
        "credential",
        "token",
    }
)
"""Config keys whose values are secrets wherever they appear (storage credentials,
the OIDC client secret, the cluster secret, the first password)."""

LEVELS = ("debug", "info", "warning", "error")
"""The log levels ``log_level`` / ``det master config set --log.level`` take."""


class MasterLogBuffer(logging.Handler):
    """A logging handler keeping the master's newest :data:`LOG_BUFFER_LINES` lines.

    Each record gets an id (1, 2, ... in order of arrival), so a follower asks for what
    came after the last id it saw; lines older than the buffer are gone (the master's
    log file or journal keeps them).

    Args:
        capacity: lines kept.
    """

    def __init__(self, capacity: int = LOG_BUFFER_LINES) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self._lines: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._next_id = 1
        self._lock_lines = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
        except Exception:  # a bad format string must not break the master's logging
            message = str(record.msg)
        with self._lock_lines:
            self._lines.append(
                {
                    "id": self._next_id,
                    "timestamp": record.created,
                    "level": record.levelname,
                    "message": message,
                }
            )
            self._next_id += 1

    def read(self, after_id: int = 0, tail: int | None = None, limit: int = 1000) -> list[dict]:
        """Lines with an id above ``after_id``, oldest first.

        Args:
            after_id: the last id the caller saw (0: from the oldest kept).
            tail: only the newest ``tail`` of those lines.
            limit: at most this many lines (the oldest of the selection).
        """
        with self._lock_lines:
            lines = [line for line in self._lines if line["id"] > after_id]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return lines[:limit]


def redacted_config(config: MasterConfig) -> dict[str, Any]:
    """The master config as JSON with every secret replaced by :data:`REDACTED`.

    Secrets are ``SecretStr`` fields, the keys of :data:`_SECRET_KEYS` anywhere in the
    tree (storage credentials), and the password of ``db_url``.
    """
    doc = config.model_dump(mode="json")
    if doc.get("db_url"):
        doc["db_url"] = make_url(doc["db_url"]).render_as_string(hide_password=True)
    return _redact(doc)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (REDACTED if k in _SECRET_KEYS and v is not None else _redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if value == "**********":  # pydantic's SecretStr in JSON mode
        return REDACTED
    return value


def set_log_level(level: str) -> None:
    """Set the level of the master's root logger (and ``dauntless``'s) until it stops.

    Args:
        level: one of :data:`LEVELS`.

    Raises:
        ValueError: another level (the message names ``log.level`` and the choices).
    """
    if level not in LEVELS:
        raise ValueError(f"log.level: {level!r} is not one of {', '.join(LEVELS)}")
    logging.getLogger().setLevel(level.upper())
    logging.getLogger("dauntless").setLevel(level.upper())


def current_log_level() -> str:
    """The root logger's level as a :data:`LEVELS` name."""
    name = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    return name if name in LEVELS else "info"
