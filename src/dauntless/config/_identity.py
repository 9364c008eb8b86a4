"""The Unix identity a task runs as, and whether an agent can give it (pure).

Determined's model (0.38, "POSIX identity for task containers"): an admin links a user
to a uid/gid and user/group names (``det user link-with-agent-user``, the user's
``agent_user_group``); a user with no link runs as the master's ``security.default_task``.
Unlike Determined, whose default is root, the default here is the unprivileged
``nobody``/``nogroup`` (65534): a task runs as root only when an admin configures root
explicitly, in ``security.default_task`` or a link.

Nothing here touches the system: the master resolves identities (:func:`resolve_task_identity`)
and places tasks only on agents that can take them (:func:`agent_refusal`); the agent
applies them (:mod:`dauntless.agent.runtimes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ID_MAX = 2**31 - 2
"""The largest uid or gid accepted (``(uid_t)-1`` and the values above int32 are not ids)."""

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$"
"""User and group names: POSIX's portable names (a letter or ``_`` first, at most 32
characters; a trailing ``$`` as Samba's machine accounts have)."""

NOBODY_ID = 65534
"""The uid and gid of ``nobody``/``nogroup`` on Debian, Ubuntu and most Linux systems."""


class DefaultTaskConfig(BaseModel):
    """``security.default_task`` of the master config: the identity of tasks whose owner
    has no link (Determined's field names).

    Attributes:
        uid, gid: the numeric user and group id the task's processes get.
        user, group: their names (``USER``/``LOGNAME`` of the task; supplementary groups
            are those of ``user`` on the agent when it has that user with this uid).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    uid: int = Field(default=NOBODY_ID, ge=0, le=ID_MAX)
    gid: int = Field(default=NOBODY_ID, ge=0, le=ID_MAX)
    user: str = Field(default="nobody", pattern=NAME_PATTERN)
    group: str = Field(default="nogroup", pattern=NAME_PATTERN)


class AgentUserGroup(BaseModel):
    """A user's link to a Unix identity (Determined's ``agent_user_group``). Every field
    is optional: an unset one comes from ``security.default_task``.

    Attributes:
        agent_uid, agent_gid: numeric ids.
        agent_user, agent_group: names.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_uid: int | None = Field(default=None, ge=0, le=ID_MAX)
    agent_gid: int | None = Field(default=None, ge=0, le=ID_MAX)
    agent_user: str | None = Field(default=None, pattern=NAME_PATTERN)
    agent_group: str | None = Field(default=None, pattern=NAME_PATTERN)

    def is_empty(self) -> bool:
        """Whether no field is set (the same as no link)."""
        return all(v is None for v in self.model_dump().values())


@dataclass(frozen=True)
class TaskIdentity:
    """The identity a task's processes run as.

    Attributes:
        uid, gid: numeric user and group id.
        user, group: their names.
    """

    uid: int
    gid: int
    user: str
    group: str

    @property
    def is_root(self) -> bool:
        """Whether the task runs with uid 0."""
        return self.uid == 0

    def to_json(self) -> dict[str, Any]:
        """The TaskSpec's ``identity`` object (docs/protocol.md)."""
        return {"uid": self.uid, "gid": self.gid, "user": self.user, "group": self.group}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskIdentity:
        """Read a TaskSpec's ``identity``.

        Raises:
            ValueError: a missing field, a non-integer or out-of-range id, or a name that
                is not a string.
        """
        try:
            uid, gid = data["uid"], data["gid"]
            user, group = data["user"], data["group"]
        except (KeyError, TypeError):
            raise ValueError(f"identity must have uid, gid, user and group; got {data!r}") from None
        for name, value in (("uid", uid), ("gid", gid)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ID_MAX:
                raise ValueError(
                    f"identity.{name} must be an integer in 0..{ID_MAX}; got {value!r}"
                )
        for name, value in (("user", user), ("group", group)):
            if not isinstance(value, str) or not value or len(value) > 64:
                raise ValueError(
                    f"identity.{name} must be a name of 1-64 characters; got {value!r}"
                )
        return cls(uid, gid, user, group)

    def describe(self) -> str:
        """``user (uid N), group (gid M)`` for messages."""
        return f"{self.user} (uid {self.uid}), group {self.group} (gid {self.gid})"


def resolve_task_identity(
    user_link: AgentUserGroup | None,
    default_task: DefaultTaskConfig,
    workspace_link: AgentUserGroup | None = None,
) -> TaskIdentity:
    """The identity a task of a user runs as.

    Precedence, field by field (Determined 0.38's): the workspace's ``agent_user_group``
    field when set, else the user's link field when set, else ``security.default_task``.
    ``workspace_link`` is the task's workspace's ``agent_user_group`` (issue 30).

    Args:
        user_link: the owner's link (None or empty: no link).
        default_task: the master's ``security.default_task``.
        workspace_link: the task's workspace's link (None: none).

    Returns:
        The resolved :class:`TaskIdentity`.
    """
    uid, gid = default_task.uid, default_task.gid
    user, group = default_task.user, default_task.group
    for link in (user_link, workspace_link):  # later links override earlier ones
        if link is None:
            continue
        uid = link.agent_uid if link.agent_uid is not None else uid
        gid = link.agent_gid if link.agent_gid is not None else gid
        user = link.agent_user if link.agent_user is not None else user
        group = link.agent_group if link.agent_group is not None else group
    return TaskIdentity(uid, gid, user, group)


def agent_refusal(agent_identity: dict[str, Any] | None, task: TaskIdentity) -> str | None:
    """Why an agent cannot run a task as ``task``, or None when it can.

    A root agent switches to any identity (and isolates the task: docs/protocol.md). A
    non-root agent cannot change its own uid or gid, and runs only tasks whose identity
    is its own. Every agent reports its identity at registration; a registration without
    one (a test's hand-made agent) is taken at its word that it applies the TaskSpec's
    ``identity`` itself.

    Args:
        agent_identity: what the agent reported at registration (``runtime.identity``:
            ``{uid, gid, root}``), or None when it reported nothing.
        task: the task's resolved identity.
    """
    if not agent_identity or agent_identity.get("root"):
        return None
    uid, gid = agent_identity.get("uid"), agent_identity.get("gid")
    if uid == task.uid and gid == task.gid:
        return None
    return (
        f"it runs as uid {uid}, gid {gid} without root, so it cannot run tasks as {task.describe()}"
    )
