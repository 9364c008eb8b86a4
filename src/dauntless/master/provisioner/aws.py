"""The ``aws`` provider: EC2 instances through boto3 (extra ``aws``).

Each instance is launched from ``image_id`` (an AMI with Python and Dauntless) and/or a
``launch_template``, with the pool's ``instance_type``, its agent's boot script as user
data, and tags that identify it: ``tag_key: tag_value`` (the cluster; default
``dauntless-cluster: <cluster_name>``), ``dauntless-instance: <name>`` (its agent id),
``dauntless-pool`` and ``Name``, plus ``custom_tags``. With ``spot: true`` a spot
instance is asked for first; when EC2 has no spot capacity or refuses the price, the
launch falls back to on-demand.

Tested against moto's EC2 server (``moto[server]``, a local HTTP endpoint set with
``endpoint_url``); it has never started a real machine in this project's tests.
"""

from __future__ import annotations

import logging
from typing import Any

from dauntless.config import AWSProviderConfig

from ._agent_script import agent_boot_script
from ._base import Provider, ProviderError

log = logging.getLogger("dauntless.master.provisioner")

INSTANCE_TAG = "dauntless-instance"
POOL_TAG = "dauntless-pool"
SPOT_FALLBACK_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "UnfulfillableCapacity",
        "InsufficientSpotInstanceCapacity",
    }
)
"""EC2 error codes after which a spot launch is retried on demand."""


def run_instances_params(
    cfg: AWSProviderConfig,
    name: str,
    pool: str,
    cluster_name: str,
    user_data: str,
    spot: bool,
) -> dict[str, Any]:
    """The keyword arguments of ``ec2.run_instances`` for one instance."""
    tag_value = cfg.tag_value or cluster_name
    tags = [
        {"Key": cfg.tag_key, "Value": tag_value},
        {"Key": INSTANCE_TAG, "Value": name},
        {"Key": POOL_TAG, "Value": pool},
        {"Key": "Name", "Value": f"{cfg.instance_name}-{name}"},
        *({"Key": t["key"], "Value": t["value"]} for t in cfg.custom_tags),
    ]
    params: dict[str, Any] = {
        "MinCount": 1,
        "MaxCount": 1,
        "InstanceType": cfg.instance_type,
        "UserData": user_data,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {
                    "VolumeSize": cfg.root_volume_size,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
    }
    if cfg.image_id:
        params["ImageId"] = cfg.image_id
    if cfg.launch_template:
        lt = cfg.launch_template
        spec = {"Version": str(lt.get("version", "$Default"))}
        if "id" in lt:
            spec["LaunchTemplateId"] = lt["id"]
        else:
            spec["LaunchTemplateName"] = lt.get("name", "")
        params["LaunchTemplate"] = spec
    if cfg.ssh_key_name:
        params["KeyName"] = cfg.ssh_key_name
    if cfg.iam_instance_profile_arn:
        params["IamInstanceProfile"] = {"Arn": cfg.iam_instance_profile_arn}
    nic = cfg.network_interface
    if nic.subnet_id or nic.security_group_id or not nic.public_ip:
        iface: dict[str, Any] = {"DeviceIndex": 0, "AssociatePublicIpAddress": nic.public_ip}
        if nic.subnet_id:
            iface["SubnetId"] = nic.subnet_id
        if nic.security_group_id:
            iface["Groups"] = [nic.security_group_id]
        params["NetworkInterfaces"] = [iface]
    if spot:
        options: dict[str, Any] = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if cfg.spot_max_price:
            options["MaxPrice"] = cfg.spot_max_price
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
    return params


class AWSProvider(Provider):
    """EC2 instances of one pool.

    Args:
        config: the pool's ``provider`` section (``type: aws``).
        pool: the resource pool.
        cluster_name: the master's ``cluster_name`` (the default ``tag_value``).
        master_url: the URL agents reach the master at.
        cluster_secret: the secret agents present.
        client: a boto3 EC2 client; made from ``region`` and ``endpoint_url`` when None.

    Raises:
        ImportError: boto3 is not installed (``pip install 'dauntless[aws]'``).
    """

    kind = "aws"

    def __init__(
        self,
        config: AWSProviderConfig,
        pool: str,
        cluster_name: str,
        master_url: str,
        cluster_secret: str,
        client: Any = None,
    ) -> None:
        try:
            import boto3
            import botocore.exceptions
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError("the aws provider needs boto3: pip install 'dauntless[aws]'") from exc
        self._client_error = botocore.exceptions.ClientError
        self._boto_error = botocore.exceptions.BotoCoreError
        self.config = config
        self.pool = pool
        self.cluster_name = cluster_name
        self.master_url = master_url
        self.secret = cluster_secret
        self.ec2 = client or boto3.client(
            "ec2", region_name=config.region, endpoint_url=config.endpoint_url
        )

    def _user_data(self, name: str) -> str:
        return agent_boot_script(
            self.config.startup_script, self.master_url, name, self.pool, self.secret
        )

    def launch(self, name: str) -> str:
        spot = self.config.spot
        while True:
            params = run_instances_params(
                self.config, name, self.pool, self.cluster_name, self._user_data(name), spot
            )
            try:
                out = self.ec2.run_instances(**params)
                return str(out["Instances"][0]["InstanceId"])
            except self._client_error as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if spot and code in SPOT_FALLBACK_CODES:
                    log.warning("no spot instance for %s (%s): launching on demand", name, code)
                    spot = False
                    continue
                raise ProviderError(f"EC2 run_instances for {name} failed: {exc}") from exc
            except self._boto_error as exc:
                raise ProviderError(f"EC2 run_instances for {name} failed: {exc}") from exc

    def _filters(self, name: str | None = None) -> list[dict[str, Any]]:
        filters = [
            {
                "Name": f"tag:{self.config.tag_key}",
                "Values": [self.config.tag_value or self.cluster_name],
            },
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        if name is not None:
            filters.append({"Name": f"tag:{INSTANCE_TAG}", "Values": [name]})
        return filters

    def find(self, name: str) -> str | None:
        try:
            out = self.ec2.describe_instances(Filters=self._filters(name))
        except (self._client_error, self._boto_error) as exc:
            raise ProviderError(f"EC2 describe_instances failed: {exc}") from exc
        for res in out.get("Reservations", []):
            for inst in res.get("Instances", []):
                return str(inst["InstanceId"])
        return None

    def terminate(self, name: str, provider_id: str | None) -> None:
        instance_id = provider_id or self.find(name)
        if instance_id is None:
            return
        try:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return
            raise ProviderError(f"EC2 terminate_instances {instance_id} failed: {exc}") from exc
        except self._boto_error as exc:
            raise ProviderError(f"EC2 terminate_instances {instance_id} failed: {exc}") from exc
