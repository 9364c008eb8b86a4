"""Allocations: the rows of one trial run's parts (``AllocationRow``, one per agent),
read with a caller's session."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db import AllocationRow
from ..errors import NotFound


def parts(session: Session, group_id: str) -> list[AllocationRow]:
    """Every part of one allocation (trial run), chief first.

    Args:
        session: an open session.
        group_id: the allocation's group id (the chief's allocation id).
    """
    return list(
        session.scalars(
            select(AllocationRow)
            .where(AllocationRow.group_id == group_id)
            .order_by(AllocationRow.part_index)
        )
    )


def preemption_signal(session: Session, allocation_id: str) -> bool:
    """True when the allocation should checkpoint and exit: a pause, preemption or kill
    was ordered for any of its parts, or the master gave up on a part (its agent was
    lost), so processes still running for it must stop.

    Raises:
        NotFound: no such allocation.
    """
    rows = parts(session, allocation_id)
    if not rows:
        raise NotFound(f"allocation {allocation_id} not found")
    return any(p.preempt_requested or p.kill_requested or p.state == "TERMINATED" for p in rows)


def rendezvous(session: Session, allocation_id: str) -> dict[str, Any] | None:
    """The chief's address once it is known (``addr``, ``port``, ``world_size``,
    ``num_parts``), else None.

    Raises:
        NotFound: no such allocation.
    """
    chief = session.get(AllocationRow, allocation_id)
    if chief is None:
        raise NotFound(f"allocation {allocation_id} not found")
    if chief.rendezvous_port is None:
        return None
    return {
        "addr": chief.rendezvous_addr,
        "port": chief.rendezvous_port,
        "world_size": chief.world_size,
        "num_parts": chief.num_parts,
    }
