"""Agents provisioned on demand: per resource pool with a ``provider``, a
:class:`PoolProvisioner` decides (through the pure
:func:`dauntless.scheduler.provision`) and a provider starts and stops instances:
``local`` (agent processes on this host), ``aws`` (EC2 via boto3), ``gcp`` (Compute
Engine via google-cloud-compute).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._base import Provider, ProviderError
from ._loop import PoolProvisioner, Provisioners

if TYPE_CHECKING:
    from dauntless.config import ResourcePoolConfig

    from ..context import MasterContext

__all__ = [
    "PoolProvisioner",
    "Provider",
    "ProviderError",
    "Provisioners",
    "build_provider",
    "build_provisioners",
]


def build_provider(manager: MasterContext, pool: ResourcePoolConfig) -> Provider:
    """The provider of ``pool`` (which must have a ``provider`` section).

    Raises:
        ImportError: the provider's client library (boto3, google-cloud-compute) is not
            installed; the message names the extra to install.
    """
    from ..auth import load_cluster_secret

    cfg = pool.provider
    assert cfg is not None
    master_url = cfg.master_url or manager.public_url()
    secret = load_cluster_secret(manager.config)
    if cfg.type == "local":
        from .local import LocalProvider

        work_dir = cfg.work_dir or os.path.join(manager.config.data_dir, "instances")
        return LocalProvider(cfg, pool.pool_name, master_url, secret, work_dir)
    if cfg.type == "aws":
        from .aws import AWSProvider

        return AWSProvider(cfg, pool.pool_name, manager.config.cluster_name, master_url, secret)
    from .gcp import GCPProvider

    return GCPProvider(cfg, pool.pool_name, manager.config.cluster_name, master_url, secret)


def build_provisioners(manager: MasterContext) -> Provisioners | None:
    """The provisioners of every pool with a provider, or None when no pool has one."""
    pools = [
        PoolProvisioner(manager, pool, build_provider(manager, pool))
        for pool in manager.config.resource_pools
        if pool.provider is not None
    ]
    return Provisioners(pools) if pools else None
