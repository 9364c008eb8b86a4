"""The requests the ``gcp`` provider builds (google-cloud-compute's own request types;
no Compute Engine endpoint can be reached from here)."""

from __future__ import annotations

import pytest

pytest.importorskip("google.cloud.compute_v1", reason="google-cloud-compute is not installed")

from dauntless.config import GCPProviderConfig  # noqa: E402
from dauntless.master.provisioner._agent_script import agent_boot_script  # noqa: E402
from dauntless.master.provisioner._loop import instance_name  # noqa: E402
from dauntless.master.provisioner.gcp import (  # noqa: E402
    delete_request,
    gcp_label,
    insert_request,
    list_request,
)

BASE = {
    "type": "gcp",
    "project": "proj-1",
    "zone": "us-central1-a",
    "boot_disk_source_image": "projects/proj-1/global/images/dauntless-agent",
}


def test_insert_request_of_a_gpu_instance():
    cfg = GCPProviderConfig.model_validate(
        {
            **BASE,
            "boot_disk_size": 100,
            "label_value": "My_Cluster",
            "instance_type": {
                "machine_type": "n1-standard-16",
                "gpu_type": "nvidia-tesla-v100",
                "gpu_num": 2,
                "preemptible": True,
            },
            "network_interface": {
                "subnetwork": "regions/us-central1/subnetworks/s1",
                "external_ip": True,
            },
            "network_tags": ["dauntless"],
            "service_account": {"email": "agents@proj-1.iam.gserviceaccount.com"},
        }
    )
    assert cfg.slots_per_instance() == 2
    script = agent_boot_script(
        "echo hi", "http://10.0.0.2:8080", "dauntless-gpu-1a2b3c4d", "gpu", "s3cret"
    )
    req = insert_request(cfg, "dauntless-gpu-1a2b3c4d", "GPU Pool", "ignored", script)
    assert req.project == "proj-1" and req.zone == "us-central1-a"
    inst = req.instance_resource
    assert inst.name == "dauntless-gpu-1a2b3c4d"
    assert inst.machine_type == "zones/us-central1-a/machineTypes/n1-standard-16"
    (disk,) = inst.disks
    assert disk.boot and disk.auto_delete
    assert disk.initialize_params.source_image == BASE["boot_disk_source_image"]
    assert disk.initialize_params.disk_size_gb == 100
    (acc,) = inst.guest_accelerators
    assert acc.accelerator_count == 2
    assert acc.accelerator_type == "zones/us-central1-a/acceleratorTypes/nvidia-tesla-v100"
    assert inst.scheduling.preemptible and not inst.scheduling.automatic_restart
    assert inst.scheduling.on_host_maintenance == "TERMINATE"
    assert dict(inst.labels) == {"dauntless-cluster": "my_cluster", "dauntless-pool": "gpu-pool"}
    (nic,) = inst.network_interfaces
    assert nic.network == "global/networks/default"
    assert nic.subnetwork == "regions/us-central1/subnetworks/s1"
    assert nic.access_configs[0].type_ == "ONE_TO_ONE_NAT"
    assert list(inst.tags.items) == ["dauntless"]
    assert inst.service_accounts[0].email == "agents@proj-1.iam.gserviceaccount.com"
    (item,) = inst.metadata.items
    assert item.key == "startup-script"
    assert "echo hi" in item.value and "--agent-id dauntless-gpu-1a2b3c4d" in item.value
    assert "--master-url http://10.0.0.2:8080" in item.value
    # the secret reaches the agent through its environment, not its command line
    assert "DAUNTLESS_CLUSTER_SECRET=s3cret" in item.value
    assert "s3cret" not in item.value.split("exec ", 1)[1]


def test_cpu_instance_without_gpus_and_internal_ip():
    cfg = GCPProviderConfig.model_validate(
        {**BASE, "cpu_slots_allowed": True, "instance_type": {"gpu_num": 0}}
    )
    assert cfg.slots_per_instance() == 1
    inst = insert_request(cfg, "n", "default", "dauntless", "#!/bin/bash").instance_resource
    assert list(inst.guest_accelerators) == []
    assert list(inst.network_interfaces[0].access_configs) == []
    assert inst.scheduling.on_host_maintenance == "MIGRATE"
    assert dict(inst.labels)["dauntless-cluster"] == "dauntless"


def test_delete_and_list_requests():
    cfg = GCPProviderConfig.model_validate(BASE)
    d = delete_request(cfg, "dauntless-default-0000aaaa")
    assert (d.project, d.zone, d.instance) == (
        "proj-1",
        "us-central1-a",
        "dauntless-default-0000aaaa",
    )
    lst = list_request(cfg, "Prod", "dauntless-default-0000aaaa")
    assert lst.filter == (
        '(labels.dauntless-cluster = "prod") AND (status != "TERMINATED") '
        'AND (name = "dauntless-default-0000aaaa")'
    )


def test_config_errors_and_names():
    with pytest.raises(ValueError, match="cpu_slots_allowed"):
        GCPProviderConfig.model_validate({**BASE, "instance_type": {"gpu_num": 0}})
    with pytest.raises(ValueError, match="project"):
        GCPProviderConfig.model_validate({k: v for k, v in BASE.items() if k != "project"})
    assert gcp_label("A.B c") == "a-b-c"
    name = instance_name("My Cluster", "GPU_pool")
    assert name.startswith("my-cluster-gpu-pool-") and len(name) <= 63
    assert instance_name("9x", "p")[0].isalpha()
