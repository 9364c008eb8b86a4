"""Logs: task log lines shipped by agents, stored once each, with the trial's log
policies applied as they arrive (:class:`~dauntless.master.task_policies.LogPolicyMatcher`)
and webhooks' task-log triggers matched (:meth:`dauntless.master.webhooks.Webhooks.on_logs`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..context import MasterContext
from ..db import AllocationRow, TaskLogRow
from ..errors import NotFound


def ingest_logs(s: Session, ctx: MasterContext, lines: list[dict[str, Any]]) -> int:
    """Store task log lines shipped by agents; returns how many were new.

    Lines carrying a ``seq`` already stored for their allocation (a batch re-sent after
    a lost answer) are skipped, so each line is kept once.

    Raises:
        NotFound: a line names an unknown allocation.
    """
    if not lines:
        return 0
    rows = []
    seqs: dict[str, list[int]] = {}
    for line in lines:
        alloc_id = str(line["allocation_id"])
        trial_id = ctx.alloc_trial.get(alloc_id)
        if trial_id is None:
            alloc = s.get(AllocationRow, alloc_id)
            if alloc is None:
                raise NotFound(f"allocation {alloc_id} not found")
            trial_id = ctx.alloc_trial[alloc_id] = alloc.trial_id
        if line.get("seq") is not None:
            seqs.setdefault(alloc_id, []).append(int(line["seq"]))
        rows.append(
            TaskLogRow(
                trial_id=trial_id,
                allocation_id=alloc_id,
                seq=line.get("seq"),
                timestamp=float(line.get("timestamp") or ctx.clock()),
                stdtype=str(line.get("stdtype", "stdout")),
                rank_id=line.get("rank_id"),
                log=str(line.get("log", "")),
            )
        )
    seen: set[tuple[str, int | None]] = set()
    for alloc_id, numbers in seqs.items():
        seen.update(
            (alloc_id, n)
            for n in s.scalars(
                select(TaskLogRow.seq).where(
                    TaskLogRow.allocation_id == alloc_id, TaskLogRow.seq.in_(numbers)
                )
            )
        )
    fresh = []
    for row in rows:
        key = (row.allocation_id, row.seq)
        if row.seq is not None and key in seen:
            continue
        seen.add(key)  # type: ignore[arg-type]
        fresh.append(row)
    s.add_all(fresh)
    ctx.log_policies.apply(s, fresh)
    ctx.webhooks.on_logs(s, fresh)
    return len(fresh)
