"""Master and agent configs (Determined's names where they exist, reference §7.7-7.8)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from ._experiment import CheckpointStorageConfig
from ._identity import DefaultTaskConfig
from ._provider import (
    AgentResourceManagerConfig,
    Duration,
    ProviderConfig,
    ResourceManagerConfig,
)
from ._sso import AuditConfig, OIDCConfig, check_lifespan_days, days_or_infinite


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
    """Login sessions and access tokens (``security.token``).

    Attributes:
        max_lifespan: seconds a token issued at login stays valid (default 7 days); a
            logout or a password change revokes it sooner.
        default_lifespan_days: days an access token (``det token create``) lives when its
            request names no lifespan (Determined's default 30); ``-1``: no limit.
        max_lifespan_days: the longest lifespan an access token may be given, in days
            (default 30); ``-1``: no limit.
    """

    max_lifespan: float = Field(default=DEFAULT_TOKEN_LIFESPAN_SECONDS, gt=0)
    default_lifespan_days: int = 30
    max_lifespan_days: int = 30

    @model_validator(mode="after")
    def _lifespans(self) -> TokenConfig:
        check_lifespan_days("security.token.default_lifespan_days", self.default_lifespan_days)
        check_lifespan_days("security.token.max_lifespan_days", self.max_lifespan_days)
        if days_or_infinite(self.default_lifespan_days) > days_or_infinite(self.max_lifespan_days):
            raise ValueError(
                "security.token.default_lifespan_days "
                f"({self.default_lifespan_days}) must not exceed max_lifespan_days "
                f"({self.max_lifespan_days})"
            )
        return self

    @property
    def default_access_lifespan(self) -> float:
        """Seconds an access token lives by default."""
        return days_or_infinite(self.default_lifespan_days)

    @property
    def max_access_lifespan(self) -> float:
        """The most seconds an access token may live."""
        return days_or_infinite(self.max_lifespan_days)


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


DEFAULT_MAX_AGENT_SLOTS = 64
"""Slots one agent may register by default (``security.agents.max_slots``)."""


class AgentPolicyConfig(_Strict):
    """What the master accepts of an agent's registration (``security.agents``).

    An agent proves itself with the cluster secret once; what it then claims to have is
    checked here, so that a stolen secret cannot register a machine of 100,000 slots
    and attract every task.

    Attributes:
        max_slots: the most slots one agent may register (default 64); a registration
            with more is refused (400, naming the field).
        allow_artificial_slots: whether agents may register artificial CPU slots
            (``--artificial-slots``, for tests and demos; their slots say ``device:
            artificial``). Off by default; ``det deploy local cluster-up
            --artificial-slots`` turns it on for its own master, and agents that a
            ``local`` provider starts get them from the master's own config.
    """

    max_slots: int = Field(default=DEFAULT_MAX_AGENT_SLOTS, ge=0, le=100_000)
    allow_artificial_slots: bool = False


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


class SshConfig(_Strict):
    """The SSH key pairs of shells (``security.ssh``, Determined's field names;
    :mod:`dauntless.master.shell_ssh`).

    Attributes:
        key_type: ``ED25519`` (default), ``RSA`` or ``ECDSA`` (P-256).
        rsa_key_size: bits of an RSA key, 1024..16384 (default 2048; OpenSSH refuses RSA
            keys under 1024 bits); RSA only.
    """

    key_type: Literal["ED25519", "RSA", "ECDSA"] = "ED25519"
    rsa_key_size: int | None = Field(default=None, ge=1024, le=16384)

    @model_validator(mode="after")
    def _rsa_only(self) -> SshConfig:
        if self.rsa_key_size is not None and self.key_type != "RSA":
            raise ValueError(f"rsa_key_size applies to key_type RSA only, not {self.key_type}")
        return self


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
        default_task: the Unix identity of tasks whose owner is not linked to one
            (``det user link-with-agent-user``); ``nobody``/``nogroup`` (65534) by
            default, root only when configured so (:mod:`dauntless.config._identity`).
        agents: what agents may register (:class:`AgentPolicyConfig`).
        authz: authorization (:class:`AuthzConfig`).
        ssh: the key pairs of shells (:class:`SshConfig`).
    """

    initial_user_password: SecretStr | None = None
    cluster_secret: SecretStr | None = None
    token: TokenConfig = Field(default_factory=TokenConfig)
    tls: TLSConfig = Field(default_factory=TLSConfig)
    default_task: DefaultTaskConfig = Field(default_factory=DefaultTaskConfig)
    agents: AgentPolicyConfig = Field(default_factory=AgentPolicyConfig)
    authz: AuthzConfig = Field(default_factory=AuthzConfig)
    ssh: SshConfig = Field(default_factory=SshConfig)


class TaskProxyConfig(_Strict):
    """The origin of task services (``task_proxy``; docs/protocol.md, "Proxy").

    Notebooks, TensorBoards and shells are served from an origin other than the
    master's, so that a page a task serves cannot act with the master's cookie: by
    default a second port of the master; with ``domain``, a host name per task.

    Attributes:
        port: the port of the proxy origin: None (default) is the master's port + 1
            (8081); 0 lets the OS pick a free port at start.
        host: the address it listens on; None: the master's ``host``.
        domain: a DNS domain whose every name (``*.<domain>``, a wildcard record)
            reaches the master: each task is then served at
            ``<task id>.<domain>:<port>``, an origin of its own, so one task's page
            cannot reach another task's either. None: every task shares the proxy
            origin, on the host name the browser used for the master.
    """

    port: int | None = Field(default=None, ge=0, le=65535)
    host: str | None = None
    domain: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$",
    )


class CustomSearchersConfig(_Strict):
    """``custom_searchers``: who may run a custom search method inside the master.

    A method named in an experiment config (``searcher.method``) runs in the master's
    process with the master's privileges (its database, secrets and files), so a
    multi-user cluster must not run just anyone's: ``off`` (the default) refuses such
    experiments and leaves the remote search runner, which runs the method in the
    user's own process with the user's own token; ``admins`` accepts them from
    administrators only; ``all`` from every user (a single-user or fully trusted
    cluster).
    """

    in_master: Literal["off", "admins", "all"] = "off"


class WebhooksConfig(_Strict):
    """Webhooks (``webhooks``; reference §6.3, issue 31 scope 6).

    Attributes:
        signing_key: the key of the HMAC-SHA256 signature of every webhook request
            (header ``X-Determined-AI-Signature``). When None the master makes a random
            one on first start and keeps it in ``<data_dir>/webhook_signing_key`` (mode
            0600); unlike Determined's, it is never shown by the REST API.
        base_url: the WebUI address used in links of Slack messages (empty: none).
        max_attempts: how many times one event is tried (transport errors and 5xx
            answers are retried; a 4xx is a permanent failure), with exponential
            backoff of ``1 s * 2**n`` capped at ``max_backoff`` seconds. Determined tries
            3 times; the default here keeps an event for about 20 minutes of a
            receiver's absence.
        max_backoff: seconds, the longest wait between two tries.
        timeout: seconds one request may take.
    """

    signing_key: SecretStr | None = None
    base_url: str = ""
    max_attempts: int = Field(default=25, ge=1, le=1000)
    max_backoff: float = Field(default=60.0, gt=0, le=86_400)
    timeout: float = Field(default=10.0, gt=0, le=600)


class ObservabilityConfig(_Strict):
    """Monitoring of the master (``observability``, Determined's name and default).

    Attributes:
        enable_prometheus: serve Prometheus's text format at ``/prom/det-state-metrics``
            (the cluster's agents, slots, allocations, tasks and experiments) and
            ``/debug/prom/metrics`` (the master process: requests, metric ingest,
            scheduling, database); both need an admin's credential (an access token
            for the scraper, docs/prometheus.md). When False both answer 404 and the
            master measures nothing.
    """

    enable_prometheus: bool = True


class RetentionPolicyConfig(_Strict):
    """``retention_policy`` of the master (Determined's names; issue 34).

    Attributes:
        log_retention_days: days task logs are kept after their trial or task ends
            when its experiment gives no ``retention_policy.log_retention_days``
            (-1, the default: forever; 0: at the next cleanup).
        schedule: seconds between the master's deletions of expired logs, or a
            duration (``24h``, ``30m``); None (the default): no automatic cleanup
            (``POST /api/v1/cleanup_logs`` runs one). Cron expressions (Determined's
            other form) are refused.
    """

    log_retention_days: int = Field(default=-1, ge=-1, le=32767)
    schedule: Duration | None = None

    @model_validator(mode="after")
    def _positive(self) -> RetentionPolicyConfig:
        if self.schedule is not None and self.schedule < 1:
            raise ValueError(
                f"retention_policy.schedule must be at least 1 second, got {self.schedule}"
            )
        return self


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
        max_search_trials: the most trials one experiment's search may plan (a grid's
            points, ``max_trials``, ASHA's brackets); a larger search is refused at
            create (and ``validate_only``) naming the field, as a preview refuses it.
        task_proxy: where the task services' own origin listens (:class:`TaskProxyConfig`).
        oidc: single sign-on through an OpenID Connect provider (:class:`OIDCConfig`).
        audit: the audit trail's retention (:class:`AuditConfig`).
        custom_searchers: who may run custom search methods in the master
            (:class:`CustomSearchersConfig`).
        webhooks: signing and delivery of webhooks (:class:`WebhooksConfig`).
        observability: the Prometheus endpoints (:class:`ObservabilityConfig`).
        retention_policy: how long task logs are kept (:class:`RetentionPolicyConfig`).
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
    max_search_trials: int = Field(default=100_000, ge=1, le=2**31 - 1)
    task_proxy: TaskProxyConfig = Field(default_factory=lambda: TaskProxyConfig())
    oidc: OIDCConfig = Field(default_factory=OIDCConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    custom_searchers: CustomSearchersConfig = Field(default_factory=CustomSearchersConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    retention_policy: RetentionPolicyConfig = Field(default_factory=RetentionPolicyConfig)

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
        orphan_grace_period: seconds a task outlives its agent when the agent dies
            without stopping it (a crash, SIGKILL): an agent started again on the same
            ``work_dir`` within this time adopts the task; after it, the task's
            supervisor ends every process of the task (:mod:`dauntless.agent._shim`).
        prometheus_port: serve the agent's metrics (its slots, slots in use, running
            tasks, its process) in Prometheus's text format on this port (0: a free
            one, logged); None (the default) serves nothing.
        prometheus_host: the address that port listens on (default 127.0.0.1; a
            Prometheus on another machine needs ``0.0.0.0`` or the agent's address).
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
    orphan_grace_period: float = Field(default=180.0, ge=0, le=7 * 24 * 3600)
    prometheus_port: int | None = Field(default=None, ge=0, le=65535)
    prometheus_host: str = "127.0.0.1"
