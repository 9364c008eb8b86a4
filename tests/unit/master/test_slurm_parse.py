"""The pure parts of the Slurm resource manager: sinfo parsing and sbatch options."""

from __future__ import annotations

import pytest

from dauntless.config import MasterConfig, SlurmResourceManagerConfig
from dauntless.master.slurm import Node, SlurmError, parse_gres, parse_sinfo, sbatch_args


def test_parse_gres():
    assert parse_gres("(null)", "gpu") == 0
    assert parse_gres("gpu:2", "gpu") == 2
    assert parse_gres("gpu:a100:4(S:0-1)", "gpu") == 4
    assert parse_gres("gpu:a100:4(S:0-1),gpu:t4:1,mps:100", "gpu") == 5
    assert parse_gres("mps:100", "gpu") == 0


def test_parse_sinfo_finds_the_default_partition():
    text = "n1|batch*|64|gpu:8|idle\nn2|batch*|64|gpu:8|mixed\nn2|long|64|gpu:8|mixed\n"
    default, nodes = parse_sinfo(text, "gpu")
    assert default == "batch"
    assert nodes[0] == Node("n1", "batch", 64, 8, "idle")
    assert [(n.name, n.partition) for n in nodes] == [
        ("n1", "batch"),
        ("n2", "batch"),
        ("n2", "long"),
    ]
    with pytest.raises(SlurmError, match="unexpected sinfo line"):
        parse_sinfo("n1|batch", "gpu")


def test_sbatch_args_for_gpu_and_cpu_slots():
    gpu = SlurmResourceManagerConfig(type="slurm", job_time_limit=90)
    args = sbatch_args(gpu, "abc", "batch", "n1", 4, "/shared/abc.out")
    assert "--job-name=dauntless-abc" in args
    assert "--partition=batch" in args and "--nodelist=n1" in args
    assert "--nodes=1" in args and "--ntasks=1" in args
    assert "--gres=gpu:4" in args and "--time=90" in args
    assert not any(a.startswith("--cpus-per-task") for a in args)
    cpu = SlurmResourceManagerConfig(type="slurm", slot_type="cpu")
    args = sbatch_args(cpu, "abc", "batch", "n1", 2, "/o")
    assert "--cpus-per-task=2" in args and not any(a.startswith("--gres") for a in args)
    assert "--cpus-per-task=1" in sbatch_args(cpu, "z", "batch", "n1", 0, "/o")


def test_providers_are_refused_under_slurm():
    with pytest.raises(ValueError, match=r"resource_pools\[default\].provider"):
        MasterConfig.model_validate(
            {
                "data_dir": "/tmp/x",
                "resource_manager": {"type": "slurm"},
                "resource_pools": [
                    {"pool_name": "default", "provider": {"type": "local"}},
                ],
            }
        )
    with pytest.raises(ValueError, match="min_instances"):
        MasterConfig.model_validate(
            {
                "data_dir": "/tmp/x",
                "resource_pools": [
                    {
                        "pool_name": "default",
                        "provider": {"type": "local", "min_instances": 3, "max_instances": 2},
                    }
                ],
            }
        )
