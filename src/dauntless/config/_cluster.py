"""Master and agent configs (Determined's names where they exist, reference §7.7-7.8)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._experiment import CheckpointStorageConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourcePoolConfig(_Strict):
    """One resource pool of the master config."""

    pool_name: str = Field(min_length=1)
    description: str = ""
    scheduler: dict[str, Any] = Field(default_factory=dict)
    max_cpu_containers_per_agent: int = Field(default=100, ge=0)


class MasterConfig(_Strict):
    """The master's config.

    Attributes:
        host, port: where the REST API listens (Determined's default port 8080).
        db_url: SQLAlchemy URL; ``sqlite:///<data_dir>/dauntless.db`` when None.
        data_dir: directory for the database, uploaded contexts and default checkpoints.
        checkpoint_storage: default storage for experiments that name none; a
            ``shared_fs`` under ``<data_dir>/checkpoints`` when None.
        agent_timeout: seconds without a heartbeat after which an agent is lost.
        scheduler_interval: seconds between scheduling passes of the background loop.
        resource_pools: declared pools; ``default`` always exists.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    db_url: str | None = None
    data_dir: str
    checkpoint_storage: CheckpointStorageConfig | None = None
    agent_timeout: float = Field(default=30.0, gt=0)
    scheduler_interval: float = Field(default=0.2, gt=0)
    resource_pools: list[ResourcePoolConfig] = Field(
        default_factory=lambda: [ResourcePoolConfig(pool_name="default")]
    )
    cluster_name: str = "dauntless"
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class AgentConfig(_Strict):
    """An agent's config.

    Attributes:
        master_url: the master's base URL (``http://127.0.0.1:8080``).
        agent_id: unique name; the host name when None.
        resource_pool: the pool this agent joins.
        slot_type: ``auto`` (GPUs if found, else CPU), ``cuda``, ``cpu`` or ``none``.
        artificial_slots: if > 0, report this many CPU slots instead of discovering.
        work_dir: directory holding one working directory per task.
        heartbeat_interval: seconds between heartbeats (which also fetch work).
        advertise_addr: the address other agents use to reach this one's ranks
            (distributed training); found from the route to the master when None.
    """

    master_url: str = "http://127.0.0.1:8080"
    agent_id: str | None = None
    resource_pool: str = "default"
    slot_type: Literal["auto", "cuda", "gpu", "cpu", "none"] = "auto"
    artificial_slots: int = Field(default=0, ge=0)
    visible_gpus: str | None = None
    work_dir: str
    heartbeat_interval: float = Field(default=0.5, gt=0)
    advertise_addr: str | None = None
