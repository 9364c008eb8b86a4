"""Configs of generic tasks: commands, notebooks, shells and TensorBoards.

Field names follow Determined's command/notebook/shell/TensorBoard configs
(``description``, ``resources.slots``, ``resources.resource_pool``,
``resources.priority``, ``environment``, ``bind_mounts``, ``idle_timeout``,
``work_dir``, ``debug``). Unknown fields are refused, naming the field.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._experiment import (
    BindMount,
    ConfigError,
    EnvironmentConfig,
    _format_validation_error,
    parse_size,
)

TASK_TYPES = ("COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD")
"""The generic task types (Determined's names)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds of a duration: a number (seconds) or text such as ``"30s"``, ``"10m"``,
    ``"1h"`` or ``"2d"`` (Determined writes ``idle_timeout`` this way).

    Raises:
        ValueError: anything else, or a negative number.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected seconds or a duration such as '30m', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"must be >= 0 seconds, got {value}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    raise ValueError(f"expected seconds or a duration such as '30s', '10m', '1h', got {value!r}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskResources(_Strict):
    """``resources`` of a task: ``slots`` (0 allowed: a CPU-only notebook or
    TensorBoard holds none), ``resource_pool`` (empty: the default pool), ``priority``
    (1..99, smaller runs first under the priority scheduler; None: the pool's
    default), ``weight`` (fair share), ``memory`` (a Dauntless extension: the memory the
    task expects to use, bytes or ``"4G"``-style text; the agent measures its process
    tree, and the task is flagged while it uses more; None: no request, never flagged;
    not a limit: nothing is killed)."""

    slots: int = Field(default=1, ge=0)
    resource_pool: str = ""
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float = Field(default=1.0, gt=0)
    memory: int | str | None = None

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: int | str | None) -> int | str | None:
        if v is not None:
            parse_size(v)  # ValueError names what is expected
        return v

    def memory_bytes(self) -> int | None:
        """``memory`` in bytes, or None when not set."""
        return None if self.memory is None else parse_size(self.memory)


class TaskConfig(_Strict):
    """The config of one generic task.

    Attributes:
        description: shown in task lists (default: made from the type and id).
        resources: see :class:`TaskResources`.
        environment: ``environment_variables`` are set in the task's processes; the
            container fields are for container runtimes.
        bind_mounts: host paths to mount (applied by container runtimes).
        idle_timeout: seconds (or ``"30m"``-style text) after which an idle notebook,
            shell or TensorBoard is killed; None never. Refused for commands.
        work_dir: the directory the task starts in, on the agent (absolute); default
            the task's own directory holding the context.
        debug: more logging from the task's service.
    """

    description: str = ""
    resources: TaskResources = TaskResources()
    environment: EnvironmentConfig = EnvironmentConfig()
    bind_mounts: list[BindMount] = Field(default_factory=list)
    idle_timeout: float | None = None
    work_dir: str | None = None
    debug: bool = False

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @field_validator("work_dir")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"work_dir must be an absolute path on the agent, got {v!r}")
        return v

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready data (defaults filled in)."""
        return self.model_dump(mode="json")


def parse_task_config(raw: Any, task_type: Literal["COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD"]):
    """Validate a task config.

    Args:
        raw: a mapping (parsed YAML/JSON) or None for the defaults.
        task_type: one of :data:`TASK_TYPES`.

    Returns:
        The :class:`TaskConfig`.

    Raises:
        ConfigError: naming each bad field (``errors`` holds ``(field, message)``).
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([("", f"a task config must be a mapping, got {type(raw).__name__}")])
    try:
        cfg = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None
    if task_type == "COMMAND" and cfg.idle_timeout is not None:
        raise ConfigError(
            [("idle_timeout", "applies to notebooks, shells and TensorBoards, not commands")]
        )
    return cfg
