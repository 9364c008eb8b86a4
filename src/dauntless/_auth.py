"""Names shared by the master and its callers for credentials (docs/protocol.md,
"Authentication"). Kept apart so that agents and trials need not import the master."""

from __future__ import annotations

import os
from collections.abc import Mapping

CLUSTER_SECRET_HEADER = "X-Dauntless-Cluster-Secret"
"""The header in which agents send the cluster secret."""

CLUSTER_SECRET_ENV = "DAUNTLESS_CLUSTER_SECRET"
"""An agent reads the cluster secret from this variable when given no file; it never
reaches the agent's tasks."""

SESSION_TOKEN_ENV = "DET_SESSION_TOKEN"
"""The variable holding a trial's session token (set by the agent from the task spec)."""

COOKIE_NAME = "dauntless_token"
"""The cookie that carries a user's token (HttpOnly, SameSite=Strict)."""


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
    """``Authorization: Bearer <DET_SESSION_TOKEN>`` when the variable is set, else {}."""
    env = os.environ if environ is None else environ
    token = env.get(SESSION_TOKEN_ENV, "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}
