"""What a task knows about itself, read from the ``DET_*`` environment variables.

Source of the variable names and meanings: docs/protocol.md, "Trial harness" (they are
Determined's names). The agent sets them on every task process.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from dauntless._auth import read_task_secret

TASK_TYPE_TRIAL = "TRIAL"


@dataclasses.dataclass(frozen=True)
class TrialInfo:
    """The trial a task process trains.

    Attributes:
        trial_id: the trial's id.
        experiment_id: its experiment's id.
        trial_seed: the trial seed, 0..2**31-1; seeds ``random``, ``numpy`` and ``torch``.
        hparams: this trial's sampled hyperparameter values (plain JSON values).
        config: the resolved experiment config as JSON (``checkpoint_storage`` filled in).
        trial_run_id: counts the trial's allocations from 1.
        latest_checkpoint: uuid of the checkpoint to resume from, or None.
        steps_completed: batches trained by ``latest_checkpoint`` (0 when None).

    Raises:
        ValueError: if an id is negative, the seed is out of range, ``trial_run_id`` < 1
            or ``steps_completed`` < 0.
        TypeError: if ``hparams`` or ``config`` is not a dict.
    """

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    trial_run_id: int = 1
    latest_checkpoint: str | None = None
    steps_completed: int = 0

    def __post_init__(self) -> None:
        for name in ("trial_id", "experiment_id", "trial_run_id", "steps_completed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if self.trial_run_id < 1:
            raise ValueError(f"trial_run_id counts from 1, got {self.trial_run_id}")
        seed = self.trial_seed
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
            raise ValueError(f"trial_seed must be an int in [0, 2**31), got {seed!r}")
        if not isinstance(self.hparams, dict):
            raise TypeError(f"hparams must be a dict, got {type(self.hparams).__name__}")
        if not isinstance(self.config, dict):
            raise TypeError(f"config must be a dict, got {type(self.config).__name__}")


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """A task's view of the cluster.

    Attributes:
        master_url: the master's base URL, e.g. ``http://127.0.0.1:8080``.
        task_type: ``TRIAL`` for trials (other task types come later).
        allocation_id: this run's allocation id.
        task_id: the task's id.
        slot_ids: the slots this task was given.
        trial: the trial being trained; None for tasks that are not trials.
        cluster_id: the cluster's id (``DET_CLUSTER_ID``; empty when not given).
        agent_id: the agent running the task (``DET_AGENT_ID``; empty when not given).
        session_token: the task's API token (``DET_SESSION_TOKEN``; empty when none).
        container_rank: this node's index among the allocation's nodes (agents), 0 being
            the chief (``DET_CONTAINER_RANK``, else ``DET_PART_INDEX``).
        container_addrs: the address of every node of the allocation, in rank order
            (``DET_CONTAINER_ADDRS``; for a one-node allocation without it, the agent's
            ``DET_ADVERTISE_ADDR``, else ``127.0.0.1``).
        gpu_uuids: the GPUs given to the task (empty on CPU slots).
    """

    master_url: str
    task_type: str
    allocation_id: str
    task_id: str
    slot_ids: tuple[str, ...] = ()
    trial: TrialInfo | None = None
    cluster_id: str = ""
    agent_id: str = ""
    session_token: str = ""
    container_rank: int = 0
    container_addrs: tuple[str, ...] = ()
    gpu_uuids: tuple[str, ...] = ()

    @property
    def latest_checkpoint(self) -> str | None:
        """The checkpoint uuid to resume from, or None (also None for non-trial tasks)."""
        return self.trial.latest_checkpoint if self.trial else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClusterInfo | None:
        """Read the task's cluster info from ``DET_*`` environment variables.

        Args:
            environ: the environment to read; ``os.environ`` when None.

        Returns:
            The info, or None when ``DET_MASTER`` is unset or empty (off-cluster).

        Raises:
            ValueError: when on-cluster but a variable is missing or malformed; the
                message names the variable and what was expected.
        """
        env = os.environ if environ is None else environ
        master = env.get("DET_MASTER", "").strip()
        if not master:
            return None
        task_type = env.get("DET_TASK_TYPE", TASK_TYPE_TRIAL).strip() or TASK_TYPE_TRIAL
        slots = tuple(s for s in env.get("DET_SLOT_IDS", "").split(",") if s.strip())
        trial = _trial_from_env(env) if task_type == TASK_TYPE_TRIAL else None
        return cls(
            master_url=master.rstrip("/"),
            task_type=task_type,
            allocation_id=_required(env, "DET_ALLOCATION_ID"),
            task_id=env.get("DET_TASK_ID", "").strip(),
            slot_ids=tuple(s.strip() for s in slots),
            trial=trial,
            cluster_id=env.get("DET_CLUSTER_ID", "").strip(),
            agent_id=env.get("DET_AGENT_ID", "").strip(),
            # The agent hands it as a file ($DET_SESSION_TOKEN_FILE), issue 29.
            session_token=read_task_secret("DET_SESSION_TOKEN", env),
            container_rank=_int_var(
                env, "DET_CONTAINER_RANK", default=_int_var(env, "DET_PART_INDEX", default=0)
            ),
            container_addrs=_container_addrs(env),
            gpu_uuids=_list_var(env, "DET_GPU_UUIDS"),
        )


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ValueError(f"environment variable {name} is required on a cluster task")
    return value


def _container_addrs(env: Mapping[str, str]) -> tuple[str, ...]:
    addrs = _list_var(env, "DET_CONTAINER_ADDRS")
    if addrs:
        return addrs
    if _int_var(env, "DET_NUM_PARTS", default=1) <= 1:
        return (env.get("DET_ADVERTISE_ADDR", "").strip() or "127.0.0.1",)
    return ()


def _list_var(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in env.get(name, "").split(",") if x.strip())


def get_cluster_info() -> ClusterInfo | None:
    """This task's :class:`ClusterInfo`, or None when not running on a cluster.

    Read from the ``DET_*`` environment the agent sets (docs/protocol.md).

    Raises:
        ValueError: when on a cluster but a variable is missing or malformed.
    """
    return ClusterInfo.from_env()


def _int_var(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        if default is not None:
            return default
        raise ValueError(f"environment variable {name} is required (an int)")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an int, got {raw!r}") from None


def _json_object_var(env: Mapping[str, str], name: str) -> dict[str, Any]:
    raw = env.get(name, "").strip()
    if not raw:
        raise ValueError(f"environment variable {name} is required (a JSON object)")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"environment variable {name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"environment variable {name} must be a JSON object, got {type(value).__name__}"
        )
    return value


def _trial_from_env(env: Mapping[str, str]) -> TrialInfo:
    latest = env.get("DET_LATEST_CHECKPOINT", "").strip() or None
    try:
        return TrialInfo(
            trial_id=_int_var(env, "DET_TRIAL_ID"),
            experiment_id=_int_var(env, "DET_EXPERIMENT_ID"),
            trial_seed=_int_var(env, "DET_TRIAL_SEED"),
            hparams=_json_object_var(env, "DET_HPARAMS"),
            config=_json_object_var(env, "DET_EXPERIMENT_CONFIG"),
            trial_run_id=_int_var(env, "DET_TRIAL_RUN_ID", default=1),
            latest_checkpoint=latest,
            steps_completed=_int_var(env, "DET_STEPS_COMPLETED", default=0) if latest else 0,
        )
    except ValueError as exc:
        msg = str(exc)
        if not msg.startswith("environment variable"):
            msg = f"invalid DET_* trial environment: {msg}"
        raise ValueError(msg) from None
