"""SQLAlchemy 2 ORM models of the master's database (the source of truth).

Every table here is created by the Alembic migrations in ``dauntless/master/migrations``;
a change to a model needs a new migration (``tests/unit/master/test_migrations.py``
checks that the two agree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of every master table."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
    #: Every mapped class here has a plain table (no mapping to a join or select), so
    #: ``Row.__table__`` can be given to insert()/update()/delete() as a Table.
    if TYPE_CHECKING:
        __table__: ClassVar[Table]


class ClusterRow(Base):
    """One row: the cluster's identity, made when the database is new."""

    __tablename__ = "cluster"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class UserRow(Base):
    """A user of the cluster.

    ``password_hash`` is an argon2id hash (argon2-cffi's encoded form, which carries its
    own salt and cost parameters); None only for the built-in users between the
    migration that made them and the master's first start, which sets their password
    (``security.initial_user_password``, else empty). ``modified_at`` changes with
    every edit, the password included. ``agent_uid``, ``agent_gid``, ``agent_user`` and
    ``agent_group`` are the user's link to a Unix identity (Determined's
    ``agent_user_group``), each None when unset (:mod:`dauntless.config._identity`).
    """

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(256), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(512), nullable=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    display_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    modified_at: Mapped[float] = mapped_column(Float)
    agent_uid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    agent_gid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    agent_user: Mapped[str | None] = mapped_column(String(64), nullable=True)
    agent_group: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: Signs in only through single sign-on (Determined's ``remote``): no password.
    remote: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


USER_SESSION = "USER_SESSION"
"""``UserSessionRow.token_type`` of a login session (password or single sign-on)."""
ACCESS_TOKEN = "ACCESS_TOKEN"
"""``UserSessionRow.token_type`` of an access token (``det token create``)."""


class UserSessionRow(Base):
    """A bearer token of a user: the SHA-256 of the token (never the token), its user,
    its kind and when it expires.

    ``token_type`` is :data:`USER_SESSION` (a sign-in: logout deletes the row, a password
    change deletes every session row of the user) or :data:`ACCESS_TOKEN` (Determined's
    access tokens, for scripts and CI: kept when revoked, ``revoked`` set, so that lists
    can show them; a password change leaves them).
    """

    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    token_type: Mapped[str] = mapped_column(
        String(32), default=USER_SESSION, server_default=USER_SESSION
    )
    description: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ExperimentRow(Base):
    """An experiment: its resolved config, state and searcher snapshot."""

    __tablename__ = "experiments"
    __table_args__ = {"sqlite_autoincrement": True}  # ids are never reused

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Markdown notes (issue 31; migration 0021), edited in the WebUI's Notes tab.
    notes: Mapped[str] = mapped_column(Text, server_default="")
    state: Mapped[str] = mapped_column(String(32), index=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    # The owner's username (users cannot be renamed, so it stays right) and id.
    owner: Mapped[str] = mapped_column(String(256), default="determined")
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, index=True)
    # Its project (issue 30); 1 is the Uncategorized project (``db.teams``).
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id"), index=True, server_default=text("1")
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    original_config: Mapped[str] = mapped_column(Text)
    seed: Mapped[int] = mapped_column(Integer)
    # Deferred: the searcher state grows with the trials of a search and only the
    # searcher calls read it; every other load of an experiment skips decoding it.
    searcher_state: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True, deferred=True
    )
    # Searcher events (issue 37): ``searcher_seq`` counts the events applied to the
    # search, ``searcher_snapshot_seq`` the ones ``searcher_state`` holds; the events
    # in between are rows of ``searcher_events`` (SearcherEventRow).
    searcher_seq: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    searcher_snapshot_seq: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    searcher_shutdown: Mapped[bool] = mapped_column(Boolean, default=False)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The search index (migration 0022, ``models.experiment_index``): the config's
    # searcher name, metric and direction as columns, the best searcher-metric value of
    # its trials and the trial whose hyperparameters ``experiment_hparams`` holds.
    searcher_name: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    searcher_metric: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # server_default only: a Core insert naming older columns works on older revisions
    smaller_is_better: Mapped[bool] = mapped_column(Boolean, server_default=true())
    best_searcher_metric: Mapped[float | None] = mapped_column(Float, nullable=True)
    best_trial_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Days its trials' logs are kept after they end (issue 34): the config's
    # retention_policy.log_retention_days or `det e set log-retention`; -1 forever;
    # None: the master's retention_policy.log_retention_days.
    log_retention_days: Mapped[int | None] = mapped_column(Integer, nullable=True)


Index(
    "ix_experiments_metric_best",
    ExperimentRow.searcher_metric,
    ExperimentRow.best_searcher_metric,
)
Index("ix_experiments_owner", ExperimentRow.owner)
Index("ix_experiments_start_time", ExperimentRow.start_time)


class SearcherEventRow(Base):
    """One event of an experiment's searcher after its stored snapshot (issue 37): the
    searcher method and its arguments, ``[name, [args], {kwargs}]`` as JSON text
    (Python's JSON, so a NaN metric stays NaN), replayed in ``seq`` order after a
    restore of the snapshot."""

    __tablename__ = "searcher_events"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    event: Mapped[str] = mapped_column(Text)


class ModelDefinitionRow(Base):
    """The experiment's context directory, a gzipped tar (bytes), kept apart so that
    reading experiments never loads it."""

    __tablename__ = "model_definitions"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    content: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)


class TrialRow(Base):
    """A trial: one hyperparameter configuration of an experiment."""

    __tablename__ = "trials"
    __table_args__ = (  # ids are never reused
        UniqueConstraint("experiment_id", "request_id"),
        # An experiment's live trials without reading its ended ones (issue 37).
        Index("ix_trials_experiment_state", "experiment_id", "state"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    request_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32), index=True)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(Integer)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    run_id: Mapped[int] = mapped_column(Integer, default=0)
    total_batches: Mapped[int] = mapped_column(Integer, default=0)
    # The searcher's current target (absolute batches) and what was completed.
    searcher_op_length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    searcher_completed_length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    searcher_closed: Mapped[bool] = mapped_column(Boolean, default=False)
    early_exit_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    best_validation: Mapped[float | None] = mapped_column(Float, nullable=True)
    latest_checkpoint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    # {"names": [policy names matched], "cancel_retries": bool, "excluded_agents": [ids]}
    log_policy_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The latest failed run: {run_id, allocation_id, agent_id, exit_code, message, log}.
    failure: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The fraction of its training the trial last reported (POST /trials/{id}/progress).
    progress: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Lineage (issue 35): the trial this one was warm-started from (a PBT clone's
    # parent) and the uuid of that parent's checkpoint it starts from.
    parent_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    warm_start_checkpoint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Issue 31: the trial's metadata (``core.train.set_metadata``, a JSON object) and
    # the status its code last set (``core.train.set_status``).
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    runner_state: Mapped[str | None] = mapped_column(String(256), nullable=True)


class MetricRow(Base):
    """One report of training or validation metrics at a batch count."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("trial_id", "kind", "total_batches"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    total_batches: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[float | None] = mapped_column(Float, nullable=True)
    trial_run_id: Mapped[int] = mapped_column(Integer, default=0)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    batch_metrics: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    reported_at: Mapped[float] = mapped_column(Float)


class CheckpointRow(Base):
    """A checkpoint's record; its bytes live in checkpoint storage."""

    __tablename__ = "checkpoints"

    uuid: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    experiment_id: Mapped[int] = mapped_column(Integer, index=True)
    allocation_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    total_batches: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    resources: Mapped[dict[str, Any]] = mapped_column(JSON)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    report_time: Mapped[float] = mapped_column(Float)


class AgentRow(Base):
    """An agent and its slots (``[{id, type, device, enabled}]``)."""

    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(256))
    hostname: Mapped[str] = mapped_column(String(256), default="")
    state: Mapped[str] = mapped_column(String(16))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    slots: Mapped[list[Any]] = mapped_column(JSON)
    registered_at: Mapped[float] = mapped_column(Float)
    last_heartbeat: Mapped[float] = mapped_column(Float)
    # What the agent reported at registration (issue 23): {name, containers,
    # mount_namespace}; None for agents that reported nothing (plain processes).
    runtime: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    # SHA-256 of the credential the master issued at the agent's latest registration
    # (issue 29); the agent presents it on every later call. None: none issued yet.
    token_hash: Mapped[str | None] = mapped_column(
        String(64), nullable=True, unique=True, index=True
    )


class AllocationRow(Base):
    """The part, on one agent, of one run of a trial's task.

    A trial run (an *allocation*, id ``group_id``, the ``DET_ALLOCATION_ID`` its processes
    see) holds slots on one or more agents: one row per agent, ``part_index`` 0 being the
    chief, whose ranks start at ``rank_offset``; the run has ``world_size`` ranks in all.
    States of a part: ASSIGNED (placed, not yet handed to the agent), RUNNING (handed
    over), TERMINATED (exited, killed or lost; ``exit_code`` None when unknown).
    """

    __tablename__ = "allocations"
    # An agent's live parts without reading the ones it ran before (issue 37).
    __table_args__ = (Index("ix_allocations_agent_state", "agent_id", "state"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    group_id: Mapped[str] = mapped_column(String(64), index=True)
    part_index: Mapped[int] = mapped_column(Integer, default=0)
    num_parts: Mapped[int] = mapped_column(Integer, default=1)
    rank_offset: Mapped[int] = mapped_column(Integer, default=0)
    world_size: Mapped[int] = mapped_column(Integer, default=1)
    # A trial's run, or (``task_id``) a generic task's run: exactly one is set.
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), index=True, nullable=True
    )
    task_id: Mapped[str | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True, nullable=True
    )
    agent_id: Mapped[str] = mapped_column(String(256), index=True)
    slot_ids: Mapped[list[Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    run_id: Mapped[int] = mapped_column(Integer)
    # Set on the chief part by its launcher: where the ranks meet (torch.distributed).
    rendezvous_addr: Mapped[str | None] = mapped_column(String(256), nullable=True)
    rendezvous_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kill_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # When the master first saw the stop request: preemption_timeout counts from here.
    preempt_requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    exit_fatal: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # SHA-256 of the part's session token (DET_SESSION_TOKEN of its processes), set when
    # the part is handed to its agent.
    token_hash: Mapped[str | None] = mapped_column(
        String(64), nullable=True, unique=True, index=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class TaskRow(Base):
    """A generic task: a command, notebook, shell or TensorBoard
    (:mod:`dauntless.master.models.tasks`).

    ``config`` is the resolved task config (JSON), ``entrypoint`` what the agent runs (a
    string for ``sh -c`` or an argv list), ``context`` the optional context directory (a
    gzipped tar, loaded only when asked for). ``service_addr``/``service_port`` are where
    the task's web service listens once it said it is ready (the proxy's target),
    ``service_token`` the secret the proxy hands the service (Jupyter's token).
    ``user_session_id`` is the owner's login session made for the task's processes
    (``DET_USER_TOKEN``), revoked when the task ends. ``meta`` holds type-specific facts
    (a TensorBoard's experiment and trial ids).
    """

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(16), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    owner: Mapped[str] = mapped_column(String(256))
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, index=True)
    # Its workspace (issue 30); 1 is the Uncategorized workspace (``db.teams``).
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id"), index=True, server_default=text("1")
    )
    description: Mapped[str] = mapped_column(String(512), default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    entrypoint: Mapped[Any] = mapped_column(JSON)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    context: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    run_id: Mapped[int] = mapped_column(Integer, default=0)
    kill_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    service_addr: Mapped[str | None] = mapped_column(String(256), nullable=True)
    service_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    service_token: Mapped[str | None] = mapped_column(String(128), nullable=True)
    user_session_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    start_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    ready_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)


class TaskLogRow(Base):
    """One line a task printed (stdout or stderr)."""

    __tablename__ = "task_logs"
    __table_args__ = (
        Index("ix_task_logs_trial_id_id", "trial_id", "id"),
        UniqueConstraint("allocation_id", "seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trial_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allocation_id: Mapped[str] = mapped_column(String(64))
    # The agent's line number within the allocation: a re-sent batch is stored once.
    seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    timestamp: Mapped[float] = mapped_column(Float)
    stdtype: Mapped[str] = mapped_column(String(8))
    rank_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    log: Mapped[str] = mapped_column(Text)


class MetricSummaryRow(Base):
    """The M4 summary of one metric of one trial's training or validation reports, kept
    up to date as reports arrive so that charts never read the ``metrics`` table
    (:mod:`dauntless.master.metric_series` writes and reads it).

    One row per (trial, group, metric name): ``width`` is the bucket width (batches, a
    power of two), ``raw_points`` the finite values folded in, ``batches`` and ``values``
    the kept points (at most 1,024, ascending in batches) packed as little-endian int64
    and float64 arrays (8 bytes a point each). The row named ``""`` of a (trial, group)
    is its marker: it exists once every report of that group has been folded in
    (``width`` 0, ``raw_points`` 0, empty arrays); a trial without it may have reports
    from before this table existed, which are summarised on first use.
    """

    __tablename__ = "metric_summaries"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    width: Mapped[int] = mapped_column(Integer)
    raw_points: Mapped[int] = mapped_column(Integer)
    batches: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)


class MetricFoldPendingRow(Base):
    """A stored metrics report (``metrics.id``) of a trial and group (``kind``) whose
    values are not yet folded into ``metric_summaries``.

    Written in the transaction that stores the report, deleted in the one that folds it
    (:mod:`dauntless.master.metric_series`): so an acknowledged report is durable as
    soon as its ``metrics`` row is, and the summaries of a (trial, group) are exactly
    the fold of its ``metrics`` rows that have no row here.
    """

    __tablename__ = "metric_folds_pending"
    __table_args__ = (Index("ix_metric_folds_pending_trial_id", "trial_id", "kind"),)

    metric_id: Mapped[int] = mapped_column(
        ForeignKey("metrics.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))


class InstanceRow(Base):
    """An instance the provisioner launched for a resource pool (a local agent process,
    an EC2 or a Compute Engine instance), kept so that a restarted master knows what it
    already launched.

    ``id`` is the name the master gave it, which is also its agent's id; ``provider_id``
    the provider's own id (process id, EC2 instance id, GCP instance name) once known.
    States: LAUNCHING (row written, provider call not yet confirmed), STARTING (launched,
    agent not registered), RUNNING (agent registered), TERMINATING (termination decided,
    agent disabled), TERMINATED. ``idle_since`` is when its agent last became idle
    (None while busy); ``reason`` says why it was terminated.
    """

    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(256), index=True)
    provider: Mapped[str] = mapped_column(String(16))
    provider_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    launched_at: Mapped[float] = mapped_column(Float)
    registered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    idle_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    terminated_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
