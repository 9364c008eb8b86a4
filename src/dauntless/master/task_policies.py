"""What the master enforces on a running trial beyond its exit: ``preemption_timeout``
and ``log_policies`` (Determined 0.38, reference §1.5 and §4), and the record of why a
run failed.

- **preemption_timeout.** A pause, cancel or preemption asks a trial to checkpoint and
  exit. A trial that has not exited ``preemption_timeout`` seconds (Determined's
  default: 3600) after the master first saw the request is killed; the checkpoints it
  reported stand, and the kill is not counted as a failure (the trial resumes from its
  latest checkpoint when activated, or ends CANCELED).
- **log_policies.** Each line a trial's processes print is searched for the patterns of
  its experiment's ``log_policies`` plus the built-ins (``CUDA OOM``, ``ECC Error``: labels
  only, as in Determined; a policy with a built-in's name and no pattern turns it off). A
  match adds the policy's name to the trial's labels and applies its action:
  ``cancel_retries`` (a later failure of the trial is final, whatever ``max_restarts``
  allows) or ``exclude_node`` (the trial's next runs avoid the agent that printed it).
- **failure.** When a run of a trial fails, the trial keeps which run, its exit and the
  last error line it printed, for ``det trial describe``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import ExperimentConfig

from .db import AllocationRow, ExperimentRow, TaskLogRow, TrialRow
from .models import allocations


class ConfigSource(Protocol):
    """What this module needs of the master's context: its parsed-config cache
    (:meth:`~dauntless.master.context.MasterContext.experiment_config`)."""

    def experiment_config(self, exp: ExperimentRow) -> ExperimentConfig: ...


log = logging.getLogger("dauntless.master")

DEFAULT_PREEMPTION_TIMEOUT = 3600
"""Seconds a trial may take to stop after a stop request (Determined's default)."""

BUILTIN_LOG_POLICIES: tuple[tuple[str, str], ...] = (
    ("CUDA OOM", r".*CUDA out of memory.*"),
    ("ECC Error", r".*uncorrectable ECC error encountered.*"),
)
"""Determined's built-in log policies: a name and a pattern, no action (labels)."""

_ERROR_LINE = re.compile(r"^\s*([\w.]+(Error|Exception|Exit|Interrupt)|error)\b.*", re.I)


@dataclass(frozen=True)
class CompiledPolicy:
    """One log policy ready to match: ``action`` is None, ``cancel_retries`` or
    ``exclude_node``."""

    name: str
    regex: re.Pattern[str]
    action: str | None


def compile_log_policies(cfg: ExperimentConfig) -> list[CompiledPolicy]:
    """The built-ins and the config's ``log_policies``, in that order; a config entry
    with a built-in's name replaces it (without a pattern: removes it)."""
    entries: dict[str, tuple[str | None, str | None]] = {
        name: (pattern, None) for name, pattern in BUILTIN_LOG_POLICIES
    }
    for p in cfg.log_policies:
        name = p.name if p.name is not None else str(p.pattern)
        entries[name] = (p.pattern, p.action)
    return [
        CompiledPolicy(name, re.compile(pattern), action)
        for name, (pattern, action) in entries.items()
        if pattern is not None
    ]


def preemption_timeout(cfg: ExperimentConfig) -> float:
    """The experiment's ``preemption_timeout`` in seconds, or the default."""
    return float(
        DEFAULT_PREEMPTION_TIMEOUT if cfg.preemption_timeout is None else cfg.preemption_timeout
    )


def enforce_preemption_timeouts(s: Session, ctx: ConfigSource, now: float) -> None:
    """Stamp new stop requests and order a kill of every allocation whose request is
    older than its experiment's ``preemption_timeout`` (inside the caller's transaction).

    The deadline counts from the first scheduling pass that sees the request (at most
    ``scheduler_interval`` late) and is kept in the database, so a master restart does not
    restart it.
    """
    waiting = s.scalars(
        select(AllocationRow).where(
            AllocationRow.state == "RUNNING",
            AllocationRow.preempt_requested.is_(True),
            AllocationRow.kill_requested.is_(False),
        )
    ).all()
    for alloc in waiting:
        if alloc.preempt_requested_at is None:
            alloc.preempt_requested_at = now
            continue
        # Commands, notebooks, shells and TensorBoards (no trial) are stopped by their own
        # kill path (dauntless.master.models.tasks), not by an experiment's preemption_timeout.
        trial = s.get(TrialRow, alloc.trial_id) if alloc.trial_id is not None else None
        exp = s.get(ExperimentRow, trial.experiment_id) if trial is not None else None
        if exp is None:
            continue
        timeout = preemption_timeout(ctx.experiment_config(exp))
        if now - alloc.preempt_requested_at < timeout:
            continue
        log.warning(
            "trial %s did not stop within preemption_timeout (%.0f s) of the stop request: "
            "killing it; its latest checkpoint stands",
            alloc.trial_id,
            timeout,
        )
        for part in allocations.parts(s, alloc.group_id):
            if part.state != "TERMINATED":
                part.kill_requested = True


MATCHER_ALLOCATIONS = 2_048
"""Allocations whose trial, agent and experiment the log policy matcher keeps (live ones
are looked up; issue 37: the master's memory per finished trial)."""
MATCHER_EXPERIMENTS = 1_024
"""Experiments whose compiled log policies the matcher keeps."""


class LogPolicyMatcher:
    """Applies log policies to task log lines as the master stores them.

    Args:
        ctx: the master's context (its configs are cached there).
    """

    def __init__(self, ctx: ConfigSource) -> None:
        self._ctx = ctx
        # Both cleared when full (issue 37: nothing per finished trial stays in the
        # master's memory); an entry dropped is read again from the database.
        self._alloc: dict[str, tuple[int, str, int]] = {}  # id -> trial, agent, experiment
        self._policies: dict[int, list[CompiledPolicy]] = {}

    def _lookup(self, s: Session, alloc_id: str) -> tuple[int, str, int] | None:
        hit = self._alloc.get(alloc_id)
        if hit is None:
            alloc = s.get(AllocationRow, alloc_id)
            trial_id = alloc.trial_id if alloc is not None else None
            trial = s.get(TrialRow, trial_id) if trial_id is not None else None
            if alloc is None or trial is None:
                return None
            if len(self._alloc) >= MATCHER_ALLOCATIONS:
                self._alloc.clear()
            hit = self._alloc[alloc_id] = (trial.id, alloc.agent_id, trial.experiment_id)
        return hit

    def _for_experiment(self, s: Session, exp_id: int) -> list[CompiledPolicy]:
        policies = self._policies.get(exp_id)
        if policies is None:
            exp = s.get(ExperimentRow, exp_id)
            policies = compile_log_policies(self._ctx.experiment_config(exp)) if exp else []
            if len(self._policies) >= MATCHER_EXPERIMENTS:
                self._policies.clear()
            self._policies[exp_id] = policies
        return policies

    def apply(self, s: Session, rows: list[TaskLogRow]) -> None:
        """Match ``rows`` (new lines, any allocations) and record what matched in their
        trials (inside the caller's transaction)."""
        for row in rows:
            found = self._lookup(s, row.allocation_id)
            if found is None:
                continue
            trial_id, agent_id, exp_id = found
            for policy in self._for_experiment(s, exp_id):
                if policy.regex.search(row.log) is None:
                    continue
                trial = s.get(TrialRow, trial_id)
                if trial is None:
                    continue
                state = dict(trial.log_policy_state or {})
                names = list(state.get("names", []))
                excluded = list(state.get("excluded_agents", []))
                changed = False
                if policy.name not in names:
                    names.append(policy.name)
                    changed = True
                if policy.action == "cancel_retries" and not state.get("cancel_retries"):
                    state["cancel_retries"] = changed = True
                if policy.action == "exclude_node" and agent_id not in excluded:
                    excluded.append(agent_id)
                    changed = True
                if changed:
                    log.info(
                        "trial %s: log policy %r matched a line on agent %s",
                        trial_id,
                        policy.name,
                        agent_id,
                    )
                    state["names"], state["excluded_agents"] = names, excluded
                    trial.log_policy_state = state  # a new dict: the JSON column is saved


def retries_canceled(trial: TrialRow) -> bool:
    """Whether a ``cancel_retries`` log policy matched the trial's logs."""
    return bool((trial.log_policy_state or {}).get("cancel_retries"))


def excluded_agents(trial: TrialRow) -> set[str]:
    """Agents an ``exclude_node`` log policy keeps the trial away from."""
    return set((trial.log_policy_state or {}).get("excluded_agents", []))


def record_failure(
    s: Session, trial: TrialRow, alloc: AllocationRow, exit_code: int | None, message: str | None
) -> dict[str, Any]:
    """Keep in ``trial.failure`` which run failed, how, and the last error line it
    printed (its last stderr line that names an error, else its last stderr line).

    Returns:
        The record: ``{run_id, allocation_id, agent_id, exit_code, message, log}``.
    """
    lines = s.scalars(
        select(TaskLogRow.log)
        .where(
            TaskLogRow.trial_id == trial.id,
            TaskLogRow.allocation_id.like(f"{alloc.group_id}%"),
            TaskLogRow.stdtype == "stderr",
        )
        .order_by(TaskLogRow.id.desc())
        .limit(200)
    ).all()
    texts = [str(line).strip() for line in lines if str(line).strip()]
    chosen = next((t for t in texts if _ERROR_LINE.match(t)), texts[0] if texts else None)
    record = {
        "run_id": alloc.run_id,
        "allocation_id": alloc.group_id,
        "agent_id": alloc.agent_id,
        "exit_code": exit_code,
        "message": message,
        "log": chosen,
    }
    trial.failure = record
    return record
