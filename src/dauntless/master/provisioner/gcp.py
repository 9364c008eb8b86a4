"""The ``gcp`` provider: Compute Engine instances through google-cloud-compute (extra
``gcp``).

Each instance is named after its agent, boots ``boot_disk_source_image`` with the pool's
machine type, GPUs and network, carries its agent's boot script as the
``startup-script`` metadata item, and the labels ``label_key: label_value`` (the
cluster) and ``dauntless-pool``. ``preemptible`` instances are asked for as such; GPU
instances terminate on host maintenance, as Compute Engine requires.

Only the requests it builds are tested here (no Compute Engine endpoint can be reached);
it has never started a real machine in this project's tests.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from dauntless.config import GCPProviderConfig

from ._agent_script import agent_boot_script
from ._base import Provider, ProviderError

log = logging.getLogger("dauntless.master.provisioner")

POOL_LABEL = "dauntless-pool"


def gcp_label(value: str) -> str:
    """``value`` as a Compute Engine label value: lowercase letters, digits, ``-`` and
    ``_``, at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def insert_request(
    cfg: GCPProviderConfig, name: str, pool: str, cluster_name: str, startup_script: str
) -> Any:
    """The ``compute_v1.InsertInstanceRequest`` that creates instance ``name``."""
    from google.cloud import compute_v1

    it = cfg.instance_type
    zone = cfg.zone
    nic = compute_v1.NetworkInterface(network=cfg.network_interface.network)
    if cfg.network_interface.subnetwork:
        nic.subnetwork = cfg.network_interface.subnetwork
    if cfg.network_interface.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    instance = compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{it.machine_type}",
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=cfg.boot_disk_source_image,
                    disk_size_gb=cfg.boot_disk_size,
                ),
            )
        ],
        network_interfaces=[nic],
        labels={
            cfg.label_key: gcp_label(cfg.label_value or cluster_name),
            POOL_LABEL: gcp_label(pool),
        },
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="startup-script", value=startup_script)]
        ),
        scheduling=compute_v1.Scheduling(
            preemptible=it.preemptible,
            automatic_restart=not it.preemptible,
            on_host_maintenance="TERMINATE" if it.gpu_num or it.preemptible else "MIGRATE",
        ),
    )
    if it.gpu_num:
        instance.guest_accelerators = [
            compute_v1.AcceleratorConfig(
                accelerator_count=it.gpu_num,
                accelerator_type=f"zones/{zone}/acceleratorTypes/{it.gpu_type}",
            )
        ]
    if cfg.network_tags:
        instance.tags = compute_v1.Tags(items=list(cfg.network_tags))
    if cfg.service_account.email:
        instance.service_accounts = [
            compute_v1.ServiceAccount(
                email=cfg.service_account.email, scopes=list(cfg.service_account.scopes)
            )
        ]
    return compute_v1.InsertInstanceRequest(
        project=cfg.project, zone=zone, instance_resource=instance
    )


def delete_request(cfg: GCPProviderConfig, name: str) -> Any:
    """The ``compute_v1.DeleteInstanceRequest`` that deletes instance ``name``."""
    from google.cloud import compute_v1

    return compute_v1.DeleteInstanceRequest(project=cfg.project, zone=cfg.zone, instance=name)


def list_request(cfg: GCPProviderConfig, cluster_name: str, name: str | None = None) -> Any:
    """The ``compute_v1.ListInstancesRequest`` of this cluster's live instances (named
    ``name`` when given)."""
    from google.cloud import compute_v1

    label = gcp_label(cfg.label_value or cluster_name)
    flt = f'(labels.{cfg.label_key} = "{label}") AND (status != "TERMINATED")'
    if name is not None:
        flt += f' AND (name = "{name}")'
    return compute_v1.ListInstancesRequest(project=cfg.project, zone=cfg.zone, filter=flt)


class GCPProvider(Provider):
    """Compute Engine instances of one pool.

    Args:
        config: the pool's ``provider`` section (``type: gcp``).
        pool: the resource pool.
        cluster_name: the master's ``cluster_name`` (the default ``label_value``).
        master_url: the URL agents reach the master at.
        cluster_secret: the secret agents present.
        client: a ``compute_v1.InstancesClient``; made with the default credentials
            when None.
        operation_timeout: seconds to wait for an insert or delete to finish.

    Raises:
        ImportError: google-cloud-compute is not installed (``pip install 'dauntless[gcp]'``).
    """

    kind = "gcp"

    def __init__(
        self,
        config: GCPProviderConfig,
        pool: str,
        cluster_name: str,
        master_url: str,
        cluster_secret: str,
        client: Any = None,
        operation_timeout: float = 300.0,
    ) -> None:
        try:
            from google.api_core import exceptions as api_exceptions
            from google.cloud import compute_v1
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the gcp provider needs google-cloud-compute: pip install 'dauntless[gcp]'"
            ) from exc
        self._api_error = api_exceptions.GoogleAPIError
        self._not_found = api_exceptions.NotFound
        self.config = config
        self.pool = pool
        self.cluster_name = cluster_name
        self.master_url = master_url
        self.secret = cluster_secret
        self.timeout = operation_timeout
        self._client = client
        self._client_cls = compute_v1.InstancesClient

    @property
    def client(self) -> Any:
        """The Compute Engine client, made on first use (it looks up credentials)."""
        if self._client is None:
            self._client = self._client_cls()
        return self._client

    def launch(self, name: str) -> str:
        script = agent_boot_script(
            self.config.startup_script, self.master_url, name, self.pool, self.secret
        )
        request = insert_request(self.config, name, self.pool, self.cluster_name, script)
        try:
            self.client.insert(request=request).result(timeout=self.timeout)
        except self._api_error as exc:
            raise ProviderError(f"Compute Engine insert of {name} failed: {exc}") from exc
        return name

    def terminate(self, name: str, provider_id: str | None) -> None:
        try:
            self.client.delete(request=delete_request(self.config, name)).result(
                timeout=self.timeout
            )
        except self._not_found:
            return
        except self._api_error as exc:
            raise ProviderError(f"Compute Engine delete of {name} failed: {exc}") from exc

    def find(self, name: str) -> str | None:
        try:
            for inst in self.client.list(
                request=list_request(self.config, self.cluster_name, name)
            ):
                return str(inst.name)
        except self._api_error as exc:
            raise ProviderError(f"Compute Engine list failed: {exc}") from exc
        return None
