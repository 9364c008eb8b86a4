"""The services' side of generic tasks (:mod:`dauntless.master.models.tasks`): where a
notebook's, shell's or TensorBoard's service listens (reported by its own process), the
proxy's target, and a TensorBoard's sources (the log directories of its experiments and
trials) and reuse (one live TensorBoard per owner and set of sources).

Session-first model functions: the caller opens the transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..context import MasterContext
from ..db import AllocationRow, ExperimentRow, TaskRow, TrialRow
from ..errors import BadRequest
from ..task_states import TASK_TERMINAL, NotFound, TaskState
from ..tensorboard_storage import trial_logdir
from .tasks import read_task, task_view

log = logging.getLogger("dauntless.master.tasks")


def _bad(field: str, message: str) -> BadRequest:
    return BadRequest(f"invalid task: {field}: {message}", [(field, message)])


def service_ready(
    s: Session,
    ctx: MasterContext,
    task_id: str,
    allocation_id: str,
    addr: str | None,
    port: int | None,
    error: str | None,
) -> None:
    """Record where a task's service listens (or why it could not start).

    Args:
        s: a write session.
        task_id: the task.
        allocation_id: the reporting run (a report of an older run is ignored).
        addr: the service's address on its agent.
        port: the service's port there.
        error: the reason the service could not start (kept as the task's exit message;
            its process exits next).

    Raises:
        NotFound: no such task.
    """
    row = read_task(s, task_id)
    alloc = s.get(AllocationRow, allocation_id)
    if alloc is None or alloc.task_id != task_id or alloc.state == "TERMINATED":
        return
    if error:
        row.exit_message = error
        return
    row.service_addr, row.service_port = addr, port
    row.ready_time = ctx.clock()
    log.info("task %s serves on %s:%s", task_id, addr, port)


def service_target(s: Session, task_id: str) -> tuple[TaskRow, str | None]:
    """For the proxy: the task's row and its service's base URL (``http://addr:port``),
    None while it is not ready.

    Raises:
        NotFound: no such task.
    """
    row = read_task(s, task_id)
    url = None
    if (
        row.state == TaskState.RUNNING.value
        and row.service_port is not None
        and row.service_addr is not None
    ):
        url = f"http://{row.service_addr}:{row.service_port}"
    return row, url


# ---------------------------------------------------------------------- TensorBoards


def find_tensorboard(
    s: Session, owner: str, experiment_ids: list[int], trial_ids: list[int]
) -> dict[str, Any] | None:
    """The view of a live TensorBoard of ``owner`` over exactly these experiments and
    trials, or None."""
    want = (sorted(experiment_ids), sorted(trial_ids))
    for row in s.scalars(
        select(TaskRow).where(TaskRow.type == "TENSORBOARD", TaskRow.owner == owner)
    ):
        if TaskState(row.state) in TASK_TERMINAL or row.kill_requested:
            continue
        have = (sorted(row.meta.get("experiment_ids", [])), sorted(row.meta.get("trial_ids", [])))
        if have == want:
            return task_view(s, row)
    return None


def tensorboard_logdirs(
    s: Session, experiment_ids: list[int], trial_ids: list[int]
) -> tuple[list[int], list[int], dict[str, str]]:
    """The TensorBoard log directories of experiments and trials.

    Returns:
        ``(experiment_ids, trial_ids, {run name: directory})``, the ids sorted and
        without repeats; run names are ``exp<E>-trial<T>``.

    Raises:
        NotFound: an unknown experiment or trial.
        BadRequest: neither given, or a checkpoint storage the master cannot read event
            files from (only file-system storages so far).
    """
    if not experiment_ids and not trial_ids:
        raise _bad("experiment_ids", "name at least one experiment or trial")
    trials: list[tuple[TrialRow, ExperimentRow]] = []
    for eid in experiment_ids:
        exp = s.get(ExperimentRow, eid)
        if exp is None:
            raise NotFound(f"experiment {eid} not found")
        for t in s.scalars(select(TrialRow).where(TrialRow.experiment_id == eid)):
            trials.append((t, exp))
    for tid in trial_ids:
        trial = s.get(TrialRow, tid)
        if trial is None:
            raise NotFound(f"trial {tid} not found")
        exp = s.get(ExperimentRow, trial.experiment_id)
        assert exp is not None
        trials.append((trial, exp))
    logdirs: dict[str, str] = {}
    for t, exp in trials:
        try:
            path = trial_logdir(exp.config.get("checkpoint_storage") or {}, exp.id, t.id)
        except ValueError as exc:
            raise _bad("checkpoint_storage", str(exc)) from None
        logdirs[f"exp{exp.id}-trial{t.id}"] = path
    return sorted(set(experiment_ids)), sorted(set(trial_ids)), logdirs
