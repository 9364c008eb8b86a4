"""Handing a placed part (allocation) over to its agent in a heartbeat's answer, and
handing it over again when that answer never reached the agent (issue 37).

An answer can be lost after the master committed it: on an overloaded master a beat
waited longer than the agent's own 30 s request timeout, the agent gave up on it and
beat again, and the parts that answer handed over were RUNNING on the master but never
started. The next beat left them out, and past :data:`LOST_ALLOCATION_GRACE` they ended
as "the agent no longer runs this task": their trials failed (with ``max_restarts: 0``,
ERROR) although nothing had gone wrong on the agent.

Why a part left out can be handed over again without ever running twice: an agent
sends its beats one after another, each once the one before was answered or given up
on, and from the moment it takes an answer every later beat lists the parts that answer
started (or carries their exits, recorded first). So a beat that *arrived* after the
hand-over and leaves the part out was sent by an agent that did not take that answer,
and will not: the request it belonged to is closed. A beat that arrived *before* the
hand-over (it waited for a worker thread while an earlier beat handed the part over)
says nothing of the part, and neither hands it over again nor ends it
(:func:`sent_after_hand_over`). The master remembers the parts it
handed to each agent until a beat lists them (:meth:`Heartbeats.handed`,
:meth:`Heartbeats.acknowledge`); a part the agent once listed and then left out has
ended on the agent and is ended here, as before. Each hand-over issues a new session
token, so a copy handed over earlier could report nothing. A restarted master remembers
no hand-over: its parts then end as before when left out.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from ..auth import hash_token, new_token
from ..context import MasterContext
from ..db import AllocationRow
from . import runs

log = logging.getLogger("dauntless.master")

LOST_ALLOCATION_GRACE = 5.0
"""Seconds after hand-over during which an agent may not yet list a new allocation."""


def hand_over(s: Session, ctx: MasterContext, alloc: AllocationRow, now: float) -> dict[str, Any]:
    """The TaskSpec that hands ``alloc`` to its agent in the answer to a beat recorded
    at ``now`` (epoch s), with a new session token (stored only hashed).

    The part is RUNNING from the master's clock read here, never earlier than ``now``:
    a beat reads ``now`` before its transaction, and the part it hands over may have
    been placed meanwhile by another beat that ended the trial's previous run. Its
    ``started_at`` then came before that run's ``ended_at`` although the agent could not
    start it before the answer (a full suite's multi-node test read that as two runs at
    once).
    """
    spec = runs.task_spec(s, ctx, alloc)
    token = new_token()
    alloc.token_hash = hash_token(token)
    spec["env"]["DET_SESSION_TOKEN"] = token
    alloc.state, alloc.started_at = "RUNNING", max(now, ctx.clock())
    ctx.heartbeats.handed(alloc.agent_id, alloc.id)
    return spec


def hand_over_again(
    s: Session, ctx: MasterContext, alloc: AllocationRow, now: float
) -> dict[str, Any]:
    """:func:`hand_over` for a part whose first answer never reached its agent (see
    the module), saying so in the master's log."""
    log.warning(
        "allocation %s handed over again to agent %s: the answer that carried it at %.1f "
        "never reached the agent (it beat again without it)",
        alloc.id,
        alloc.agent_id,
        alloc.started_at or 0.0,
    )
    return hand_over(s, ctx, alloc, now)


def sent_after_hand_over(alloc: AllocationRow, arrived: float | None) -> bool:
    """Whether a beat that arrived at ``arrived`` (epoch s; None: unknown, taken as
    yes) can tell whether its agent runs ``alloc``: it arrived after the part was
    handed over. One that arrived before (it waited for a worker thread while an
    earlier beat handed the part over) was sent before the agent could have it, and
    decides nothing about it (issue 37: such beats ended parts whose answer was still
    on its way, or lost)."""
    return arrived is None or alloc.started_at is None or arrived > alloc.started_at


def answer_lost(ctx: MasterContext, agent_id: str, alloc: AllocationRow) -> bool:
    """Whether the answer that handed ``alloc`` to ``agent_id`` never reached it, for a
    beat that :func:`sent_after_hand_over` and leaves the part out: no beat of the
    agent has listed it since the hand-over (see the module)."""
    return ctx.heartbeats.unacknowledged(agent_id, alloc.id)
