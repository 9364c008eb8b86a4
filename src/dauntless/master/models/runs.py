"""Trial runs: handing an allocation's parts to their agents (the task spec), asking
them to stop, and what their end does to the trial (restart, complete or fail, and the
searcher's follow-up). Every function runs in the caller's write session.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.searcher import ExitedReason, Operation

from ..context import MasterContext
from ..db import AgentRow, AllocationRow, CheckpointRow, TrialRow
from ..environments import task_environment
from ..errors import NotFound
from ..states import STOPPING, State, is_terminal
from ..task_policies import record_failure, retries_canceled
from . import allocations, search, task_runs, trials, users

log = logging.getLogger("dauntless.master")


def record_exit(
    s: Session,
    ctx: MasterContext,
    allocation_id: str,
    exit_code: int | None,
    message: str | None,
    fatal: bool = False,
) -> bool:
    """Record a part's exit as its agent reported it (idempotent) and move its trial on
    (:func:`terminate`).

    ``fatal``: the agent found the task cannot run in its environment (a Python
    environment that does not build); the trial ends in ERROR without a restart.

    Returns:
        False when the part had already ended (nothing changed), else True.

    Raises:
        NotFound: no such allocation.
    """
    alloc = s.get(AllocationRow, allocation_id)
    if alloc is None:
        raise NotFound(f"allocation {allocation_id} not found")
    if alloc.state == "TERMINATED":
        return False
    alloc.exit_fatal = bool(fatal) and exit_code != 0
    terminate(s, ctx, alloc, exit_code, message)
    return True


def terminate(
    s: Session,
    ctx: MasterContext,
    alloc: AllocationRow,
    exit_code: int | None,
    message: str | None,
) -> None:
    """End one part of an allocation; when it was the last, move the trial on
    (restart, complete or fail).

    A part that fails (non-zero or unknown exit, not a kill the master ordered) gets
    its sibling parts killed: one lost rank stops the whole trial run.
    """
    alloc.state, alloc.exit_code, alloc.exit_message = "TERMINATED", exit_code, message
    alloc.ended_at = ctx.clock()
    if alloc.task_id is not None:
        task_runs.task_exited(s, ctx, alloc)
        return
    # A one-part allocation is its own group (allocations.new_allocation): no read.
    parts = [alloc] if alloc.num_parts == 1 else allocations.parts(s, alloc.group_id)
    live = [p for p in parts if p.state != "TERMINATED"]
    if live:
        if exit_code != 0 and not alloc.kill_requested:
            for p in live:
                p.kill_requested = True
                if p.state == "ASSIGNED":
                    p.state, p.exit_message = "TERMINATED", "a sibling part failed"
                    p.ended_at = ctx.clock()
            if any(p.state != "TERMINATED" for p in live):
                return
        else:
            return
    failed = [p for p in parts if p.exit_code != 0 and not p.kill_requested]
    exit_code = failed[0].exit_code if failed else 0
    message = failed[0].exit_message if failed else None
    fatal = any(p.exit_fatal for p in failed)
    preempted = any(p.preempt_requested for p in parts)
    assert alloc.trial_id is not None  # a task's allocation returned above
    trial, exp = trials.get_trial(s, alloc.trial_id)
    if is_terminal(trial.state):
        return
    if failed:
        s.flush()  # the run's last log lines, if just added, are queried
        record_failure(s, trial, failed[0], exit_code, message)
    if State(trial.state) in STOPPING:
        if State(trial.state) is State.STOPPING_ERROR:  # e.g. a searcher error
            search.set_trial_state(ctx, trial, State.ERROR)
            search.maybe_finish_experiment(s, ctx, exp)
            return
        if State(trial.state) is State.STOPPING_KILLED or exit_code == 0:
            search.trial_canceled(s, ctx, exp, trial)
        else:
            search.set_trial_state(ctx, trial, State.ERROR)
            search.maybe_finish_experiment(s, ctx, exp)
        return
    searcher = search.searcher_for(ctx, exp)
    ops: list[Operation] = []
    rid = trial.request_id
    if trial.early_exit_reason == "INVALID_HP" and exit_code == 0:
        search.set_trial_state(ctx, trial, State.COMPLETED)
        ops += searcher.on_trial_exited_early(rid, ExitedReason.INVALID_HP)
        ops += searcher.on_trial_closed(rid)
    elif exit_code == 0 and (not preempted or trial.searcher_closed):
        search.set_trial_state(ctx, trial, State.COMPLETED)
        ops += searcher.on_trial_closed(rid)
    elif exit_code == 0:
        log.info("trial %s stopped for preemption; it resumes later", trial.id)
    else:
        cfg = ctx.experiment_config(exp)
        why = message or f"exit code {exit_code}"
        if fatal:  # a restart cannot help (issue 23): not counted as one
            log.warning("trial %s cannot run in its environment: %s", trial.id, why)
            search.set_trial_state(ctx, trial, State.ERROR)
            ops += searcher.on_trial_exited_early(rid, ExitedReason.ERRORED)
            ops += searcher.on_trial_closed(rid)
            search.apply(s, ctx, exp, searcher, ops, known=(trial,))
            return
        trial.restarts += 1
        if trial.restarts > cfg.max_restarts or retries_canceled(trial):
            log.warning(
                "trial %s failed (%s); %s",
                trial.id,
                why,
                "a cancel_retries log policy matched"
                if retries_canceled(trial)
                else f"max_restarts {cfg.max_restarts} reached",
            )
            search.set_trial_state(ctx, trial, State.ERROR)
            ops += searcher.on_trial_exited_early(rid, ExitedReason.ERRORED)
            ops += searcher.on_trial_closed(rid)
        else:
            log.warning(
                "trial %s failed (%s); restart %d of %d",
                trial.id,
                why,
                trial.restarts,
                cfg.max_restarts,
            )
    search.apply(s, ctx, exp, searcher, ops, known=(trial,))


def stop_allocation(s: Session, ctx: MasterContext, trial: TrialRow, *, kill: bool) -> bool:
    """Ask every part of the trial's allocation to stop; True if one still runs.

    Parts not yet handed to their agent end at once (exit 0, as if preempted).
    """
    alloc = allocations.live_allocation(s, trial.id)
    if alloc is None:
        return False
    live = [p for p in allocations.parts(s, alloc.group_id) if p.state != "TERMINATED"]
    for part in live:
        if kill:
            part.kill_requested = True
        else:
            part.preempt_requested = True
    for part in live:
        if part.state == "ASSIGNED":
            part.preempt_requested = True
            terminate(s, ctx, part, 0, "stopped before it started")
    return any(p.state != "TERMINATED" for p in live)


def task_spec(s: Session, ctx: MasterContext, alloc: AllocationRow) -> dict[str, Any]:
    """The TaskSpec handing one part of an allocation to its agent (docs/protocol.md):
    what to run, its environment variables and where its context lies; a task's
    allocation is handed over by :func:`.task_runs.task_spec`."""
    if alloc.task_id is not None:
        return task_runs.task_spec(s, ctx, alloc)
    assert alloc.trial_id is not None  # a task's allocation returned above
    trial, exp = trials.get_trial(s, alloc.trial_id)
    cfg = ctx.experiment_config(exp)
    latest = s.get(CheckpointRow, trial.latest_checkpoint) if trial.latest_checkpoint else None
    # The config's variables for the type of the part's slots (a per-device map).
    agent = s.get(AgentRow, alloc.agent_id)
    types = {str(sl["id"]): sl.get("type", "cpu") for sl in (agent.slots if agent else [])}
    slot_type = types.get(str(alloc.slot_ids[0]), "cpu") if alloc.slot_ids else "cpu"
    env = dict(cfg.environment.variables_for(slot_type))
    env.update(
        {
            "DET_MASTER": ctx.public_url(),
            "DET_TASK_TYPE": "TRIAL",
            "DET_EXPERIMENT_ID": str(exp.id),
            "DET_TRIAL_ID": str(trial.id),
            "DET_TRIAL_RUN_ID": str(alloc.run_id),
            "DET_ALLOCATION_ID": alloc.group_id,
            "DET_AGENT_ID": alloc.agent_id,
            "DET_PART_INDEX": str(alloc.part_index),
            "DET_NUM_PARTS": str(alloc.num_parts),
            "DET_RANK_OFFSET": str(alloc.rank_offset),
            "DET_WORLD_SIZE": str(alloc.world_size),
            "DET_TASK_ID": f"{exp.id}.{trial.id}",
            "DET_TRIAL_SEED": str(trial.seed),
            "DET_HPARAMS": json.dumps(trial.hparams),
            "DET_EXPERIMENT_CONFIG": json.dumps(exp.config),
            # Warm start: a trial without a checkpoint of its own starts from its
            # parent's (a PBT clone), else the searcher's source checkpoint (its batch
            # counters start at 0).
            "DET_LATEST_CHECKPOINT": latest.uuid
            if latest
            else (trial.warm_start_checkpoint or cfg.searcher.source_checkpoint_uuid or ""),
            "DET_STEPS_COMPLETED": str(latest.total_batches if latest else 0),
            "DET_SLOT_IDS": ",".join(str(x) for x in alloc.slot_ids),
            "DET_CONTAINER_RANK": str(alloc.part_index),
        }
    )
    # A port offset unique among the allocations on the chief's agent: the index of
    # the chief part's first slot there (DistributedContext's rendezvous port).
    chief = alloc
    if alloc.part_index != 0:
        chief = (
            s.scalars(
                select(AllocationRow).where(
                    AllocationRow.group_id == alloc.group_id, AllocationRow.part_index == 0
                )
            ).first()
            or alloc
        )
    chief_agent = s.get(AgentRow, chief.agent_id)
    slot_order = [str(x.get("id")) for x in (chief_agent.slots if chief_agent else [])]
    first = str(chief.slot_ids[0]) if chief.slot_ids else ""
    env["DET_UNIQUE_PORT_OFFSET"] = str(slot_order.index(first) if first in slot_order else 0)
    if alloc.num_parts > 1:  # every node's host, in part order (ClusterInfo)
        parts = s.scalars(
            select(AllocationRow)
            .where(AllocationRow.group_id == alloc.group_id)
            .order_by(AllocationRow.part_index)
        ).all()
        addrs = []
        for part in parts:
            agent = s.get(AgentRow, part.agent_id)
            addrs.append(agent.hostname if agent and agent.hostname else part.agent_id)
        env["DET_CONTAINER_ADDRS"] = ",".join(addrs)
    workspace_id, workspace = users.project_workspace(s, exp.project_id)
    return {
        "allocation_id": alloc.id,
        "task_id": f"{exp.id}.{trial.id}",
        "trial_id": trial.id,
        "experiment_id": exp.id,
        "slot_ids": list(alloc.slot_ids),
        "entrypoint": cfg.entrypoint,
        "env": env,
        "context_url": f"/api/v1/experiments/{exp.id}/model_def",
        "context_sha256": ctx.context_digest(s, exp.id),
        "environment": task_environment(
            cfg.environment, cfg.bind_mounts, cfg.resources, cfg.checkpoint_storage
        ),
        # The Unix identity the part's processes run as (issue 29).
        "identity": users.task_identity(
            s, exp.owner_id, ctx.config.security.default_task, workspace_id, workspace
        ).to_json(),
    }
