"""Task environments on the master's side: what a task asks of its agent's runtime, and
which agents can give it.

- :func:`task_environment` turns a config's ``environment``, ``bind_mounts``,
  ``resources`` and ``checkpoint_storage`` into the TaskSpec's ``environment`` object
  that the agent's runtime reads (:class:`dauntless.agent.runtimes.EnvironmentSpec`).
  Trials use it, and so can any other task type with the same config sections.
- :func:`required_features` names what the config needs of an agent (container
  images, mount namespaces) and the config field that needs it;
  :func:`agent_has` says whether an agent's registered ``runtime`` provides it. The
  scheduler places a task only on agents that have every feature it needs, and
  :func:`check_pool_can_run` refuses an experiment at create time when no agent of its
  pool could ever run it.
- The Unix identity a task runs as (issue 29) is a feature too
  (:func:`identity_feature`): a root agent gives any identity, a non-root one only its
  own. :func:`identity_needs` asks for it only where some agent of the pool cannot
  give it, so that on pools of root agents (or of agents that all run as the task's
  identity) the scheduler's order across users is unchanged.
"""

from __future__ import annotations

from typing import Any

from dauntless.config import ExperimentConfig, TaskIdentity, agent_refusal
from dauntless.config._experiment import (
    BindMount,
    EnvironmentConfig,
    ResourcesConfig,
    SharedFSStorage,
)

CONTAINERS = "containers"
"""Feature: runs tasks in container images (docker or podman runtime)."""
MOUNT_NAMESPACE = "mount_namespace"
"""Feature: makes bind mounts for tasks without an image (private mount namespace)."""
IDENTITY_PREFIX = "identity:"
"""Features ``identity:<uid>:<gid>``: runs tasks as that Unix identity."""


def identity_feature(identity: TaskIdentity) -> str:
    """The feature of running tasks as ``identity`` (``identity:<uid>:<gid>``)."""
    return f"{IDENTITY_PREFIX}{identity.uid}:{identity.gid}"


def identity_needs(identity: TaskIdentity, runtimes: list[dict[str, Any] | None]) -> frozenset[str]:
    """What a request of ``identity`` needs of a pool whose agents registered
    ``runtimes``: nothing when every one of them can run it, else its feature."""
    feature = identity_feature(identity)
    if all(agent_has(rt, feature) for rt in runtimes):
        return frozenset()
    return frozenset({feature})


def check_pool_identity(
    identity: TaskIdentity, pool: str, agents: list[tuple[str, str, dict[str, Any] | None]]
) -> list[tuple[str, str]]:
    """A config error when agents are registered in ``pool`` and none can run tasks as
    ``identity`` (a non-root agent runs only its own uid and gid).

    Args:
        identity: the task's resolved identity (:func:`dauntless.config.resolve_task_identity`).
        pool: the task's resource pool.
        agents: ``(agent id, pool, runtime)`` of every registered agent.

    Returns:
        ``[("resources.resource_pool", message)]``, or empty.
    """
    members = [(aid, rt) for aid, p, rt in agents if p == pool]
    reasons = [(aid, agent_refusal((rt or {}).get("identity"), identity)) for aid, rt in members]
    if not members or any(why is None for _, why in reasons):
        return []
    why_not = "; ".join(f"agent {aid}: {why}" for aid, why in reasons)
    return [
        (
            "resources.resource_pool",
            f"no agent in resource pool {pool!r} can run tasks as {identity.describe()} "
            f"({why_not}); an admin links the owner to an identity those agents run as "
            "(det user link-with-agent-user) or sets security.default_task, or runs the "
            "agent as root",
        )
    ]


def task_environment(
    environment: EnvironmentConfig,
    bind_mounts: list[BindMount],
    resources: ResourcesConfig,
    checkpoint_storage: Any = None,
) -> dict[str, Any]:
    """The TaskSpec's ``environment`` object (docs/protocol.md, "Agent channel")."""
    storage_paths = []
    if isinstance(checkpoint_storage, SharedFSStorage):
        storage_paths.append(checkpoint_storage.host_path)
    return {
        "image": environment.image,
        "force_pull_image": environment.force_pull_image,
        "registry_auth": environment.registry_auth,
        "bind_mounts": [m.model_dump(mode="json") for m in bind_mounts],
        "shm_size": resources.shm_size_bytes(),
        "devices": [d.model_dump(mode="json") for d in resources.device_list()],
        "add_capabilities": list(environment.add_capabilities),
        "drop_capabilities": list(environment.drop_capabilities),
        "python_requirements": environment.python_requirements,
        "storage_paths": storage_paths,
        "pod_spec": environment.pod_spec is not None,
    }


def required_features(
    environment: EnvironmentConfig, bind_mounts: list[BindMount]
) -> dict[str, str]:
    """What a task with this config needs of its agent: ``{feature: config field}``."""
    if environment.image is not None:
        return {CONTAINERS: "environment.image"}
    if bind_mounts:
        return {MOUNT_NAMESPACE: "bind_mounts"}
    return {}


def agent_has(runtime: dict[str, Any] | None, feature: str) -> bool:
    """Whether an agent's registered ``runtime`` provides ``feature`` (an agent that
    reported no runtime runs plain processes without mount namespaces)."""
    if feature.startswith(IDENTITY_PREFIX):
        uid, gid = (int(x) for x in feature[len(IDENTITY_PREFIX) :].split(":"))
        task = TaskIdentity(uid, gid, str(uid), str(gid))
        return agent_refusal((runtime or {}).get("identity"), task) is None
    return bool((runtime or {}).get(feature, False))


def check_pool_can_run(
    cfg: ExperimentConfig, pool: str, agents: list[tuple[str, str, dict[str, Any] | None]]
) -> list[tuple[str, str]]:
    """Config errors when agents are registered in ``pool`` and none can run ``cfg``.

    A pool with no registered agent yet is given the benefit of the doubt (agents may
    join later); a task then waits until one that can run it registers.

    Args:
        cfg: the experiment config.
        pool: the experiment's resource pool.
        agents: ``(agent id, pool, runtime)`` of every registered agent.

    Returns:
        ``[(field, message)]``, empty when the pool can run it.
    """
    errors = []
    members = [(aid, rt) for aid, p, rt in agents if p == pool]
    for feature, field in required_features(cfg.environment, cfg.bind_mounts).items():
        if not members or any(agent_has(rt, feature) for _, rt in members):
            continue
        able = sorted({p for _, p, rt in agents if agent_has(rt, feature)})
        runtimes = ", ".join(f"{aid} ({(rt or {}).get('name', 'process')})" for aid, rt in members)
        what = (
            "run container images (docker or podman runtime)"
            if feature == CONTAINERS
            else "make bind mounts (a private mount namespace: root or user namespaces)"
        )
        where = f"pools with such agents: {able}" if able else "no pool has such an agent"
        errors.append(
            (
                field,
                f"no agent in resource pool {pool!r} can {what}; its agents: {runtimes}; {where}",
            )
        )
    return errors
