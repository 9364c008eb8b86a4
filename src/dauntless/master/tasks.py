"""Generic tasks: commands, notebooks, shells and TensorBoards (Determined's NTSC tasks).

A task is a row of ``tasks`` (:class:`~dauntless.master.db.TaskRow`): an id, a type, an
owner, a config (:class:`~dauntless.config._task.TaskConfig`), what to run and a state.
It runs like a trial: the scheduler of its resource pool places it (one request of
``resources.slots`` slots, 0 allowed, never preempted), an allocation row
(``allocations.task_id``) hands it to an agent in a heartbeat, its output is stored as
task logs and its exit ends it. Everything is in the database, so a master restart
finds every task as it was (queued tasks are placed again, running ones keep their
allocation).

States (declarative, :data:`TASK_TRANSITIONS`)::

    QUEUED -> ASSIGNED -> RUNNING -> COMPLETED | ERROR | CANCELED
                 \\-----------\\-> TERMINATING (a kill was ordered) -> CANCELED | ...

A kill of a queued task cancels it at once; of a running one it asks the agent to
stop the process (SIGTERM, then SIGKILL). An exit after a kill is CANCELED, exit code 0
COMPLETED, anything else (an unknown exit: the agent was lost) ERROR with the code and
message.

Notebooks, shells and TensorBoards are web services: their process
(:mod:`dauntless.exec.task_service`) starts the service on a free port of the agent
and reports its address to ``POST /tasks/{id}/service`` with the task's session token;
the master's proxy (:mod:`dauntless.master.proxy`) then forwards
``/proxy/<task id>/...`` to it.

The states, constants and errors are in :mod:`dauntless.master.task_states`, the
scheduler hooks in :mod:`dauntless.master.task_scheduling` (held by
:class:`TaskService` as ``scheduling``); the states, constants and errors may still be imported from here.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dauntless.config import ConfigError
from dauntless.config._task import TASK_TYPES, parse_task_config

from .db import (
    UNCATEGORIZED_ID,
    AllocationRow,
    ExperimentRow,
    TaskLogRow,
    TaskRow,
    TrialRow,
    UserRow,
)
from .errors import MAX_CONTEXT_BYTES, BadRequest
from .models import pool_bindings, workspaces
from .models.users import identity_refusals
from .task_scheduling import TaskHost, TaskScheduling
from .task_states import DEFAULT_SLOTS as DEFAULT_SLOTS
from .task_states import EXTRAS as EXTRAS
from .task_states import REQUEST_PREFIX as REQUEST_PREFIX
from .task_states import SERVICE_TYPES, TASK_TERMINAL, NotFound, TaskState
from .task_states import TASK_TRANSITIONS as TASK_TRANSITIONS
from .task_states import TaskConflict as TaskConflict
from .task_states import check_task_transition as check_task_transition

log = logging.getLogger("dauntless.master.tasks")


def _bad(field: str, message: str):
    return BadRequest(f"invalid task: {field}: {message}", [(field, message)])


class TaskService:
    """Creates, lists, kills and runs generic tasks (one per master; see the module).

    Args:
        ctx: the master's context, whose database, config, clock, scheduler wake-up
            and allocation hand-over tasks share.
    """

    def __init__(self, ctx: TaskHost) -> None:
        self.ctx = ctx
        #: task id -> last time (seconds since the epoch) the proxy forwarded a request
        #: to it: a TensorBoard's activity (memory only; a restart counts as activity).
        self.proxy_activity: dict[str, float] = {}
        #: The scheduler's hooks (queued tasks, hand-over, exits, idle timeouts).
        self.scheduling = TaskScheduling(ctx, self.proxy_activity)

    # ------------------------------------------------------------------ create

    def create(
        self,
        task_type: str,
        owner: str,
        config: dict[str, Any] | None,
        entrypoint: str | list[str] | None = None,
        context: bytes | None = None,
        meta: dict[str, Any] | None = None,
        workspace_id: int = UNCATEGORIZED_ID,
    ) -> dict[str, Any]:
        """Validate and queue a task.

        Args:
            task_type: COMMAND, NOTEBOOK, SHELL or TENSORBOARD.
            owner: the username of the caller (owns the task).
            config: the task config (mapping) or None for the defaults.
            entrypoint: for a COMMAND, what to run: an argv list, or a string run by
                ``sh -c``; for the services None (they run
                :mod:`dauntless.exec.task_service`).
            context: the context directory as a gzipped tar (bytes, at most 95 MiB), or
                None.
            meta: type-specific facts (a TensorBoard's ``experiment_ids``,
                ``trial_ids`` and ``logdirs``; what another task covers).
            workspace_id: its workspace (not archived), whose default pools apply when
                the config names no pool; a pool bound to other workspaces is refused.

        Returns:
            The task's view (:meth:`view`) and ``warnings`` (list of str).

        Raises:
            BadRequest: an unknown type, an invalid config (naming the field), an empty
                command, an unknown resource pool or a context over 95 MiB.
        """
        if task_type not in TASK_TYPES:
            raise _bad("type", f"one of {list(TASK_TYPES)}, got {task_type!r}")
        raw = dict(config or {})
        resources = dict(raw.get("resources") or {})
        resources.setdefault("slots", DEFAULT_SLOTS[task_type])
        raw["resources"] = resources
        try:
            cfg = parse_task_config(raw, task_type)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise BadRequest("invalid task config", exc.errors) from None
        pools = [p.pool_name for p in self.ctx.config.resource_pools]
        with self.ctx.db.read() as s:
            ws = workspaces.read_workspace(s, workspace_id)
            workspaces.refuse_archived(ws)
            pool = cfg.resources.resource_pool or workspaces.workspace_pool(ws, cfg.resources.slots)
            if pool not in pools:
                raise _bad("resources.resource_pool", f"unknown pool {pool!r}; pools: {pools}")
            pool_bindings.check_pool_usable(s, pool, workspace_id, "resources.resource_pool")
        if context is not None and len(context) > MAX_CONTEXT_BYTES:
            raise _bad(
                "context",
                f"{len(context)} bytes compressed; the limit is {MAX_CONTEXT_BYTES} bytes (95 MiB)",
            )
        with self.ctx.db.read() as s:  # issue 29: some agent can run it as its identity
            owner_id = s.scalar(select(UserRow.id).where(UserRow.username == owner))
            errors = identity_refusals(
                s, owner_id, self.ctx.config.security.default_task, workspace_id, pool
            )
        if errors:
            raise BadRequest("invalid task config", errors)
        if task_type == "COMMAND":
            if entrypoint is None or (isinstance(entrypoint, str) and not entrypoint.strip()):
                raise _bad("entrypoint", "a command to run (an argv list or a string)")
            if isinstance(entrypoint, list) and (
                not entrypoint or not all(isinstance(x, str) for x in entrypoint)
            ):
                raise _bad("entrypoint", "a non-empty list of strings")
        else:
            kind = {"NOTEBOOK": "notebook", "SHELL": "shell", "TENSORBOARD": "tensorboard"}
            entrypoint = ["python", "-m", "dauntless.exec.task_service", kind[task_type]]
        warnings = []
        if cfg.bind_mounts:
            warnings.append(
                "bind_mounts are mounted by container runtimes; an agent running tasks as "
                "plain processes sees the host's paths as they are"
            )
        if cfg.environment.image is not None:
            warnings.append(
                "environment.image is used by container runtimes; an agent running tasks "
                "as plain processes uses its own Python environment"
            )
        now = self.ctx.clock()
        with self.ctx.db.write() as s:
            task_id = secrets.token_hex(4)
            while s.get(TaskRow, task_id) is not None:
                task_id = secrets.token_hex(4)
            desc = cfg.description or _default_description(task_type, task_id, entrypoint)
            row = TaskRow(
                id=task_id,
                type=task_type,
                state=TaskState.QUEUED.value,
                owner=owner,
                owner_id=s.scalar(select(UserRow.id).where(UserRow.username == owner)),
                description=desc[:512],
                config=_with_pool(cfg.to_json(), pool),
                entrypoint=entrypoint,
                workspace_id=workspace_id,
                meta=dict(meta or {}),
                context=context,
                run_id=0,
                kill_requested=False,
                service_token=secrets.token_urlsafe(24) if task_type in SERVICE_TYPES else None,
                created_at=now,
            )
            s.add(row)
            s.flush()
            view = self.view(s, row)
        self.ctx.wake.set()
        log.info("created %s task %s for %s", task_type, task_id, owner)
        return {"task": view, "warnings": warnings}

    # ------------------------------------------------------------------ read

    def view(self, s: Session, row: TaskRow) -> dict[str, Any]:
        """The JSON view of a task (docs/protocol.md, "Generic tasks")."""
        alloc = self._latest_allocation(s, row.id)
        cfg = row.config
        return {
            "id": row.id,
            "type": row.type,
            "state": row.state,
            "owner": row.owner,
            "user_id": row.owner_id,
            "workspace_id": row.workspace_id,
            "description": row.description,
            "config": cfg,
            "entrypoint": row.entrypoint,
            "resource_pool": cfg["resources"]["resource_pool"] or "default",
            "slots": cfg["resources"]["slots"],
            "agent_id": alloc.agent_id if alloc is not None else None,
            "allocation_id": alloc.id if alloc is not None else None,
            "ready": row.ready_time is not None and row.state == TaskState.RUNNING.value,
            "service_url": f"/proxy/{row.id}/" if row.type in SERVICE_TYPES else None,
            "experiment_ids": row.meta.get("experiment_ids", []),
            "trial_ids": row.meta.get("trial_ids", []),
            "exit_code": row.exit_code,
            "exit_message": row.exit_message,
            "created_at": row.created_at,
            "start_time": row.start_time,
            "end_time": row.end_time,
        }

    @staticmethod
    def _latest_allocation(s: Session, task_id: str) -> AllocationRow | None:
        return s.scalar(
            select(AllocationRow)
            .where(AllocationRow.task_id == task_id)
            .order_by(AllocationRow.created_at.desc())
            .limit(1)
        )

    def get_row(self, s: Session, task_id: str) -> TaskRow:
        """The task's row.

        Raises:
            NotFound: no such task.
        """
        row = s.get(TaskRow, task_id)
        if row is None:
            raise NotFound(f"task {task_id} not found")
        return row

    def get(self, task_id: str) -> dict[str, Any]:
        """The view of one task. Raises NotFound for an unknown id."""
        with self.ctx.db.read() as s:
            return self.view(s, self.get_row(s, task_id))

    def list(
        self,
        task_type: str | None = None,
        owner: str | None = None,
        visible: builtins.set[int] | None = None,
        workspace_id: int | None = None,
        offset: int = 0,
        limit: int = 0,
    ) -> dict[str, Any]:
        """A page of tasks, oldest first (``limit`` 0: every one), optionally of one type,
        one owner and one workspace, of the ``visible`` workspaces only (the caller's
        view; None: all), as ``{"tasks": [...], "total": N}``.

        Raises:
            BadRequest: an unknown type.
        """
        if task_type is not None and task_type not in TASK_TYPES:
            raise _bad("type", f"one of {list(TASK_TYPES)}, got {task_type!r}")
        with self.ctx.db.read() as s:
            q = select(TaskRow).order_by(TaskRow.created_at, TaskRow.id)
            if task_type is not None:
                q = q.where(TaskRow.type == task_type)
            if owner is not None:
                q = q.where(TaskRow.owner == owner)
            if visible is not None:
                q = q.where(TaskRow.workspace_id.in_(visible))
            if workspace_id is not None:
                q = q.where(TaskRow.workspace_id == workspace_id)
            total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
            q = q.offset(offset).limit(limit) if limit else q.offset(offset)
            return {"tasks": [self.view(s, r) for r in s.scalars(q).all()], "total": total}

    def context(self, task_id: str) -> bytes | None:
        """The task's context tarball, or None. Raises NotFound for an unknown id."""
        with self.ctx.db.read() as s:
            return self.get_row(s, task_id).context

    def logs(self, task_id: str, after_id: int = 0, limit: int = 1000) -> dict[str, Any]:
        """Log lines of every run of a task with ids above ``after_id``.

        Returns:
            ``{"logs": [LogLine], "task_state": str}`` (LogLine as for trials, with
            ``task_id`` in place of ``trial_id``).

        Raises:
            NotFound: no such task.
        """
        with self.ctx.db.read() as s:
            row = self.get_row(s, task_id)
            alloc_ids = list(
                s.scalars(select(AllocationRow.id).where(AllocationRow.task_id == task_id))
            )
            lines: Sequence[TaskLogRow] = []
            if alloc_ids:
                lines = s.scalars(
                    select(TaskLogRow)
                    .where(TaskLogRow.allocation_id.in_(alloc_ids), TaskLogRow.id > after_id)
                    .order_by(TaskLogRow.id)
                    .limit(limit)
                ).all()
            return {
                "logs": [
                    {
                        "id": ln.id,
                        "task_id": task_id,
                        "allocation_id": ln.allocation_id,
                        "timestamp": ln.timestamp,
                        "stdtype": ln.stdtype,
                        "rank_id": ln.rank_id,
                        "log": ln.log,
                    }
                    for ln in lines
                ],
                "task_state": row.state,
            }

    # ------------------------------------------------------------------ actions

    def kill(self, task_id: str, reason: str = "killed") -> dict[str, Any]:
        """Stop a task: a queued or not yet started one is CANCELED at once, a running one
        becomes TERMINATING until its agent reports the exit. Killing an ended task
        changes nothing.

        Raises:
            NotFound: no such task.
        """
        with self.ctx.db.write() as s:
            row = self.get_row(s, task_id)
            state = TaskState(row.state)
            if state not in TASK_TERMINAL:
                row.kill_requested = True
                if row.exit_message is None:
                    row.exit_message = reason
                live = s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.task_id == task_id, AllocationRow.state != "TERMINATED"
                    )
                ).all()
                if state is TaskState.QUEUED or all(a.state == "ASSIGNED" for a in live):
                    for a in live:
                        a.state, a.exit_message, a.ended_at = "TERMINATED", reason, self.ctx.clock()
                    self.scheduling.end(s, row, TaskState.CANCELED, None, reason)
                else:
                    check_task_transition(row.state, TaskState.TERMINATING)
                    row.state = TaskState.TERMINATING.value
                    for a in live:
                        a.kill_requested = True
            view = self.view(s, row)
        self.ctx.wake.set()
        return view

    def service_ready(
        self,
        task_id: str,
        allocation_id: str,
        addr: str | None,
        port: int | None,
        error: str | None,
    ) -> None:
        """Record where a task's service listens (or why it could not start).

        Args:
            task_id: the task.
            allocation_id: the reporting run (a report of an older run is ignored).
            addr, port: the service's address on its agent.
            error: the reason the service could not start (kept as the task's exit
                message; its process exits next).

        Raises:
            NotFound: no such task.
        """
        with self.ctx.db.write() as s:
            row = self.get_row(s, task_id)
            alloc = s.get(AllocationRow, allocation_id)
            if alloc is None or alloc.task_id != task_id or alloc.state == "TERMINATED":
                return
            if error:
                row.exit_message = error
                return
            row.service_addr, row.service_port = addr, port
            row.ready_time = self.ctx.clock()
        log.info("task %s serves on %s:%s", task_id, addr, port)

    def target(self, task_id: str) -> tuple[TaskRow, str | None]:
        """For the proxy: the task (detached) and its service's base URL, None while it
        is not ready.

        Raises:
            NotFound: no such task.
        """
        with self.ctx.db.read() as s:
            row = self.get_row(s, task_id)
            s.expunge(row)
        url = None
        if (
            row.state == TaskState.RUNNING.value
            and row.service_port is not None
            and row.service_addr is not None
        ):
            url = f"http://{row.service_addr}:{row.service_port}"
        return row, url

    def find_tensorboard(
        self, owner: str, experiment_ids: builtins.list[int], trial_ids: builtins.list[int]
    ) -> dict[str, Any] | None:
        """A live TensorBoard of ``owner`` over exactly these experiments and trials."""
        want = (sorted(experiment_ids), sorted(trial_ids))
        with self.ctx.db.read() as s:
            for row in s.scalars(
                select(TaskRow).where(TaskRow.type == "TENSORBOARD", TaskRow.owner == owner)
            ):
                if TaskState(row.state) in TASK_TERMINAL or row.kill_requested:
                    continue
                have = (
                    sorted(row.meta.get("experiment_ids", [])),
                    sorted(row.meta.get("trial_ids", [])),
                )
                if have == want:
                    return self.view(s, row)
        return None

    def tensorboard_logdirs(
        self, experiment_ids: builtins.list[int], trial_ids: builtins.list[int]
    ) -> tuple[builtins.list[int], builtins.list[int], dict[str, str]]:
        """The TensorBoard log directories of experiments and trials.

        Returns:
            ``(experiment_ids, trial_ids, {run name: directory})``; run names are
            ``exp<E>-trial<T>``.

        Raises:
            NotFound: an unknown experiment or trial.
            BadRequest: neither given, or a checkpoint storage the master cannot read
                event files from (only file-system storages so far).
        """
        from .tensorboard_storage import trial_logdir

        if not experiment_ids and not trial_ids:
            raise _bad("experiment_ids", "name at least one experiment or trial")
        logdirs: dict[str, str] = {}
        with self.ctx.db.read() as s:
            trials: builtins.list[tuple[TrialRow, ExperimentRow]] = []
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
            for t, exp in trials:
                try:
                    path = trial_logdir(exp.config.get("checkpoint_storage") or {}, exp.id, t.id)
                except ValueError as exc:
                    raise _bad("checkpoint_storage", str(exc)) from None
                logdirs[f"exp{exp.id}-trial{t.id}"] = path
        return sorted(set(experiment_ids)), sorted(set(trial_ids)), logdirs


def _default_description(task_type: str, task_id: str, entrypoint: Any) -> str:
    if task_type == "COMMAND":
        text = entrypoint if isinstance(entrypoint, str) else " ".join(entrypoint)
        return f"Command ({text})"
    return {"NOTEBOOK": "JupyterLab", "SHELL": "Shell", "TENSORBOARD": "TensorBoard"}[
        task_type
    ] + f" ({task_id})"


def _with_pool(config: dict[str, Any], pool: str) -> dict[str, Any]:
    """A task config with its pool set (the workspace's default when it named none)."""
    if pool != "default" and not config["resources"].get("resource_pool"):
        config["resources"] = {**config["resources"], "resource_pool": pool}
    return config
