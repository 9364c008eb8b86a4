"""Turning a pool's ``scheduler`` config block into a :class:`PoolSpec`."""

from __future__ import annotations

from dauntless.config import ResourcePoolConfig

from ._model import PoolSpec

_KEYS = ("type", "preemption", "default_priority", "fitting_policy")


def pool_spec_from_config(config: ResourcePoolConfig) -> PoolSpec:
    """Build a pool's :class:`PoolSpec` from its master-config entry.

    The ``scheduler`` block takes Determined's keys (reference section 7.6): ``type``
    (``priority``, the default, or ``fair_share``), ``preemption`` (false),
    ``default_priority`` (42) and ``fitting_policy`` (``best`` or ``worst``).
    ``max_cpu_containers_per_agent`` becomes ``max_zero_slot_tasks_per_agent``.

    Args:
        config: one entry of the master config's ``resource_pools``.

    Returns:
        The validated :class:`PoolSpec`.

    Raises:
        TypeError: ``config`` is not a ResourcePoolConfig, or a value has the wrong type.
        ValueError: an unknown key, ``round_robin`` (removed in Determined 0.34), or any
            other unknown scheduler type or fitting policy.
    """
    if not isinstance(config, ResourcePoolConfig):
        raise TypeError(f"config must be a ResourcePoolConfig, got {type(config).__name__}")
    block = dict(config.scheduler)
    unknown = sorted(set(block) - set(_KEYS))
    if unknown:
        raise ValueError(
            f"resource pool {config.pool_name!r}: unknown scheduler keys {unknown}; "
            f"allowed keys are {list(_KEYS)}"
        )
    kind = block.get("type", "priority")
    if kind == "round_robin":
        raise ValueError(
            f"resource pool {config.pool_name!r}: scheduler type 'round_robin' was removed; "
            "use 'priority' or 'fair_share'"
        )
    return PoolSpec(
        name=config.pool_name,
        scheduler=kind,
        preemption=block.get("preemption", False),
        default_priority=block.get("default_priority", 42),
        fitting_policy=block.get("fitting_policy", "best"),
        max_zero_slot_tasks_per_agent=config.max_cpu_containers_per_agent,
    )
