"""Agents' own credentials (issue 29): the cluster secret registers an agent once; the
master then issues it a credential bound to its agent id, which it presents on every
later call (``X-Dauntless-Agent-Token``), and the master accepts from it only reports
about the allocations it placed on that agent (:mod:`dauntless.master.routes_cluster`).

**Agent tokens** are 256 random bits like login tokens, stored only as their SHA-256 in
``agents.token_hash`` (:mod:`dauntless.master.auth_secrets` says why a fast hash is
enough for random tokens). A registration replaces the agent's token, so the credential
of a process that is gone stops working when its successor registers. Heartbeats come
several times a second per agent, so the master keeps the hashes it has seen in memory
(agent id -> hash, and back) and reads the database only for a token it has not seen
since it started.

**Slurm jobs** (:mod:`dauntless.master.slurm`) have no agent process: each job runs one
allocation part and speaks for that part only. Its credential is
``slurm-<part id, URL-safe base64>.<HMAC-SHA256(key, part id), hex>``, the key being a
SHA-256 of a fixed label and the cluster secret (RFC 2104's HMAC over a key derived from
the secret, so the secret itself never reaches the job). It needs no storage, survives a
master restart, and is refused for parts that do not exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading

from sqlalchemy import select
from sqlalchemy.orm import Session

from .auth_access import Principal, unauthorized
from .auth_secrets import hash_token, new_token
from .db import AgentRow, AllocationRow

PART_TOKEN_PREFIX = "slurm-"
"""How a Slurm job's part credential begins."""

_PART_KEY_LABEL = b"dauntless slurm part credential\0"


class AgentCredentials:
    """Issues and checks agents' credentials (see the module).

    Args:
        cluster_secret: the cluster's secret (the key of Slurm part credentials).
    """

    def __init__(self, cluster_secret: str) -> None:
        self._lock = threading.Lock()
        self._agent_of: dict[str, str] = {}  # token hash -> agent id
        self._hash_of: dict[str, str] = {}  # agent id -> token hash
        self._part_key = hashlib.sha256(_PART_KEY_LABEL + cluster_secret.encode()).digest()

    # ------------------------------------------------------------------ agents

    @staticmethod
    def issue(agent: AgentRow) -> str:
        """A new credential for ``agent`` (stored hashed on its row, in the caller's
        write session); call :meth:`remember` once that session has committed.

        Returns:
            The token, to hand to the agent once.
        """
        token = new_token()
        agent.token_hash = hash_token(token)
        return token

    def remember(self, agent_id: str, token_hash: str) -> None:
        """Make ``token_hash`` the credential of ``agent_id`` in memory (the agent's
        earlier credential stops working at once)."""
        with self._lock:
            old = self._hash_of.pop(agent_id, None)
            if old is not None:
                self._agent_of.pop(old, None)
            self._agent_of[token_hash] = agent_id
            self._hash_of[agent_id] = token_hash

    def identify_cached(self, token: str) -> Principal | None:
        """The agent whose credential ``token`` is, when it is known in memory; None
        when it must be looked up (:meth:`identify`)."""
        if token.startswith(PART_TOKEN_PREFIX):
            return None
        with self._lock:
            agent_id = self._agent_of.get(hash_token(token))
        return Principal(kind="agent", agent_id=agent_id) if agent_id is not None else None

    def identify(self, s: Session, token: str) -> Principal:
        """The agent (or Slurm job) whose credential ``token`` is.

        Raises:
            HTTPException: 401 when it is no agent's current credential, nor a valid
                part credential of an existing allocation part.
        """
        if token.startswith(PART_TOKEN_PREFIX):
            part_id = self.verify_part_token(token)
            alloc = s.get(AllocationRow, part_id) if part_id is not None else None
            if alloc is None:
                raise unauthorized("the part credential is invalid, or its allocation is gone")
            return Principal(kind="agent", agent_id=alloc.agent_id, part_id=alloc.id)
        digest = hash_token(token)
        agent_id = s.scalar(select(AgentRow.id).where(AgentRow.token_hash == digest))
        if agent_id is None:
            raise unauthorized(
                "the agent credential is unknown or was replaced by a later registration; "
                "the agent registers again with the cluster secret"
            )
        self.remember(agent_id, digest)
        return Principal(kind="agent", agent_id=agent_id)

    # ------------------------------------------------------------------ Slurm parts

    def part_token(self, part_id: str) -> str:
        """The credential of the Slurm job running allocation part ``part_id``."""
        encoded = base64.urlsafe_b64encode(part_id.encode()).decode().rstrip("=")
        mac = hmac.new(self._part_key, part_id.encode(), hashlib.sha256).hexdigest()
        return f"{PART_TOKEN_PREFIX}{encoded}.{mac}"

    def verify_part_token(self, token: str) -> str | None:
        """The part id a part credential names, None when it is malformed or forged."""
        body = token[len(PART_TOKEN_PREFIX) :]
        encoded, _, mac = body.rpartition(".")
        try:
            part_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        want = hmac.new(self._part_key, part_id.encode(), hashlib.sha256).hexdigest()
        return part_id if hmac.compare_digest(want.encode(), mac.encode()) else None
