"""Names shared by the master and its callers for credentials (docs/protocol.md,
"Authentication"). Kept apart so that agents and trials need not import the master."""

from __future__ import annotations

import os
from collections.abc import Mapping

CLUSTER_SECRET_HEADER = "X-Dauntless-Cluster-Secret"
"""The header in which agents send the cluster secret."""

AGENT_TOKEN_HEADER = "X-Dauntless-Agent-Token"
"""The header in which an agent sends the credential its registration returned (and a
Slurm job the credential of its allocation part)."""

CLUSTER_SECRET_ENV = "DAUNTLESS_CLUSTER_SECRET"
"""An agent reads the cluster secret from this variable when given no file; it never
reaches the agent's tasks."""

SESSION_TOKEN_ENV = "DET_SESSION_TOKEN"
"""The variable holding a trial's session token (set by the agent from the task spec)."""

COOKIE_NAME = "dauntless_token"
"""The cookie that carries a user's token (HttpOnly, SameSite=Strict)."""

TASK_SECRETS = {
    SESSION_TOKEN_ENV: "session_token",
    "DET_USER_TOKEN": "user_token",
    "DAUNTLESS_SERVICE_TOKEN": "service_token",
}
"""The secrets an agent hands a task as files (variable -> file name): the task finds
each in the file ``$<NAME>_FILE`` (mode 0600, its own; docs/protocol.md)."""

MAX_SECRET_BYTES = 4096
"""The most bytes read from a secret file."""


def read_task_secret(name: str, environ: Mapping[str, str] | None = None) -> str:
    """A secret a task was given: the variable ``name``, else the contents of the file
    ``$<name>_FILE`` (surrounding whitespace removed); "" when neither is there or the
    file cannot be read."""
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if value:
        return value
    path = env.get(name + "_FILE", "")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(MAX_SECRET_BYTES).strip()
    except OSError:
        return ""


def read_secret_file(path: str) -> str:
    """The secret in ``path`` (surrounding whitespace removed).

    Raises:
        ValueError: the file cannot be read or is empty; the message names it.
    """
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            value = f.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the cluster secret file {path!r}: {exc}") from None
    if not value:
        raise ValueError(f"the cluster secret file {path!r} is empty")
    return value


def session_token_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``Authorization: Bearer <session token>`` when the task has one
    (:func:`read_task_secret` of ``DET_SESSION_TOKEN``), else {}."""
    token = read_task_secret(SESSION_TOKEN_ENV, environ)
    return {"Authorization": f"Bearer {token}"} if token else {}
