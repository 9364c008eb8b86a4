"""Why a trial failed, as ``det trial describe`` and ``det experiment describe`` show it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def failure_text(trial: Mapping[str, Any]) -> str | None:
    """One line for the trial's latest failed run, or None when no run failed: which run
    (its run id, allocation and agent) and the last error line it printed (else the
    agent's message, else the exit code).

    Args:
        trial: a Trial of the REST API (its ``failure`` field, docs/protocol.md).
    """
    failure = trial.get("failure")
    if not isinstance(failure, dict):
        return None
    why = failure.get("log") or failure.get("message") or f"exit code {failure.get('exit_code')}"
    where = f"run {failure.get('run_id')}"
    if failure.get("agent_id"):
        where += f" on agent {failure['agent_id']}"
    if failure.get("allocation_id"):
        where += f" (allocation {str(failure['allocation_id'])[:12]})"
    return f"{why}  [{where}, exit code {failure.get('exit_code')}]"


def failure_fields(trial: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Describe lines: ``Error`` (an ERROR trial) or ``Last failure`` (one that was
    restarted), and ``Log policies`` when any matched."""
    out: list[tuple[str, str]] = []
    text = failure_text(trial)
    if text is not None:
        out.append(("Error" if trial.get("state") == "ERROR" else "Last failure", text))
    names = trial.get("log_policy_matches") or []
    if names:
        out.append(("Log policies", ", ".join(str(n) for n in names)))
    return out
