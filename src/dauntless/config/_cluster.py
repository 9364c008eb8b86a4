"""Master and agent configs (Determined's names where they exist, reference §7.7-7.8)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from ._experiment import CheckpointStorageConfig
from ._provider import AgentResourceManagerConfig, ProviderConfig, ResourceManagerConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourcePoolConfig(_Strict):
    """One resource pool of the master config.

    Attributes:
        provider: starts and stops this pool's agents on demand (``local``, ``aws``,
            ``gcp``; :mod:`dauntless.config._provider`); None for agents started by hand.
    """

    pool_name: str = Field(min_length=1)
    description: str = ""
    scheduler: dict[str, Any] = Field(default_factory=dict)
    max_cpu_containers_per_agent: int = Field(default=100, ge=0)
    provider: ProviderConfig | None = None


DEFAULT_TOKEN_LIFESPAN_SECONDS = 7 * 24 * 3600.0
"""How long a login token is valid by default (seconds): 7 days, as Determined's."""


class TokenConfig(_Strict):
    """Login tokens (``security.token``).

    Attributes:
        max_lifespan: seconds a token issued at login stays valid (default 7 days); a
            logout or a password change revokes it sooner.
    """

    max_lifespan: float = Field(default=DEFAULT_TOKEN_LIFESPAN_SECONDS, gt=0)


class TLSConfig(_Strict):
    """HTTPS for the master's API and UI (``security.tls``, Determined's names).

    Attributes:
        cert: path of the PEM certificate (chain) the master presents; with ``key`` the
            master serves HTTPS only, else plain HTTP.
        key: path of the PEM private key of ``cert``.
    """

    cert: str | None = None
    key: str | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> TLSConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError(
                "security.tls needs both cert and key (PEM file paths), or neither for HTTP"
            )
        return self

    @property
    def enabled(self) -> bool:
        """True when the master serves HTTPS."""
        return self.cert is not None and self.key is not None


class RoleAssignConfig(_Strict):
    """``security.authz.workspace_creator_assign_role``: the role a workspace's creator
    gets on it.

    Attributes:
        enabled: give the role (default true).
        role_id: the role's id (default 2, WorkspaceAdmin); one of Determined's role ids
            (the master refuses to start with an unknown one).
    """

    enabled: bool = True
    role_id: int = Field(default=2, gt=0)


class AuthzConfig(_Strict):
    """Who may do what (``security.authz``, Determined's names; docs/protocol.md,
    "Workspaces, projects and RBAC").

    Attributes:
        type: ``basic`` (the default, as Determined's): every user views everything and
            may create workspaces, projects, experiments and tasks; changes to what
            others own need its owner or an admin; explicit role assignments add to
            that. ``rbac``: a user may do only what their roles (direct or through
            their groups, cluster-wide or on a workspace) grant, plus their rights as
            owner of what they created while they may still see it.
        workspace_creator_assign_role: the role given to a workspace's creator on it.
        strict_job_queue_control: only holders of ``CONTROL_STRICT_JOB_QUEUE``
            (ClusterAdmin) may change a job's priority or weight; otherwise whoever may
            update the experiment or task may.
    """

    type: Literal["basic", "rbac"] = "basic"
    workspace_creator_assign_role: RoleAssignConfig = Field(default_factory=RoleAssignConfig)
    strict_job_queue_control: bool = False


class SecurityConfig(_Strict):
    """Authentication of users, agents and trials (``security``; docs/protocol.md,
    "Authentication").

    Secrets are :class:`pydantic.SecretStr`: they print as ``**********`` in reprs, logs
    and any ``model_dump(mode="json")``, so an echoed config never shows them.

    Attributes:
        initial_user_password: the password given to the built-in ``admin`` and
            ``determined`` users when they are first created (a new cluster; a database
            migrated from before users existed). Empty when None, as Determined's. Once
            the users exist it changes nothing: use ``det user change-password``.
        cluster_secret: the shared secret agents present (header
            ``X-Dauntless-Cluster-Secret``). When None the master makes a random one on
            first start and keeps it in ``<data_dir>/cluster_secret`` (mode 0600), the
            file to hand to agents (``--cluster-secret-file``).
        token: login token settings.
        tls: the certificate and key for HTTPS (:class:`TLSConfig`).
        authz: authorization (:class:`AuthzConfig`).
    """

    initial_user_password: SecretStr | None = None
    cluster_secret: SecretStr | None = None
    token: TokenConfig = Field(default_factory=TokenConfig)
    tls: TLSConfig = Field(default_factory=TLSConfig)
    authz: AuthzConfig = Field(default_factory=AuthzConfig)


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
        resource_manager: where tasks run: ``agent`` (Dauntless agents, the default) or
            ``slurm`` (Slurm jobs; its partitions are the pools).
        security: users, login tokens and the agents' cluster secret.
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
    resource_manager: ResourceManagerConfig = Field(default_factory=AgentResourceManagerConfig)
    cluster_name: str = "dauntless"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    security: SecurityConfig = Field(default_factory=SecurityConfig)

    @model_validator(mode="after")
    def _providers_need_agents(self) -> MasterConfig:
        if self.resource_manager.type != "agent":
            for pool in self.resource_pools:
                if pool.provider is not None:
                    raise ValueError(
                        f"resource_pools[{pool.pool_name}].provider: provisioning starts "
                        "agents, so it needs resource_manager type agent, not "
                        f"{self.resource_manager.type}"
                    )
        return self


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
        cluster_secret: the master's cluster secret, sent with every request to the
            master (``X-Dauntless-Cluster-Secret``); never passed on to tasks.
        master_cert_file: a PEM CA bundle that signed an HTTPS master's certificate
            (self-signed or private CA), or ``noverify``; the system's trust store when
            None. Handed on to the agent's tasks as ``DET_MASTER_CERT_FILE``.
        runtime: how tasks run (:mod:`dauntless.agent.runtimes`): ``process``, ``docker``,
            ``podman``, or ``auto`` (docker or podman when its engine answers, else
            process). Tasks without ``environment.image`` run as processes either way.
        warm_start: fork single-rank trials from a warm worker that has already imported
            torch and Dauntless (docs/warm-start.md); False starts every task cold.
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
    cluster_secret: SecretStr | None = None
    master_cert_file: str | None = None
    runtime: Literal["auto", "process", "docker", "podman"] = "auto"
    warm_start: bool = True
