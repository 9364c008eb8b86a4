"""``resource_pools[].provider``: agents provisioned on demand (Determined's dynamic
agents; its field names), and ``resource_manager``.

Durations (``max_idle_agent_period``, ``max_agent_starting_period``) are seconds, or
strings with a unit as Determined writes them: ``"30s"``, ``"20m"``, ``"1h"``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")


def parse_duration(value: Any) -> Any:
    """Seconds from ``30``, ``30.5``, ``"30s"``, ``"20m"``, ``"1h"`` or ``"500ms"``.

    Raises:
        ValueError: a string that is not a number followed by ms, s, m or h.
    """
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m is None:
            raise ValueError(
                f"expected seconds or a duration such as '30s', '20m', '1h'; got {value!r}"
            )
        return float(m.group(1)) * _UNITS[m.group(2)]
    return value


Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ProviderBase(_Strict):
    """Fields every provider shares (Determined's names).

    Attributes:
        master_url: the URL the provisioned agents reach the master at; the master's own
            public URL when None.
        startup_script: a shell script run on the instance before its agent starts.
        min_instances: instances kept running without demand.
        max_instances: the most instances at once.
        max_idle_agent_period: seconds an idle agent's instance lives on (default 20m).
        max_agent_starting_period: seconds an instance may take to register its agent
            before it is terminated and replaced (default 20m).
    """

    master_url: str | None = None
    startup_script: str = ""
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(default=5, ge=0)
    max_idle_agent_period: Duration = 1200.0
    max_agent_starting_period: Duration = 1200.0

    @model_validator(mode="after")
    def _min_le_max(self) -> _ProviderBase:
        if self.min_instances > self.max_instances:
            raise ValueError(
                f"min_instances ({self.min_instances}) must not exceed max_instances "
                f"({self.max_instances})"
            )
        return self

    def slots_per_instance(self) -> int:
        """Slots one instance's agent reports."""
        raise NotImplementedError  # abstract: each provider config overrides it


class LocalInstanceType(_Strict):
    """A local instance: an agent process on the master's machine.

    Attributes:
        slots: artificial CPU slots the agent reports (``--artificial-slots``).
    """

    slots: int = Field(default=1, ge=0)


class LocalProviderConfig(_ProviderBase):
    """``type: local``: instances are agent processes started on the master's host (for
    trying the provisioner out and for its end-to-end tests).

    Attributes:
        instance_type: ``{slots: N}``.
        work_dir: where instances keep their work and logs; ``<data_dir>/instances``
            when None.
    """

    type: Literal["local"]
    instance_type: LocalInstanceType = Field(default_factory=LocalInstanceType)
    work_dir: str | None = None

    def slots_per_instance(self) -> int:
        return self.instance_type.slots


# GPUs of the EC2 instance types Determined's docs list for its agents.
AWS_GPUS: dict[str, int] = {
    "g4dn.xlarge": 1,
    "g4dn.2xlarge": 1,
    "g4dn.4xlarge": 1,
    "g4dn.8xlarge": 1,
    "g4dn.12xlarge": 4,
    "g4dn.16xlarge": 1,
    "g4dn.metal": 8,
    "g5.xlarge": 1,
    "g5.2xlarge": 1,
    "g5.12xlarge": 4,
    "g5.48xlarge": 8,
    "p2.xlarge": 1,
    "p2.8xlarge": 8,
    "p2.16xlarge": 16,
    "p3.2xlarge": 1,
    "p3.8xlarge": 4,
    "p3.16xlarge": 8,
    "p3dn.24xlarge": 8,
    "p4d.24xlarge": 8,
    "p5.48xlarge": 8,
}


class AWSNetworkInterface(_Strict):
    """``network_interface`` of the AWS provider."""

    public_ip: bool = True
    security_group_id: str = ""
    subnet_id: str = ""


class AWSProviderConfig(_ProviderBase):
    """``type: aws``: EC2 instances through boto3.

    Attributes:
        region: the AWS region (``us-west-2``).
        endpoint_url: another EC2 endpoint (a test server); AWS's when None.
        image_id: the AMI the instances boot (it must have Python and Dauntless).
        launch_template: ``{id or name, version}`` of an EC2 launch template, used in
            place of (or besides) ``image_id``.
        instance_type: EC2 instance type; its GPU count gives the slots.
        instance_slots: slots per instance, for a type not in the known table.
        cpu_slots_allowed: a type without GPUs gives one CPU slot.
        root_volume_size: GiB of the root volume.
        ssh_key_name: EC2 key pair name.
        iam_instance_profile_arn: instance profile ARN.
        network_interface: public IP, security group, subnet.
        tag_key, tag_value: the tag that marks this cluster's instances
            (default ``dauntless-cluster`` = the cluster name).
        instance_name: the ``Name`` tag's prefix.
        custom_tags: more tags, ``[{key, value}]``.
        spot: ask for spot instances; on ``InsufficientInstanceCapacity`` or a spot
            error the launch falls back to on-demand.
        spot_max_price: the highest price per hour (a string, as EC2 takes it).
    """

    type: Literal["aws"]
    region: str = "us-west-2"
    endpoint_url: str | None = None
    image_id: str = ""
    launch_template: dict[str, str] | None = None
    instance_type: str = "g4dn.metal"
    instance_slots: int | None = Field(default=None, ge=0)
    cpu_slots_allowed: bool = False
    root_volume_size: int = Field(default=200, ge=1)
    ssh_key_name: str = ""
    iam_instance_profile_arn: str = ""
    network_interface: AWSNetworkInterface = Field(default_factory=AWSNetworkInterface)
    tag_key: str = "dauntless-cluster"
    tag_value: str | None = None
    instance_name: str = "dauntless-agent"
    custom_tags: list[dict[str, str]] = Field(default_factory=list)
    spot: bool = False
    spot_max_price: str | None = None

    @model_validator(mode="after")
    def _image_and_slots(self) -> AWSProviderConfig:
        if not self.image_id and not self.launch_template:
            raise ValueError("the aws provider needs image_id (an AMI) or launch_template")
        self.slots_per_instance()
        return self

    def slots_per_instance(self) -> int:
        if self.instance_slots is not None:
            return self.instance_slots
        if self.instance_type in AWS_GPUS:
            return AWS_GPUS[self.instance_type]
        if self.cpu_slots_allowed:
            return 1
        raise ValueError(
            f"instance_type {self.instance_type!r} has no known GPU count: set "
            "instance_slots, or cpu_slots_allowed: true for one CPU slot"
        )


class GCPInstanceType(_Strict):
    """``instance_type`` of the GCP provider."""

    machine_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = Field(default=4, ge=0)
    preemptible: bool = False


class GCPNetworkInterface(_Strict):
    """``network_interface`` of the GCP provider."""

    network: str = "global/networks/default"
    subnetwork: str = ""
    external_ip: bool = False


class GCPServiceAccount(_Strict):
    """``service_account`` of the GCP provider."""

    email: str = ""
    scopes: list[str] = Field(
        default_factory=lambda: ["https://www.googleapis.com/auth/cloud-platform"]
    )


class GCPProviderConfig(_ProviderBase):
    """``type: gcp``: Compute Engine instances through google-cloud-compute.

    Attributes:
        project: the GCP project id.
        zone: the zone (``us-central1-a``).
        boot_disk_size: GB of the boot disk.
        boot_disk_source_image: the image (``projects/P/global/images/I``).
        label_key, label_value: the label that marks this cluster's instances.
        name_prefix: the prefix of instance names.
        network_interface, network_tags, service_account: as Compute Engine takes them.
        instance_type: machine type, GPU type and number, preemptible.
        cpu_slots_allowed: a machine without GPUs gives one CPU slot.
    """

    type: Literal["gcp"]
    project: str
    zone: str
    boot_disk_size: int = Field(default=200, ge=10)
    boot_disk_source_image: str
    label_key: str = "dauntless-cluster"
    label_value: str | None = None
    name_prefix: str = "dauntless-agent"
    network_interface: GCPNetworkInterface = Field(default_factory=GCPNetworkInterface)
    network_tags: list[str] = Field(default_factory=list)
    service_account: GCPServiceAccount = Field(default_factory=GCPServiceAccount)
    instance_type: GCPInstanceType = Field(default_factory=GCPInstanceType)
    cpu_slots_allowed: bool = False

    @model_validator(mode="after")
    def _slots(self) -> GCPProviderConfig:
        self.slots_per_instance()
        return self

    def slots_per_instance(self) -> int:
        if self.instance_type.gpu_num > 0:
            return self.instance_type.gpu_num
        if self.cpu_slots_allowed:
            return 1
        raise ValueError("instance_type.gpu_num is 0: set cpu_slots_allowed: true for one CPU slot")


ProviderConfig = Annotated[
    LocalProviderConfig | AWSProviderConfig | GCPProviderConfig, Field(discriminator="type")
]


class SlurmResourceManagerConfig(_Strict):
    """``resource_manager: {type: slurm, ...}``: allocations run as Slurm jobs.

    Attributes:
        sbatch, squeue, scancel, sinfo, sacct: paths of the Slurm commands.
        slurm_conf: a ``slurm.conf`` to pass the commands (``SLURM_CONF``); the system's
            when None.
        job_time_limit: minutes of a job's ``--time``; Slurm's partition default when None.
        gres_type: the ``--gres`` name of a slot (``gpu``); with ``slot_type: cpu`` a
            slot is one CPU (``--cpus-per-task``) and no gres is asked for.
        slot_type: ``cuda`` (slots are GPUs) or ``cpu``.
        poll_interval: seconds between squeue polls.
        python: the Python that runs the task launcher on the nodes.
        work_dir: a directory on a file system the nodes share, for job scripts,
            task directories and job output.
    """

    type: Literal["slurm"]
    sbatch: str = "sbatch"
    squeue: str = "squeue"
    scancel: str = "scancel"
    sinfo: str = "sinfo"
    sacct: str = "sacct"
    slurm_conf: str | None = None
    job_time_limit: int | None = Field(default=None, ge=1)
    gres_type: str = "gpu"
    slot_type: Literal["cuda", "cpu"] = "cuda"
    poll_interval: float = Field(default=1.0, gt=0)
    python: str | None = None
    work_dir: str | None = None


class AgentResourceManagerConfig(_Strict):
    """``resource_manager: {type: agent}`` (the default): tasks run on Dauntless agents
    (each pool's ``scheduler`` is set on the pool)."""

    type: Literal["agent"] = "agent"


ResourceManagerConfig = Annotated[
    AgentResourceManagerConfig | SlurmResourceManagerConfig, Field(discriminator="type")
]
