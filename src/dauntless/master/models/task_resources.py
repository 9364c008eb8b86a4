"""Per-task resource use (issue 34 scope 3): the samples agents take of their tasks'
process trees (CPU, resident and GPU memory), stored per allocation, read per task with
the task's memory request (``resources.memory``) and whether it is exceeded.

Session-first functions over ``task_resource_samples``. Bound: one row per allocation
per :data:`SAMPLE_BUCKET_SECONDS` of the master's clock (a later sample in the bucket
replaces it): at most 360 rows per task per hour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dauntless.config import parse_size

from ..db import AllocationRow, TaskResourceSampleRow, TaskRow
from ..errors import NotFound

SAMPLE_BUCKET_SECONDS = 10
"""The master keeps one sample per allocation per this many seconds."""

MAX_READ_SAMPLES = 5_000
"""Most samples one read returns."""


def record_samples(s: Session, now: float, agent_id: str, samples: Sequence[Any]) -> int:
    """Store an agent's samples of its tasks, skipping allocations not placed on it
    (or unknown: ended and forgotten) and trials' runs (nothing reads those: a trial's
    system metrics are its profiler's, ``profiling.enabled``).

    Args:
        s: a write session.
        now: the master's clock, seconds since the epoch.
        agent_id: the reporting agent.
        samples: objects with ``allocation_id``, ``cpu_percent`` (None: not known yet),
            ``rss_bytes``, ``gpu_memory_bytes`` (None: no NVML), ``processes``.

    Returns:
        Samples stored (inserted or replaced).
    """
    if not samples:
        return 0
    ids = [x.allocation_id for x in samples]
    placed = {
        a.id: a
        for a in s.scalars(
            select(AllocationRow).where(
                AllocationRow.id.in_(ids), AllocationRow.agent_id == agent_id
            )
        )
    }
    bucket = int(now // SAMPLE_BUCKET_SECONDS)
    existing = {
        r.allocation_id: r
        for r in s.scalars(
            select(TaskResourceSampleRow).where(
                TaskResourceSampleRow.allocation_id.in_(list(placed)),
                TaskResourceSampleRow.bucket == bucket,
            )
        )
    }
    stored = 0
    for x in samples:
        alloc = placed.get(x.allocation_id)
        if alloc is None or alloc.task_id is None:
            continue  # a trial's run: its profiler (profiling.enabled) measures it
        values = {
            "time": now,
            "cpu_percent": x.cpu_percent,
            "rss_bytes": x.rss_bytes,
            "gpu_memory_bytes": x.gpu_memory_bytes,
            "processes": x.processes,
        }
        row = existing.get(x.allocation_id)
        if row is None:
            s.add(
                TaskResourceSampleRow(
                    allocation_id=alloc.id,
                    task_id=alloc.task_id,
                    trial_id=alloc.trial_id,
                    agent_id=agent_id,
                    bucket=bucket,
                    **values,
                )
            )
        else:
            for k, v in values.items():
                setattr(row, k, v)
        stored += 1
    return stored


def memory_request(task: TaskRow) -> int | None:
    """The task's ``resources.memory`` in bytes (None: no request)."""
    value = ((task.config or {}).get("resources") or {}).get("memory")
    return None if value is None else parse_size(value)


def _view(r: TaskResourceSampleRow) -> dict[str, Any]:
    return {
        "id": r.id,
        "time": r.time,
        "allocation_id": r.allocation_id,
        "agent_id": r.agent_id,
        "cpu_percent": r.cpu_percent,
        "rss_bytes": r.rss_bytes,
        "gpu_memory_bytes": r.gpu_memory_bytes,
        "processes": r.processes,
    }


def read_task_resources(
    s: Session, task_id: str, after_id: int = 0, limit: int = 1_000
) -> dict[str, Any]:
    """A task's samples after ``after_id`` (oldest first), its latest sample, its memory
    request and whether the latest sample exceeds it.

    Args:
        s: a read session.
        task_id: the task (a command, notebook, shell or TensorBoard).
        after_id: the last sample id already read (0: from the start).
        limit: most samples, 1..:data:`MAX_READ_SAMPLES`.

    Returns:
        ``{task_id, memory_request_bytes, over_request, peak_rss_bytes, latest,
        samples, next_after_id}``; ``over_request`` is true while the latest sample's
        resident memory is above the request (False without a request).

    Raises:
        NotFound: no such task.
    """
    task = s.get(TaskRow, task_id)
    if task is None:
        raise NotFound(f"task {task_id} not found")
    where = TaskResourceSampleRow.task_id == task_id
    rows = list(
        s.scalars(
            select(TaskResourceSampleRow)
            .where(where, TaskResourceSampleRow.id > after_id)
            .order_by(TaskResourceSampleRow.id)
            .limit(max(1, min(limit, MAX_READ_SAMPLES)))
        )
    )
    latest = s.scalars(
        select(TaskResourceSampleRow)
        .where(where)
        .order_by(TaskResourceSampleRow.id.desc())
        .limit(1)
    ).one_or_none()
    peak = s.scalar(select(func.max(TaskResourceSampleRow.rss_bytes)).where(where))
    request = memory_request(task)
    return {
        "task_id": task_id,
        "memory_request_bytes": request,
        "over_request": bool(
            request is not None and latest is not None and latest.rss_bytes > request
        ),
        "peak_rss_bytes": peak,
        "latest": _view(latest) if latest is not None else None,
        "samples": [_view(r) for r in rows],
        "next_after_id": rows[-1].id if rows else after_id,
    }
